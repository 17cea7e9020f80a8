"""``/v1/tasks``: create (single and batch), get, list, update, pause, resume, trigger, delete, flows."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from tjobs import wire
from tjobs.api import schemas
from tjobs.api.deps import (
    BEARER,
    AppDep,
    NamedRoute,
    NodeDep,
    TaskIdPath,
    admit_creates,
    body_doc,
    errors,
    json_body,
    json_response,
    node_of,
    ok,
    request_app,
    task_id_of,
)
from tjobs.api.principal import reads_masked
from tjobs.api.render import children_json, error_json, flow_json, task_health_json, task_json
from tjobs.errors import InvalidInput, known_object
from tjobs.model import TaskStatus
from tjobs.service.cursors import MAX_CURSOR_CHARS
from tjobs.service.task_health import HEALTH_PAGE_MAX
from tjobs.specs import RenderedOnce, callback_to_json

router = APIRouter(prefix="/v1", tags=["tasks"])

_BATCH_KEYS = frozenset({"tasks"})


@router.post(
    "/tasks",
    status_code=201,
    summary="Create a task (idempotent per app on key)",
    responses={
        **ok(201, schemas.Task, "created"),
        **ok(200, schemas.Task, "an existing task with this key"),
        **errors(401, 422, 429),
    },
    openapi_extra={**BEARER, **body_doc(wire.TaskCreate)},
)
async def create_task(request: Request) -> Any:
    # create, batch create and get authenticate in the route, not by AppDep (see tjobs.api.deps)
    app = await request_app(request)
    node = node_of(request)
    admit_creates(request, app, 1)
    created = await node.tasks.create(app, await json_body(request))
    if created.created:
        node.metrics.registrations.labels(app.id).inc()
    return json_response(task_json(created.task), 201 if created.created else 200)


@router.post(
    "/tasks/batch",
    status_code=200,
    summary="Create up to 1,000 tasks; one result per item",
    responses={**ok(200, schemas.BatchResult), **errors(401, 422, 429)},
    openapi_extra={**BEARER, **body_doc(schemas.BatchCreate)},
)
@router.post("/tasks:batch", include_in_schema=False)  # the AIP-136 spelling, same operation
async def create_tasks(request: Request) -> Any:
    app = await request_app(request)
    node = node_of(request)
    body = known_object(await json_body(request), _BATCH_KEYS)
    if "tasks" not in body:
        raise InvalidInput("tasks", "is required", "missing")
    if isinstance(body["tasks"], list):
        for index, item in enumerate(body["tasks"]):
            if not isinstance(item, dict):
                raise InvalidInput(f"tasks[{index}]", "must be a task create request (a JSON object)")
    if isinstance(body["tasks"], list):
        admit_creates(request, app, len(body["tasks"]))
    results = await node.tasks.create_many(app, body["tasks"])
    items: list[dict[str, Any]] = []
    counts = {"created": 0, "existing": 0, "failed": 0}
    callbacks = RenderedOnce(callback_to_json)  # each spec rendered once (the tasks share them)
    for index, result in enumerate(results):
        if result.error is not None:
            counts["failed"] += 1
            items.append({"index": index, "status": result.error.status_code, "error": error_json(result.error)})
        else:
            assert result.task is not None
            counts["created" if result.created else "existing"] += 1
            task = task_json(result.task, callbacks=callbacks)
            items.append({"index": index, "status": 201 if result.created else 200, "id": task["id"], "task": task})
    if counts["created"]:
        node.metrics.registrations.labels(app.id).inc(counts["created"])
    return json_response({**counts, "items": items})


@router.api_route("/tasks/batch", methods=["GET", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def tasks_batch_other_methods() -> None:
    """``/v1/tasks/batch`` names the batch create, not a task called "batch": another method on it is 405
    (``Allow: POST``, tjobs.api.app._allowed_methods), not the 404 of ``/v1/tasks/{task_id}``'s lookup. Routed
    before the task routes, which would match the path too."""
    raise StarletteHTTPException(405)


CREATE_PATHS = ("/tasks", "/tasks/batch", "/tasks:batch")
create_routes = [
    NamedRoute(
        router.prefix + path,
        create_task if path == "/tasks" else create_tasks,
        methods=["POST"],
        include_in_schema=False,
    )
    for path in CREATE_PATHS
]
"""The creates as plain named routes, put first in the app's routes (:class:`tjobs.api.deps.NamedRoute`);
the routes above stay for the OpenAPI document."""


@router.get(
    "/tasks",
    summary="Search the app's tasks across every shard: newest first, or by name with name_prefix",
    responses={**ok(200, schemas.TaskPage), **errors(401, 422)},
)
async def list_tasks(
    request: Request,
    app: AppDep,
    node: NodeDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    status: Annotated[Literal["active", "paused", "completed"] | None, Query()] = None,
    kind: Annotated[Literal["cron", "interval", "at", "delay", "fixed_delay"] | None, Query()] = None,
    name_prefix: Annotated[str | None, Query(min_length=1, max_length=200, pattern=wire.KEY_PATTERN)] = None,
    key: Annotated[
        str | None, Query(min_length=1, max_length=200, pattern=wire.KEY_PATTERN, description="the idempotency key")
    ] = None,
    health: Annotated[
        bool,
        Query(
            description=f"each task's last result and last 24 h; a page then holds at most {HEALTH_PAGE_MAX} "
            "tasks whatever the limit (follow next_cursor for the rest)"
        ),
    ] = False,
) -> Any:
    page = await node.tasks.list_tasks(
        app,
        limit=min(limit, HEALTH_PAGE_MAX) if health else limit,
        cursor=cursor,
        status=None if status is None else TaskStatus(status),
        kind=kind,
        name_prefix=name_prefix,
        key=key,
    )
    masked = reads_masked(request)
    items = [task_json(t, masked=masked) for t in page.items]
    if health:
        figures = await node.tasks.health(page.items)
        for item, task in zip(items, page.items, strict=True):
            item["health"] = task_health_json(figures[task.id])
    return json_response({"items": items, "next_cursor": page.next_cursor})


@router.get(
    "/tasks/{task_id}",
    summary="Get a task",
    responses={**ok(200, schemas.Task), **errors(401, 404)},
    openapi_extra=BEARER,
)
async def get_task(task_id: TaskIdPath, request: Request) -> Any:
    app = await request_app(request)
    tasks = node_of(request).tasks
    task = await tasks.get(app, task_id_of(task_id))
    shown = task_json(task, masked=reads_masked(request))
    shown["parents"] = children_json(await tasks.child_links.parents(task))  # README "Child tasks"
    return json_response(shown)


@router.patch(
    "/tasks/{task_id}",
    summary="Update a task (optimistic: pass version to get 409 on a lost race)",
    responses={**ok(200, schemas.Task), **errors(401, 404, 409, 422)},
    openapi_extra=body_doc(wire.TaskUpdate),
)
async def update_task(task_id: TaskIdPath, request: Request, app: AppDep, node: NodeDep) -> Any:
    tid = task_id_of(task_id)
    body = await json_body(request)
    return json_response(task_json(await node.tasks.update(app, tid, body)))


@router.post(
    "/tasks/{task_id}/pause", summary="Pause a task", responses={**ok(200, schemas.Task), **errors(401, 404, 409)}
)
async def pause_task(task_id: TaskIdPath, app: AppDep, node: NodeDep) -> Any:
    return json_response(task_json(await node.tasks.pause(app, task_id_of(task_id))))


@router.post(
    "/tasks/{task_id}/resume",
    summary="Resume a task (its misfire policy covers what was missed)",
    responses={**ok(200, schemas.Task), **errors(401, 404, 409)},
)
async def resume_task(task_id: TaskIdPath, app: AppDep, node: NodeDep) -> Any:
    return json_response(task_json(await node.tasks.resume(app, task_id_of(task_id))))


@router.post(
    "/tasks/{task_id}/trigger",
    status_code=201,
    summary="Fire now: a manual flow (no body or {}: the task's payload; {\"payload\": …}: that flow's own)",
    responses={**ok(201, schemas.Flow), **errors(401, 404, 409, 422)},
    openapi_extra=body_doc(wire.TaskTrigger, required=False),
)
async def trigger_task(task_id: TaskIdPath, request: Request, app: AppDep, node: NodeDep) -> Any:
    body = await json_body(request) if await request.body() else None  # the body is optional
    return json_response(flow_json(await node.tasks.trigger(app, task_id_of(task_id), body)), 201)


@router.delete(
    "/tasks/{task_id}",
    status_code=204,
    summary="Delete a task (its flows stay as history)",
    responses={**ok(204, None, "deleted"), **errors(401, 404)},
)
async def delete_task(task_id: TaskIdPath, app: AppDep, node: NodeDep) -> Response:
    await node.tasks.delete(app, task_id_of(task_id))
    return Response(status_code=204)


@router.get(
    "/tasks/{task_id}/flows",
    tags=["flows"],
    summary="A task's flows, newest first",
    responses={**ok(200, schemas.FlowList), **errors(401, 404, 422)},
)
async def list_task_flows(
    request: Request,
    task_id: TaskIdPath,
    app: AppDep,
    node: NodeDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_ms: Annotated[
        int | None, Query(ge=0, le=1 << 62, description="an older page: the flows scheduled before this instant")
    ] = None,
    after_ms: Annotated[
        int | None,
        Query(ge=0, le=1 << 62, description="a newer page: the limit flows scheduled just after this instant"),
    ] = None,
) -> Any:
    flows = await node.tasks.flows(app, task_id_of(task_id), limit, before_ms, after_ms)
    masked = reads_masked(request)
    return json_response({"items": [flow_json(f, masked=masked) for f in flows]})
