"""Schedule preview: the next instants of any schedule, before a task is made or edited with it.

A read, so a plain GET form (no CSRF token needed, nothing changes). The schedule is validated and
walked by :func:`tjobs.service.schedule_preview.preview_request`, the code behind
``POST /v1/schedules:preview`` (the fire path's own schedule math).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from tjobs.console.context import ConsoleRoute, console_of
from tjobs.console.instants import shown
from tjobs.errors import InvalidInput
from tjobs.service.schedule_preview import DEFAULT_COUNT, preview_request

router = APIRouter(route_class=ConsoleRoute)

EXAMPLE = {"kind": "cron", "expr": "30 2 * * *", "timezone": "Europe/Berlin", "dst_gap": "shift"}


@router.get("/console/schedules/preview")
async def preview_page(
    request: Request,
    schedule: Annotated[str | None, Query(max_length=4000)] = None,
    count: Annotated[int, Query(ge=1, le=100)] = DEFAULT_COUNT,
    start: Annotated[str | None, Query(alias="from", max_length=40)] = None,
) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    values = {"schedule": schedule or json.dumps(EXAMPLE, indent=2), "count": count, "from": start or ""}
    instants: list[Any] = []
    ended = False
    error = None
    if schedule:
        try:
            try:
                parsed = json.loads(schedule)
            except json.JSONDecodeError as bad:
                raise InvalidInput("schedule", f"not valid JSON ({bad.msg}, line {bad.lineno})") from None
            body = {"schedule": parsed, "count": count, **({"from": start.strip()} if start and start.strip() else {})}
            node, app_id = console.node, None if principal.app is None else principal.app.id
            _, preview = preview_request(body, node.settings, node.clock.now_ms(), node.calendars.rules, app_id)
            instants = [shown(occurrence.at_ms, preview.timezone) for occurrence in preview.occurrences]
            ended = preview.ended
        except InvalidInput as invalid:
            error = invalid.message
    return console.render(
        request,
        "schedule_preview.html",
        principal,
        422 if error else 200,
        values=values,
        instants=instants,
        ended=ended,
        error=error,
    )
