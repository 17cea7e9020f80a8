"""``/v1/calendars``: an app's named calendars (dates, date ranges, weekdays, month-days, local periods;
iCalendar import) that recurring schedules name to skip instants — put, list, get, delete.

Each app sees only its own calendars (another app's name answers 404); see
:mod:`tjobs.service.calendars`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from tjobs.api import schemas
from tjobs.api.deps import AppDep, NodeDep, body_doc, errors, json_body, json_response, ok
from tjobs.clock import iso_ms
from tjobs.errors import NotFound
from tjobs.specs.calendar import CALENDAR_NAME_PATTERN, Calendar, calendar_rules_to_json

router = APIRouter(prefix="/v1", tags=["calendars"])

# published with its form; judged here: a name that cannot be one is a 404 (as a name not stored), and a
# 422 naming ``name`` when put
CalendarNamePath = Annotated[
    str,
    Path(
        description="a calendar's name (letters, digits, ._-)",
        json_schema_extra={"pattern": CALENDAR_NAME_PATTERN, "minLength": 1, "maxLength": 64},
    ),
]
_NAME = re.compile(CALENDAR_NAME_PATTERN)


def _stored_name(raw: str) -> str:
    if not _NAME.fullmatch(raw):
        raise NotFound("calendar", raw[:80])
    return raw


def calendar_json(calendar: Calendar) -> dict[str, Any]:
    return {
        "name": calendar.name,
        **calendar_rules_to_json(calendar.rules),
        "version": calendar.version,
        "created_at": iso_ms(calendar.created_at_ms),
        "updated_at": iso_ms(calendar.updated_at_ms),
    }


@router.put(
    "/calendars/{name}",
    summary="Create or replace a calendar (its rules whole); every task naming it follows the change",
    responses={
        **ok(200, schemas.StoredCalendar, "replaced"),
        **ok(201, schemas.StoredCalendar, "created"),
        **errors(401, 422),
    },
    openapi_extra=body_doc(schemas.CalendarWrite),
)
async def put_calendar(name: CalendarNamePath, request: Request, app: AppDep, node: NodeDep) -> Any:
    calendar, created = await node.calendars.put(app.id, name, await json_body(request))
    return json_response(calendar_json(calendar), 201 if created else 200)


@router.get(
    "/calendars",
    summary="List the app's calendars by name",
    responses={**ok(200, schemas.CalendarList), **errors(401)},
)
async def list_calendars(app: AppDep, node: NodeDep) -> Any:
    return json_response({"items": [calendar_json(c) for c in await node.calendars.list(app.id)]})


@router.get(
    "/calendars/{name}",
    summary="Get a calendar",
    responses={**ok(200, schemas.StoredCalendar), **errors(401, 404)},
)
async def get_calendar(name: CalendarNamePath, app: AppDep, node: NodeDep) -> Any:
    return json_response(calendar_json(await node.calendars.get(app.id, _stored_name(name))))


@router.delete(
    "/calendars/{name}",
    status_code=204,
    summary="Delete a calendar (tasks still naming it fire as if they named none)",
    responses={**ok(204, None, "deleted"), **errors(401, 404)},
)
async def delete_calendar(name: CalendarNamePath, app: AppDep, node: NodeDep) -> Response:
    await node.calendars.delete(app.id, _stored_name(name))
    return Response(status_code=204)
