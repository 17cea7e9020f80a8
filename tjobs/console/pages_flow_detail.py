"""One flow's page: when it was scheduled, its status, the request it sends, every attempt the store keeps
and what the receiver answered to the newest sends.

The request is rebuilt from the task as it is now (:class:`tjobs.delivery.message.CallbackMessage`, the
deliverer's own code) with the first attempt's send time, not stored per flow: a fire stores nothing
more. Each kept answer names the task version whose callback and payload made its request, so the page
says "as sent" only when that is the task's current version, and otherwise which version sent it. The
signature and every header or JSON key that looks like a secret is masked (:mod:`tjobs.delivery.answers`);
a named target's own address, headers and credentials are added by its transport and shown on the
target's page, credentials never.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.api.render import answers_json, flow_json, run_log_json, task_json
from tjobs.console.context import ConsoleRoute, console_of
from tjobs.delivery.answers import masked_headers, masked_json
from tjobs.delivery.message import CallbackMessage
from tjobs.errors import NotFound
from tjobs.model import ANSWER_BODY_BYTES, App, Flow, Task

router = APIRouter(route_class=ConsoleRoute)


@router.get("/console/flows/{flow_id}")
async def flow_page(request: Request, flow_id: str) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    owner = await console.flow_owner(principal, flow_id)
    flow = await console.node.tasks.get_flow(owner, flow_id)
    try:
        task: Task | None = await console.node.tasks.get(owner, flow.task_id)
    except NotFound:  # deleted: its flows stay as history
        task = None
    sent = None if task is None else request_sent(task, flow, owner, console.node.settings.callbacks.timeout_ms)
    return console.render(
        request,
        "flow.html",
        principal,
        owner=owner,
        flow=flow_json(flow),
        task=None if task is None else task_json(task),
        sent=sent,
        answers=answers_json(flow),
        answer_body_bytes=ANSWER_BODY_BYTES,
        run_log=run_log_json(flow),
        run_log_purged=flow.run_log_purged,
        run_log_lines=flow.run_log_lines,
        run_result=None if flow.run is None else masked_json(flow.run.result),  # secret-looking keys masked
        parent_flows=await console.node.child_flows.triggering(flow),  # README "Child tasks"
        child_flows=await console.node.child_flows.triggered_by(flow),
    )


@router.post("/console/flows/{flow_id}/cancel")
async def cancel_run(request: Request, flow_id: str) -> Response:
    """Ask the flow's running run to stop (an operator's; README "Job runs"), then back to its page."""
    console = console_of(request)
    principal, _ = await console.posted(request)
    owner = await console.flow_owner(principal, flow_id)
    await console.node.runs.cancel(owner, flow_id)
    return RedirectResponse(f"/console/flows/{flow_id}", status_code=303)


def request_sent(task: Task, flow: Flow, app: App, default_timeout_ms: int) -> dict[str, Any]:
    """The request of the flow's first attempt as the task's current version builds it (masked), and how
    that version stands to the ones its kept answers were sent by (``provenance``)."""
    message = CallbackMessage(task, flow, app, flow.id, default_timeout_ms)
    records = flow.attempt_log.records if flow.attempt_log is not None else ()
    first_send_ms = records[0].started_at_ms if records and records[0].attempt == 1 else flow.scheduled_at_ms
    try:
        headers, body = message.signed(1, first_send_ms)
    except ValueError:  # the app has no signing secret: the deliverer could not send it either
        headers, body = {}, message.body_for(1)
    versions = sorted({answer.task_revision for answer in flow.answers or ()})
    if flow.attempts == 0:
        provenance = "unsent"
    elif not versions:
        provenance = "unknown"  # sent with no HTTP answer kept (a timeout, a broker), or before answers were kept
    elif versions == [task.revision]:
        provenance = "same"
    else:
        provenance = "edited"
    return {
        "method": message.method,
        "destinations": message.destinations,
        "headers": masked_headers(headers),
        "body": _shown_body(body),
        "version": task.revision,
        "sent_versions": versions,
        "provenance": provenance,
    }


def _shown_body(body: bytes | None) -> str | None:
    """The body as text: JSON pretty-printed with its secret-looking keys masked, anything else as it is."""
    if body is None:
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")
    return orjson.dumps(masked_json(parsed), option=orjson.OPT_INDENT_2).decode()
