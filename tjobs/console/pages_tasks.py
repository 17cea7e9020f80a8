"""Tasks: the search (``GET /v1/tasks``: newest first, or by name with a name prefix; status, kind and
key filters; cursor pages) with each task's health (last result, success rate and failures over 24 h:
:mod:`tjobs.service.task_health`), a task's page with its whole history a page at a time (keyset pages,
older and newer, by the flows' instants), and its actions.

Pause, resume, trigger now and delete each go through a confirmation page (``GET .../confirm``) whose
form posts the action; trigger's may carry a payload for that flow only, sent instead of the task's.
The edit form sends only the fields that changed, with the version the form was opened at, so an edit
that crossed another one answers 409 instead of overwriting it.

A task's page shows its callback and payload with the value of every secret-looking header or JSON key
masked (``task_json(masked=True)``: as the API answers a viewer, and as the flow page shows what was sent);
the edit form holds them as stored, and is an operator's only: who may edit a callback may send its
headers anywhere.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, NamedTuple
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.api.bodies import parse_json
from tjobs.api.deps import task_id_of
from tjobs.api.render import children_json, flow_json, task_health_json, task_json
from tjobs.console.context import ConsoleRoute, Principal, console_of
from tjobs.console.instants import next_instants
from tjobs.errors import InvalidInput, NotFound, VersionConflict
from tjobs.model import MAX_ID, DeliveryMode, MisfirePolicy, Task, TaskStatus
from tjobs.service.cursors import MAX_CURSOR_CHARS
from tjobs.service.task_health import HEALTH_CAP

router = APIRouter(route_class=ConsoleRoute)

PAGE_SIZE = 50
FLOWS_SHOWN = 25
Action = Literal["pause", "resume", "trigger", "delete"]
ACTIONS: dict[str, dict[str, str]] = {
    "pause": {"verb": "Pause", "done": "paused", "says": "It stops firing until it is resumed."},
    "resume": {
        "verb": "Resume",
        "done": "resumed",
        "says": "It fires again from its next instant; what it missed while paused follows its misfire policy.",
    },
    "trigger": {
        "verb": "Trigger now",
        "done": "triggered",
        "says": "It fires once now, with a flow of its own; its schedule does not change.",
    },
    "delete": {
        "verb": "Delete",
        "done": "deleted",
        "says": "It never fires again and its pending flows are cancelled; its flows stay readable as history.",
    },
}
DONE_NOTICES = {action["done"]: f"Task {action['done']}." for action in ACTIONS.values()} | {
    "edited": "Task saved.",
    "unchanged": "Nothing changed.",
}
EDITABLE_JSON = ("schedule", "callback", "payload")


@router.get("/console/tasks")
async def task_list(
    request: Request,
    app: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[Literal["", "active", "paused", "completed"] | None, Query()] = None,
    kind: Annotated[Literal["", "cron", "interval", "at", "delay", "fixed_delay"] | None, Query()] = None,
    name_prefix: Annotated[str | None, Query(max_length=200)] = None,
    key: Annotated[str | None, Query(max_length=200)] = None,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    done: Annotated[str | None, Query(max_length=20)] = None,
) -> Response:
    console = console_of(request)
    principal, scoped = await console.listing_scope(request, app)
    filters = {"status": status or "", "kind": kind or "", "name_prefix": name_prefix or "", "key": key or ""}
    items: list[Task] = []
    next_cursor = None
    if scoped is not None:
        page = await console.node.tasks.list_tasks(
            scoped,
            limit=PAGE_SIZE,
            cursor=cursor or None,
            status=TaskStatus(status) if status else None,
            kind=kind or None,
            name_prefix=name_prefix or None,
            key=key or None,
        )
        items, next_cursor = page.items, page.next_cursor
    health = {task_id: task_health_json(h) for task_id, h in (await console.node.tasks.health(items)).items()}
    notice = DONE_NOTICES.get(done or "")
    return await console.render_listing(
        request,
        "tasks.html",
        principal,
        scoped,
        tasks=items,
        health=health,
        health_cap=HEALTH_CAP,
        next_cursor=next_cursor,
        filters=filters,
        notice=notice,
    )


async def _task_context(request: Request, principal: Principal, raw_id: str) -> dict[str, Any]:
    console = console_of(request)
    task_id = task_id_of(raw_id)
    owner = await console.task_owner(principal, task_id)
    task = await console.node.tasks.get(owner, task_id)
    return {"owner": owner, "task": task, "shown": task_json(task)}


async def _flows(
    request: Request, principal: Principal, raw_id: str, before: int | None = None, after: int | None = None
) -> HistoryPage:
    """One page of the task's flows, newest first: the newest, the page before ``before`` or the page
    just after ``after`` (one more flow read than shown tells whether there is a page beyond)."""
    if before is not None and after is not None:
        raise InvalidInput("after", "give before (an older page) or after (a newer one), not both")
    console = console_of(request)
    task_id = task_id_of(raw_id)
    owner = await console.task_owner(principal, task_id)
    flows = await console.node.tasks.flows(owner, task_id, FLOWS_SHOWN + 1, before, after)
    beyond = len(flows) > FLOWS_SHOWN
    if after is None:  # the newest page, or an older one: read down, the extra flow is the oldest
        shown = flows[:FLOWS_SHOWN]
        older = shown[-1].scheduled_at_ms if beyond else None
        newer = shown[0].scheduled_at_ms if before is not None and shown else None
    else:  # a newer page: read up, the extra flow is the newest
        shown = flows[1:] if beyond else flows
        older = shown[-1].scheduled_at_ms if shown else None
        newer = shown[0].scheduled_at_ms if beyond else None
    return HistoryPage([flow_json(flow) for flow in shown], older, newer, before is None and after is None)


class HistoryPage(NamedTuple):
    """A page of a task's flows (JSON, newest first) and the instants its older and newer links page from
    (``None``: no such page); ``newest``: the first page, which refreshes itself."""

    flows: list[dict[str, Any]]
    older_than: int | None
    newer_than: int | None
    newest: bool


@router.get("/console/tasks/{task_id}")
async def task_page(
    request: Request,
    task_id: str,
    done: Annotated[str | None, Query(max_length=20)] = None,
    before: Annotated[int | None, Query(ge=0, le=MAX_ID, description="an older page: flows before this")] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_ID, description="a newer page: flows just after this")] = None,
) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    context = await _task_context(request, principal, task_id)
    return console.render(
        request,
        "task.html",
        principal,
        **{**context, "shown": task_json(context["task"], masked=True)},
        parents=children_json(await console.node.tasks.child_links.parents(context["task"])),
        instants=next_instants(context["task"], calendars=console.node.calendars.rules),
        preview_query=urlencode({"schedule": json.dumps(as_request(context["shown"]["schedule"]))}),
        history=await _flows(request, principal, task_id, before, after),
        notice=DONE_NOTICES.get(done or ""),
    )


@router.get("/console/tasks/{task_id}/flows")
async def task_flows_fragment(request: Request, task_id: str) -> Response:
    """The newest flows alone: the task page's script refreshes them while its first page is open."""
    console = console_of(request)
    principal = await console.principal(request)
    history = await _flows(request, principal, task_id)
    return console.render(request, "_flows.html", principal, flows=history.flows, task_id=task_id)


