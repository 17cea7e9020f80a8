"""Flows: search them across shards, get one, the app's dead letters, and their redrive (one or many); a
run's reports, log lines and cancel (README "Job runs")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from tjobs.api import schemas
from tjobs.api.deps import (
    AppDep,
    FlowIdPath,
    NodeDep,
    body_doc,
    errors,
    json_body,
    json_response,
    ok,
    search_of,
)
from tjobs.api.flow_filter_params import DeadLetterFiltersDep, FlowFiltersDep
from tjobs.api.principal import reads_masked
from tjobs.api.render import error_json, flow_detail_json, flow_json, run_json
from tjobs.api.schemas import INSTANT_FILTER
from tjobs.clock import iso_ms
from tjobs.errors import InvalidInput, TjobsError, known_object
from tjobs.model import Flow
from tjobs.service.cursors import MAX_CURSOR_CHARS
from tjobs.service.flow_export import MAX_EXPORT_ROWS, export_csv
from tjobs.service.flow_filters import FlowFilters
from tjobs.service.operator_jobs import MAX_REDRIVE_JOB, dead_letter_filters
from tjobs.service.runs import RunAnswer
from tjobs.service.schedule_preview import parse_instant
from tjobs.service.search import SearchService
from tjobs.service.tasks import Redriven

router = APIRouter(prefix="/v1", tags=["flows"])
FLOW_COUNT_MAX = 10_000  # a search's count reads at most this many flows: past it, "more than"


@router.get(
    "/flows",
    summary="Search the app's flows across every shard, newest first (cursor pagination)",
    responses={**ok(200, schemas.FlowPage), **errors(401, 422)},
)
async def search_flows(
    request: Request,
    app: AppDep,
    filters: FlowFiltersDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> Any:
    page = await search_of(request).flows(app.id, filters, limit=limit, cursor=cursor)
    return flow_page_json(request, page.items, page.next_cursor)


@router.get(
    "/flows:count",
    summary="Count the app's flows matching the search's filters (exact up to at_most, else 'more')",
    responses={**ok(200, schemas.FlowCount), **errors(401, 422)},
)
async def count_flows(request: Request, app: AppDep, filters: FlowFiltersDep) -> Any:
    count = await search_of(request).count_flows(app.id, filters, FLOW_COUNT_MAX)
    return json_response({"matched": count.matched, "more": count.more, "at_most": FLOW_COUNT_MAX})


@router.get(
    "/flows:export",
    summary="The matching flows as CSV, newest first, at most 100,000 rows (streamed)",
    responses={
        200: {
            "description": "CSV (RFC 4180); x-tjobs-export-truncated: true when more flows matched than the rows sent",
            "content": {"text/csv": {"schema": {"type": "string"}}},
        },
        **errors(401, 422),
    },
)
async def export_flows(request: Request, app: AppDep, node: NodeDep, filters: FlowFiltersDep) -> Any:
    return await export_response(search_of(request), app.id, filters, node.clock.now_ms())


async def export_response(search: SearchService, app_id: str, filters: FlowFilters, now_ms: int) -> StreamingResponse:
    """The CSV export of a search (the API's and the console's), its headers saying whether more flows
    matched than it holds: counted up to the cap first, so they are known before the rows stream."""
    count = await search.count_flows(app_id, filters, MAX_EXPORT_ROWS)
    stamp = iso_ms(now_ms).replace("-", "").replace(":", "")[:15]
    headers = {
        "content-disposition": f'attachment; filename="flows-{app_id}-{stamp}.csv"',
        "x-tjobs-export-max-rows": str(MAX_EXPORT_ROWS),
        "x-tjobs-export-truncated": "true" if count.more else "false",
        "cache-control": "no-store",
    }
    return StreamingResponse(export_csv(search, app_id, filters), media_type="text/csv; charset=utf-8", headers=headers)


@router.get(
    "/flows/{flow_id}",
    summary="Get one flow (id: '<task id>-<scheduled_at_ms>')",
    responses={**ok(200, schemas.FlowDetail), **errors(401, 404)},
)
async def get_flow(request: Request, flow_id: FlowIdPath, app: AppDep, node: NodeDep) -> Any:
    flow = await node.tasks.get_flow(app, flow_id)
    detail = flow_detail_json(flow, masked=reads_masked(request))
    detail["child_flows"] = await node.child_flows.triggered_by(flow)
    detail["parent_flows"] = await node.child_flows.triggering(flow)
    return json_response(detail)


@router.post(
    "/flows/{flow_id}/report",
    summary="An executor's report on a run it accepted: progress (a heartbeat), or its end with a result",
    responses={**ok(200, schemas.RunReportAnswer), **errors(401, 404, 409, 413, 422)},
    openapi_extra=body_doc(schemas.RunReport),
)
async def report_run(request: Request, flow_id: FlowIdPath, app: AppDep, node: NodeDep) -> Any:
    answer = await node.runs.report(app, flow_id, await json_body(request))
    return json_response(run_answer_json(answer))


@router.post(
    "/flows/{flow_id}/log",
    summary="Append log lines to a flow's runs (kept with the flow, capped)",
    responses={**ok(200, schemas.RunLogAnswer), **errors(401, 404, 409, 422)},
    openapi_extra=body_doc(schemas.RunLog),
)
async def append_run_log(request: Request, flow_id: FlowIdPath, app: AppDep, node: NodeDep) -> Any:
    logged = await node.runs.append_log(app, flow_id, await json_body(request))
    return json_response(
        {
            "appended": logged.appended,
            "dropped": logged.dropped,
            "truncated": logged.truncated,
            "log_lines": logged.lines,
        }
    )


@router.post(
    "/flows/{flow_id}/cancel",
    summary="Ask a running run to stop: its executor is told in the answer to its next report",
    responses={**ok(200, schemas.RunReportAnswer), **errors(401, 404, 409)},
)
async def cancel_run(flow_id: FlowIdPath, app: AppDep, node: NodeDep) -> Any:
    answer = await node.runs.cancel(app, flow_id)
    return json_response(run_answer_json(answer))


def run_answer_json(answer: RunAnswer) -> dict[str, Any]:
    flow = answer.flow
    assert flow.run is not None
    return {
        "flow_id": flow.id,
        "status": flow.status.value,
        "run": run_json(flow.run),
        "cancel_requested": answer.cancel_requested,
        "repeated": answer.repeated,
    }


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
    summary="The app's dead flows, newest first across every shard, filtered (cursor pagination)",
    responses={**ok(200, schemas.FlowPage), **errors(401, 422)},
)
async def dead_letters(
    request: Request,
    app: AppDep,
    filters: DeadLetterFiltersDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> Any:
    dead = dead_letter_filters(filters)
    page = await search_of(request).flows(app.id, dead, limit=limit, cursor=cursor)
    return flow_page_json(request, page.items, page.next_cursor)


def flow_page_json(request: Request, flows: Sequence[Flow], next_cursor: str | None) -> Any:
    """A page of flows, masked for a reader who may not change them (:func:`reads_masked`)."""
    masked = reads_masked(request)
    return json_response({"items": [flow_json(f, masked=masked) for f in flows], "next_cursor": next_cursor})


@router.get(
    "/dead-letters:count",
    summary="Count the app's dead letters matching the filters that died before dead_before (default now)",
    responses={**ok(200, schemas.DeadLetterCount), **errors(401, 422)},
)
async def count_dead_letters(
    app: AppDep,
    node: NodeDep,
    filters: DeadLetterFiltersDep,
    dead_before: Annotated[
        str | None,
        Query(max_length=40, json_schema_extra=INSTANT_FILTER, description="died before (ISO-8601 or ms; default now)"),
    ] = None,
) -> Any:
    given_ms = parse_instant(dead_before, "dead_before")
    before_ms = node.clock.now_ms() if given_ms is None else given_ms
    count = await node.operator_jobs.count_dead_letters(app, filters, before_ms)
    return json_response(
        {
            "matched": count.matched,
            "more": count.more,
            "at_most": MAX_REDRIVE_JOB,
            "dead_before": iso_ms(before_ms),
            "dead_before_ms": before_ms,
        }
    )


@router.post(
    "/dead-letters/redrive",
    summary="Re-drive many dead flows; one result per id",
    responses={**ok(200, schemas.RedriveResult), **errors(401, 422)},
    openapi_extra=body_doc(schemas.Redrive),
)
async def redrive_many(request: Request, app: AppDep, node: NodeDep) -> Any:
    body = known_object(await json_body(request), {"flow_ids"})
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
