"""``POST /v1/schedules:preview``: the next instants of any schedule, computed by the fire path's own math."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from tjobs.api import schemas
from tjobs.api.deps import AppOrAdminDep, NodeDep, body_doc, errors, json_body, json_response, ok
from tjobs.api.render import preview_json
from tjobs.service.schedule_preview import preview_request

router = APIRouter(prefix="/v1", tags=["schedules"])


@router.post(
    "/schedules:preview",
    summary="The next N instants of a schedule (UTC and its zone, DST policies applied); an app key or the admin key",
    responses={**ok(200, schemas.SchedulePreview), **errors(401, 422)},
    openapi_extra=body_doc(schemas.SchedulePreviewRequest),
)
async def preview_schedule(request: Request, caller: AppOrAdminDep, node: NodeDep) -> Any:
    app_id = None if caller is None else caller.id
    body = await json_body(request)
    spec, preview = preview_request(body, node.settings, node.clock.now_ms(), node.calendars.rules, app_id)
    return json_response(preview_json(spec, preview))