@router.get("/console/tasks/{task_id}/confirm")
async def confirm_action(request: Request, task_id: str, action: Annotated[Action, Query()]) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    context = await _task_context(request, principal, task_id)
    return _confirm_page(request, principal, context, action)


def _confirm_page(
    request: Request,
    principal: Principal,
    context: dict[str, Any],
    action: str,
    *,
    error: str | None = None,
    payload_text: str = "",
    status: int = 200,
) -> Response:
    return console_of(request).render(
        request,
        "task_confirm.html",
        principal,
        status=status,
        **context,
        action=action,
        about=ACTIONS[action],
        error=error,
        payload_text=payload_text,
    )


def as_request(stored_schedule: dict[str, Any]) -> dict[str, Any]:
    """A stored schedule in the shape a create or update takes: a delay's computed ``at_ms`` is the
    node's, not the caller's (sending the schedule again restarts the delay from then)."""
    if stored_schedule.get("kind") == "delay":
        return {key: value for key, value in stored_schedule.items() if key != "at_ms"}
    return stored_schedule


def _editable(shown: dict[str, Any]) -> dict[str, Any]:
    return {**shown, "schedule": as_request(shown["schedule"])}


def _edit_values(shown: dict[str, Any]) -> dict[str, str]:
    shown = _editable(shown)
    values = {name: json.dumps(shown[name], indent=2, ensure_ascii=False) for name in EDITABLE_JSON}
    return {**values, "name": shown["name"], "misfire_policy": shown["misfire_policy"], "delivery": shown["delivery"]}


def _edit_page(request: Request, principal: Principal, context: dict[str, Any], **extra: Any) -> Response:
    return console_of(request).render(
        request,
        "task_edit.html",
        principal,
        **context,
        policies=[p.value for p in MisfirePolicy],
        deliveries=[d.value for d in DeliveryMode],
        **extra,
    )


