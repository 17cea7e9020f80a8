"""Flows: search them across shards, get one, the app's dead letters, and their redrive (one or many)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from tjobs.api import schemas
from tjobs.api.deps import (
    AppDep,
    FlowIdPath,
    NodeDep,
    body_doc,
    errors,
    filter_task_id,
    json_body,
    json_object,
    json_response,
    ok,
    search_of,
)
from tjobs.api.render import error_json, flow_detail_json, flow_json
from tjobs.api.schemas import FlowFilterName
from tjobs.errors import InvalidInput, TjobsError
from tjobs.service.cursors import MAX_CURSOR_CHARS
from tjobs.service.schedule_preview import parse_instant
from tjobs.service.tasks import Redriven

# documented as validation judges them (its own 422 names the field): a task id is digits, 1..2^63-1;
# an instant is ISO-8601 with an offset from 1970 on, or epoch ms in digits
TASK_ID_PATTERN = r"^(?=0*[1-9])([0-9]{1,18}|[0-8][0-9]{18})$"  # not 0
INSTANT_FILTER: dict[str, Any] = {
    "allOf": [
        {
            "anyOf": [
                {"format": "date-time", "pattern": r"^\s*(19[7-9][0-9]|[2-9][0-9]{3})-"},
                {"pattern": r"^\s*[0-9]{1,14}\s*$"},
            ]
        }
    ]
}

router = APIRouter(prefix="/v1", tags=["flows"])


@router.get(
    "/flows",
    summary="Search the app's flows across every shard, newest first (cursor pagination)",
    responses={**ok(200, schemas.FlowPage), **errors(401, 422)},
)
async def search_flows(
    request: Request,
    app: AppDep,
    status: Annotated[FlowFilterName | None, Query(description="a flow status, or retrying")] = None,
    task_id: Annotated[
        str | None, Query(max_length=19, json_schema_extra={"pattern": TASK_ID_PATTERN}, description="one task's flows")
    ] = None,
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            max_length=40,
            json_schema_extra=INSTANT_FILTER,
            description="scheduled at or after (ISO-8601 or ms)",
        ),
    ] = None,
    to: Annotated[
        str | None,
        Query(max_length=40, json_schema_extra=INSTANT_FILTER, description="scheduled before (ISO-8601 or ms)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> Any:
    page = await search_of(request).flows(
        app.id,
        status=status,
        task_id=None if task_id is None else filter_task_id(task_id),
        from_ms=parse_instant(from_, "from"),
        until_ms=parse_instant(to, "to"),
        limit=limit,
        cursor=cursor,
    )
    return json_response({"items": [flow_json(f) for f in page.items], "next_cursor": page.next_cursor})


@router.get(
    "/flows/{flow_id}",
    summary="Get one flow (id: '<task id>-<scheduled_at_ms>')",
    responses={**ok(200, schemas.FlowDetail), **errors(401, 404)},
)
async def get_flow(flow_id: FlowIdPath, app: AppDep, node: NodeDep) -> Any:
    return json_response(flow_detail_json(await node.tasks.get_flow(app, flow_id)))


@router.post(
    "/flows/{flow_id}/redrive",
    summary="Re-drive one dead flow (attempts kept)",
    responses={**ok(200, schemas.Flow), **errors(401, 404, 409)},
)
async def redrive_flow(flow_id: FlowIdPath, app: AppDep, node: NodeDep) -> Any:
    [(_, flow, error)] = await node.tasks.redrive(app, [flow_id])
    if error is not None:
        raise error
    assert flow is not None
    return json_response(flow_json(flow))


@router.get(
    "/dead-letters",
    summary="The app's dead flows (cursor pagination across every shard)",
    responses={**ok(200, schemas.FlowPage), **errors(401, 422)},
)
async def dead_letters(
    app: AppDep,
    node: NodeDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> Any:
    page = await node.tasks.dead_letters(app, limit, cursor)
    return json_response({"items": [flow_json(f) for f in page.items], "next_cursor": page.next_cursor})


@router.post(
    "/dead-letters/redrive",
    summary="Re-drive many dead flows; one result per id",
    responses={**ok(200, schemas.RedriveResult), **errors(401, 422)},
    openapi_extra=body_doc(schemas.Redrive),
)
async def redrive_many(request: Request, app: AppDep, node: NodeDep) -> Any:
    body = json_object(await json_body(request))
    unknown = set(body) - {"flow_ids"}
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "unknown field", "unknown_field")
    flow_ids = body.get("flow_ids")
    if not isinstance(flow_ids, list) or not all(isinstance(f, str) for f in flow_ids):
        raise InvalidInput("flow_ids", "must be a list of flow ids")
    return json_response(redrive_json(await node.tasks.redrive(app, flow_ids)))


def redrive_json(results: list[Redriven]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    failed = 0
    for flow_id, flow, error in results:
        if error is not None or flow is None:
            failed += 1
            problem = error or TjobsError("not re-driven")
            items.append({"flow_id": flow_id, "status": problem.status_code, "error": error_json(problem)})
        else:
            items.append({"flow_id": flow_id, "status": 200, "flow": flow_json(flow)})
    return {"redriven": len(results) - failed, "failed": failed, "items": items}
