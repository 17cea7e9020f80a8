"""Audit: the audit log's page (``GET /v1/audit`` in the console): the admin sees every entry (``app``
narrows), an app's session its own app's only; the same filters, newest first, paged by id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from tjobs.api.routes_audit import audit_query, entry_json
from tjobs.console.context import ConsoleRoute, console_of
from tjobs.errors import InvalidInput

router = APIRouter(route_class=ConsoleRoute)

PAGE_SIZE = 50
FILTERS = ("app", "actor", "action", "since", "until", "object")


@router.get("/console/audit")
async def audit_page(
    request: Request,
    app: Annotated[str | None, Query(max_length=200)] = None,
    actor: Annotated[str | None, Query(max_length=200)] = None,
    action: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[str | None, Query(max_length=60)] = None,
    until: Annotated[str | None, Query(max_length=60)] = None,
    object_id: Annotated[str | None, Query(alias="object", max_length=300)] = None,
    cursor: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    given = {"app": app, "actor": actor, "action": action, "since": since, "until": until, "object": object_id}
    filters = {name: (value or "").strip() for name, value in given.items()}
    entries: list[dict[str, object]] = []
    next_cursor = None
    error = None
    try:
        query = audit_query(
            caller_app=None if principal.app is None else principal.app.id,
            app=filters["app"] or None,
            actor=filters["actor"] or None,
            action=filters["action"] or None,
            since=filters["since"] or None,
            until=filters["until"] or None,
            object_id=filters["object"] or None,
            cursor=cursor or None,
            limit=PAGE_SIZE,
        )
        found = [] if query is None else await console.node.audit.search(query)
        entries = [entry_json(entry) for entry in found]
        next_cursor = entries[-1]["id"] if len(entries) == PAGE_SIZE else None
    except InvalidInput as invalid:
        error = invalid.message
    return console.render(
        request,
        "audit.html",
        principal,
        422 if error else 200,
        filters=filters,
        entries=entries,
        next_cursor=next_cursor,
        error=error,
    )
