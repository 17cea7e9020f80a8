"""Flows: the search across shards, the dead letters, and their redrive (one or many, confirmed first).
One flow's page is :mod:`tjobs.console.pages_flow_detail`.

A redrive posts the chosen flow ids; without ``confirmed`` it answers a page naming them with a form
that posts them again confirmed, and only that second post puts them back to pending.
"""

from __future__ import annotations

from typing import Annotated, get_args
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.api.deps import filter_task_id
from tjobs.api.render import flow_json
from tjobs.api.schemas import FlowFilterName
from tjobs.console.context import ConsoleRoute, console_of
from tjobs.errors import InvalidInput
from tjobs.service.cursors import MAX_CURSOR_CHARS
from tjobs.service.schedule_preview import parse_instant
from tjobs.service.tasks import MAX_BATCH

router = APIRouter(route_class=ConsoleRoute)

PAGE_SIZE = 50
FLOW_FILTERS: tuple[str, ...] = get_args(FlowFilterName)


@router.get("/console/flows")
async def flows_page(
    request: Request,
    app: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[str | None, Query(max_length=20)] = None,
    task_id: Annotated[str | None, Query(max_length=40)] = None,
    start: Annotated[str | None, Query(alias="from", max_length=40)] = None,
    to: Annotated[str | None, Query(max_length=40)] = None,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    id: Annotated[str | None, Query(max_length=60)] = None,
) -> Response:
    """The cross-shard flow search (``GET /v1/flows``), newest first; ``id`` opens one flow."""
    console = console_of(request)
    principal = await console.principal(request)
    if id:
        return RedirectResponse(f"/console/flows/{quote(id.strip(), safe='')}", status_code=303)
    scoped = await console.scope(principal, app)
    filters = {"status": status or "", "task_id": (task_id or "").strip(), "from": (start or "").strip()}
    filters["to"] = (to or "").strip()
    flows: list[dict[str, object]] = []
    next_cursor = None
    error = None
    if scoped is not None:
        try:
            if filters["status"] and filters["status"] not in FLOW_FILTERS:
                raise InvalidInput("status", f"must be one of {', '.join(FLOW_FILTERS)}")
            page = await console.node.tasks.search.flows(
                scoped.id,
                status=filters["status"] or None,
                task_id=filter_task_id(filters["task_id"]) if filters["task_id"] else None,
                from_ms=parse_instant(filters["from"] or None, "from"),
                until_ms=parse_instant(filters["to"] or None, "to"),
                limit=PAGE_SIZE,
                cursor=cursor or None,
            )
            flows, next_cursor = [flow_json(flow) for flow in page.items], page.next_cursor
        except InvalidInput as invalid:
            error = invalid.message
    return await console.render_listing(
        request,
        "flows.html",
        principal,
        scoped,
        422 if error else 200,
        statuses=FLOW_FILTERS,
        filters=filters,
        flows=flows,
        next_cursor=next_cursor,
        error=error,
    )


@router.get("/console/dead-letters")
async def dead_letters(
    request: Request,
    app: Annotated[str | None, Query(max_length=200)] = None,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    scoped = await console.scope(principal, app)
    flows = []
    next_cursor = None
    if scoped is not None:
        page = await console.node.tasks.dead_letters(scoped, PAGE_SIZE, cursor or None)
        flows, next_cursor = [flow_json(flow) for flow in page.items], page.next_cursor
    return await console.render_listing(
        request, "dead_letters.html", principal, scoped, flows=flows, next_cursor=next_cursor
    )


@router.post("/console/dead-letters/redrive")
async def redrive(request: Request) -> Response:
    console = console_of(request)
    principal, form = await console.posted(request)
    scoped = await console.scope(principal, form.get("app") or None)
    if scoped is None:
        raise InvalidInput("app", "name the app whose dead letters to redrive")
    flow_ids = [flow_id for flow_id in form.getlist("flow_ids") if flow_id]
    if not 1 <= len(flow_ids) <= MAX_BATCH:
        raise InvalidInput("flow_ids", f"choose 1..{MAX_BATCH} dead letters to redrive")
    if form.get("confirmed") != "yes":
        return console.render(request, "redrive_confirm.html", principal, scoped=scoped, flow_ids=flow_ids)
    results = await console.node.tasks.redrive(scoped, flow_ids)
    outcomes = [
        {"flow_id": flow_id, "ok": error is None, "message": "back to pending" if error is None else error.message}
        for flow_id, _, error in results
    ]
    return console.render(request, "redrive_done.html", principal, scoped=scoped, outcomes=outcomes)
