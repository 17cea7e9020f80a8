"""Operator jobs over the API: start a redrive of every matching dead letter as one server-side job
(``POST /v1/dead-letters/redrive-jobs``) or a backfill of a task's past range
(``POST /v1/tasks/{task_id}/backfill``: :mod:`tjobs.service.backfill`), follow one
(``GET /v1/operator-jobs/{job_id}``), list them, and cancel one (:mod:`tjobs.service.operator_jobs`; run
by :mod:`tjobs.service.operator_job_runner`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from tjobs.api import schemas
from tjobs.api.deps import (
    AppDep,
    NodeDep,
    TaskIdPath,
    body_doc,
    errors,
    json_object_body,
    json_response,
    ok,
    path_parameter,
    task_id_of,
)
from tjobs.api.principal import principal_of
from tjobs.service.backfill import parse_backfill_request
from tjobs.service.operator_jobs import JOB_ID_PATTERN, LIST_LIMIT, job_json, parse_redrive_request

router = APIRouter(prefix="/v1", tags=["operator jobs"])

JobIdPath = Annotated[str, path_parameter(JOB_ID_PATTERN, 20, "an operator job's id: 'job_' and 16 hex digits")]


@router.post(
    "/dead-letters/redrive-jobs",
    status_code=202,
    summary="Redrive every dead letter matching the filters as one server-side job (confirm the count first)",
    responses={**ok(202, schemas.OperatorJob, "Accepted: queued, run in batches by one node"), **errors(401, 422)},
    openapi_extra=body_doc(schemas.RedriveJobStart),
)
async def start_redrive_job(request: Request, app: AppDep, node: NodeDep) -> Any:
    started = parse_redrive_request(await json_object_body(request), node.clock.now_ms())
    job, _ = await node.operator_jobs.start_redrive(
        app,
        started.filters,
        confirm_count=started.confirm_count,
        dead_before_ms=started.dead_before_ms,
        created_by=principal_of(request).name,
    )
    return json_response(job_json(job), status_code=202)


@router.post(
    "/tasks/{task_id}/backfill",
    status_code=202,
    tags=["tasks"],
    summary="Run the task's schedule over a past range [from, to) as manual flows, paced, as one server-side job",
    responses={
        **ok(202, schemas.OperatorJob, "Accepted: queued, run at its pace by one node"),
        **errors(401, 404, 422),
    },
    openapi_extra=body_doc(schemas.BackfillStart),
)
async def start_backfill(task_id: TaskIdPath, request: Request, app: AppDep, node: NodeDep) -> Any:
    started = parse_backfill_request(await json_object_body(request), node.clock.now_ms())
    job = await node.backfills.start(app, task_id_of(task_id), started, created_by=principal_of(request).name)
    return json_response(job_json(job), status_code=202)


@router.get(
    "/operator-jobs",
    summary="The app's operator jobs, newest first",
    responses={**ok(200, schemas.OperatorJobList), **errors(401, 422)},
)
async def list_jobs(app: AppDep, node: NodeDep, limit: Annotated[int, Query(ge=1, le=LIST_LIMIT)] = 20) -> Any:
    return json_response({"items": [job_json(job) for job in await node.operator_jobs.list_jobs(app.id, limit)]})


@router.get(
    "/operator-jobs/{job_id}",
    summary="One operator job and its progress (processed of total, failures)",
    responses={**ok(200, schemas.OperatorJob), **errors(401, 404)},
)
async def get_job(job_id: JobIdPath, app: AppDep, node: NodeDep) -> Any:
    return json_response(job_json(await node.operator_jobs.get(app.id, job_id)))


@router.post(
    "/operator-jobs/{job_id}/cancel",
    summary="Ask a job to stop (after its batch in progress); a finished job is answered as it is",
    responses={**ok(200, schemas.OperatorJob), **errors(401, 404)},
)
async def cancel_job(job_id: JobIdPath, app: AppDep, node: NodeDep) -> Any:
    return json_response(job_json(await node.operator_jobs.cancel(app.id, job_id)))