@router.get("/console/tasks/{task_id}/edit")
async def edit_page(request: Request, task_id: str) -> Response:
    """The edit form, with the callback's and payload's values as stored (the edit keeps what is not
    changed): for an operator, who may change them (and so send them anywhere); 403 for a viewer."""
    principal = await console_of(request).principal(request)
    principal.require_role("operator")
    context = await _task_context(request, principal, task_id)
    values = _edit_values(context["shown"])
    return _edit_page(request, principal, context, values=values, version=context["task"].revision, error=None)


@router.post("/console/tasks/{task_id}/edit")
async def edit(request: Request, task_id: str) -> Response:
    console = console_of(request)
    principal, form = await console.posted(request)
    context = await _task_context(request, principal, task_id)
    task: Task = context["task"]
    current = _editable(context["shown"])
    values = {name: form.get(name) for name in ("name", "misfire_policy", "delivery", *EDITABLE_JSON)}
    raw_version = form.get("version")
    try:
        if not raw_version.isdigit():
            raise InvalidInput("version", "must be the version the form was opened at")
        body: dict[str, Any] = {}
        for name in ("name", "misfire_policy", "delivery"):
            if values[name] != current[name]:
                body[name] = values[name]
        for name in EDITABLE_JSON:
            parsed = form_json(name, values[name], console.node.settings.limits.max_json_depth)
            if parsed != current[name]:
                body[name] = parsed
        if not body:
            return RedirectResponse(f"/console/tasks/{task.id}?done=unchanged", status_code=303)
        await console.node.tasks.update(context["owner"], task.id, {**body, "version": int(raw_version)})
    except (InvalidInput, VersionConflict) as error:
        message = error.message
        if isinstance(error, VersionConflict):
            message = "The task changed since this form was opened (" + error.message + "): reload it and edit again."
        return _edit_page(
            request, principal, context, values=values, version=raw_version, error=message, status=error.status_code
        )
    return RedirectResponse(f"/console/tasks/{task.id}?done=edited", status_code=303)


def form_json(field: str, text: str, max_json_depth: int) -> Any:
    """A form field's JSON (``None`` when empty), parsed within the API's limits as the field would be in
    the API's body (one level inside it: depth, integers beyond 64 bits); else :class:`InvalidInput`
    naming ``field``."""
    if not text.strip():
        return None
    try:
        return parse_json(text.encode(), max_json_depth - 1)
    except InvalidInput as error:  # parse_json names the body, or a key inside the field
        raise InvalidInput(field, error.message.partition(": ")[2], error.code) from None


def trigger_request(payload_text: str, max_json_depth: int) -> dict[str, Any] | None:
    """The body of a trigger from the form's payload field: ``None`` (the task's own payload) when it is
    empty, else ``{"payload": <its JSON>}``."""
    if not payload_text.strip():
        return None
    return {"payload": form_json("payload", payload_text, max_json_depth)}


@router.post("/console/tasks/{task_id}/trigger")
async def trigger(request: Request, task_id: str) -> Response:
    """Trigger now, with the form's payload instead of the task's if one was typed; a payload that is not
    JSON, or that the node refuses, is shown on the form again, naming the field."""
    console = console_of(request)
    principal, form = await console.posted(request)
    tid = task_id_of(task_id)
    owner = await console.task_owner(principal, tid)
    payload_text = form.get("payload")
    try:
        body = trigger_request(payload_text, console.node.settings.limits.max_json_depth)
        await console.node.tasks.trigger(owner, tid, body)
    except InvalidInput as error:
        context = await _task_context(request, principal, task_id)
        return _confirm_page(
            request,
            principal,
            context,
            "trigger",
            error=error.message,
            payload_text=payload_text,
            status=error.status_code,
        )
    return RedirectResponse(f"/console/tasks/{tid}?done={ACTIONS['trigger']['done']}", status_code=303)


# after the edit and trigger routes: /console/tasks/{id}/edit and .../trigger are routes of their own
@router.post("/console/tasks/{task_id}/{action}")
async def act(request: Request, task_id: str, action: str) -> Response:
    console = console_of(request)
    principal, _ = await console.posted(request)
    if action not in ("pause", "resume", "delete"):
        raise NotFound("action", action)
    tid = task_id_of(task_id)
    owner = await console.task_owner(principal, tid)
    tasks = console.node.tasks
    if action == "delete":
        await tasks.delete(owner, tid)
        app_part = f"&app={owner.id}" if principal.admin else ""
        return RedirectResponse(f"/console/tasks?done=deleted{app_part}", status_code=303)
    await (tasks.pause if action == "pause" else tasks.resume)(owner, tid)
    return RedirectResponse(f"/console/tasks/{tid}?done={ACTIONS[action]['done']}", status_code=303)
