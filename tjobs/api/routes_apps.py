"""Apps: admin management (create, list, show, update, rotate, disable, enable, delete, stats) and an
app's view of itself."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from tjobs.api import schemas
from tjobs.api.deps import (
    AppDep,
    AppIdPath,
    NodeDep,
    body_doc,
    errors,
    json_body,
    json_response,
    ok,
    require_admin,
)
from tjobs.api.render import app_json
from tjobs.errors import InvalidInput, known_object
from tjobs.model import App
from tjobs.observability.metrics_per_app import Buckets
from tjobs.service.apps import AppService
from tjobs.service.cursors import MAX_CURSOR_CHARS

if TYPE_CHECKING:
    from tjobs.node import Node

router = APIRouter(prefix="/v1", tags=["apps"])
admin = APIRouter(prefix="/v1", tags=["apps"], dependencies=[Depends(require_admin)])


def app_service(request: Request) -> AppService:
    service: AppService = request.app.state.app_service
    return service


@admin.post(
    "/apps",
    status_code=201,
    summary="Create an app (admin); answers its API key once",
    responses={**ok(201, schemas.AppOut), **errors(401, 422)},
    openapi_extra=body_doc(schemas.AppCreate),
)
async def create_app(request: Request) -> Any:
    app, api_key = await app_service(request).create(await json_body(request))
    return json_response(app_json(app, api_key), 201)


@admin.get(
    "/apps",
    summary="List the apps by id (admin; cursor pagination)",
    responses={**ok(200, schemas.AppPage), **errors(401, 422)},
)
async def list_apps(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> Any:
    page = await app_service(request).list_page(limit, cursor)
    return json_response({"items": [app_json(app) for app in page.items], "next_cursor": page.next_cursor})


@admin.get("/apps/{app_id}", summary="Show an app (admin)", responses={**ok(200, schemas.AppOut), **errors(401, 404)})
async def show_app(app_id: AppIdPath, request: Request) -> Any:
    return json_response(app_json(await app_service(request).get(app_id), with_secrets=True))


@admin.patch(
    "/apps/{app_id}",
    summary="Change an app's limits, callback defaults or allowed hosts (admin)",
    responses={**ok(200, schemas.AppOut), **errors(401, 404, 422)},
    openapi_extra=body_doc(schemas.AppUpdate),
)
async def update_app(app_id: AppIdPath, request: Request, node: NodeDep) -> Any:
    app = await app_service(request).update(app_id, await json_body(request))
    return json_response(app_json(app, with_secrets=True))


@admin.post(
    "/apps/{app_id}/rotate",
    summary="Rotate the API key and/or signing secret (admin; no body: both, the old secret kept for a day)",
    responses={**ok(200, schemas.AppOut), **errors(401, 404, 422)},
    openapi_extra=body_doc(schemas.Rotate, required=False),  # every field has a default
)
async def rotate_app(app_id: AppIdPath, request: Request) -> Any:
    raw = await request.body()
    body = known_object(await json_body(request), {"api_key", "secret", "grace_s"}) if raw.strip() else {}
    flags = {}
    for name in ("api_key", "secret"):
        value = body.get(name, True)
        if not isinstance(value, bool):
            raise InvalidInput(name, "must be true or false")
        flags[name] = value
    grace_s = body.get("grace_s", 86_400)
    if not isinstance(grace_s, int) or isinstance(grace_s, bool):
        raise InvalidInput("grace_s", "must be an integer number of seconds")
    app, api_key = await app_service(request).rotate(
        app_id, api_key=flags["api_key"], secret=flags["secret"], grace_s=grace_s
    )
    return json_response(app_json(app, api_key, with_secrets=True))


@admin.post(
    "/apps/{app_id}/disable",
    summary="Disable an app (admin): its key answers 403 and its tasks do not fire until it is enabled",
    responses={**ok(200, schemas.AppOut), **errors(401, 404)},
)
async def disable_app(app_id: AppIdPath, request: Request) -> Any:
    return json_response(app_json(await app_service(request).set_disabled(app_id, True)))


@admin.post(
    "/apps/{app_id}/enable",
    summary="Enable an app again (admin): its tasks resume under their misfire policy",
    responses={**ok(200, schemas.AppOut), **errors(401, 404)},
)
async def enable_app(app_id: AppIdPath, request: Request) -> Any:
    return json_response(app_json(await app_service(request).set_disabled(app_id, False)))


@admin.delete(
    "/apps/{app_id}",
    summary="Delete an app with all its tasks and targets (admin); ?confirm=<app id> is required",
    responses={**ok(200, schemas.AppDeleted), **errors(400, 401, 404)},
)
async def delete_app(
    app_id: AppIdPath,
    request: Request,
    confirm: Annotated[str | None, Query(max_length=200, description="the app id again")] = None,
) -> Any:
    deleted = await app_service(request).delete(app_id, confirm)
    return json_response({"id": app_id, "deleted_tasks": deleted})


@admin.get(
    "/apps/{app_id}/stats",
    summary="An app's stats (admin)",
    responses={**ok(200, schemas.AppStats), **errors(401, 404)},
)
async def app_stats_admin(app_id: AppIdPath, request: Request, node: NodeDep) -> Any:
    stats = await stats_of(node, await app_service(request).get(app_id))
    return json_response(stats)


@router.get(
    "/app",
    summary="The calling app (its settings and signing secrets)",
    responses={**ok(200, schemas.AppOut), **errors(401)},
)
async def me(app: AppDep) -> Any:
    return json_response(app_json(app, with_secrets=True))


@router.get("/stats", summary="The calling app's stats", responses={**ok(200, schemas.AppStats), **errors(401)})
async def my_stats(app: AppDep, node: NodeDep) -> Any:
    return json_response(await stats_of(node, app))


async def stats_of(node: Node, app: App) -> dict[str, Any]:
    """The app's stats: task and dead-letter counts read at the request from the stores' counts and the
    app's dead flows (:mod:`tjobs.service.task_counts`, as of ``counted_at_ms``: every node's writes
    committed before it), never a count of the tasks; fires and lateness are this node's."""
    counts = await node.tasks.counts.of(app.id)
    series = node.metrics.per_app.get(app.id)  # this app's own numbers: no walk over every app's series
    fires = series.fires if series is not None else 0
    failures = (
        0
        if series is None
        else sum(attempts for (outcome, *_), attempts in series.attempts.items() if outcome != "delivered")
    )
    return {
        "app_id": app.id,
        "active_tasks": counts.active,
        "paused_tasks": counts.paused,
        "completed_tasks": counts.completed,
        "dead_letters": counts.dead_letters,
        "dead_letters_capped": False,
        "counted_at_ms": counts.counted_at_ms,
        "fires": int(fires),
        "callback_failures": int(failures),
        "fire_lateness": _lateness(series.fire_lateness if series is not None else None),
        "fire_lateness_recent": node.slo.lateness.windows(app.id),
    }


def _lateness(histogram: Buckets | None) -> dict[str, Any]:
    buckets: list[tuple[float, int]] = []
    if histogram is not None:
        seen = 0
        for bound, count in zip((*histogram.bounds, math.inf), histogram.counts, strict=True):
            seen += count
            buckets.append((bound, seen))
    total = buckets[-1][1] if buckets else 0

    def quantile(q: float) -> float | None:
        if total == 0:
            return None
        rank = q * total
        for bound, cumulative in buckets:
            if cumulative >= rank:
                return bound if math.isfinite(bound) else None
        return None

    return {"count": total, "p50_s": quantile(0.5), "p90_s": quantile(0.9), "p99_s": quantile(0.99)}
