"""``/v1/pools``: an app's executor pools — executors register, heartbeat and leave; the app reads them.

Each app sees only its own pools: another app's pool answers 404, like a pool with no live executor
(pools exist while they have one). See :mod:`tjobs.service.pools` and :mod:`tjobs.pools`. ``GET
/v1/pools/{pool}`` gives each executor's last heartbeat, lease expiry and callbacks in flight, from the
same service as the console's pools page (:meth:`tjobs.service.pools.PoolService.pool_state`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel
from starlette.datastructures import State

from tjobs import wire
from tjobs.api.deps import (
    BEARER,
    AppDep,
    ExecutorIdPath,
    NamedRoute,
    PoolNamePath,
    body_doc,
    errors,
    json_body,
    json_response,
    node_of,
    ok,
    request_app,
)
from tjobs.clock import iso_ms
from tjobs.pools.model import Executor
from tjobs.service.pools import ExecutorState, PoolService

if TYPE_CHECKING:
    from tjobs.node import Node

router = APIRouter(prefix="/v1", tags=["pools"])


class PoolSummary(BaseModel):
    name: str
    executors: int
    zones: list[str]


class PoolList(BaseModel):
    items: list[PoolSummary]


class LiveExecutor(wire.StoredExecutor):
    last_heartbeat_at: str
    lease_expires_at: str
    in_flight: int


class PoolOut(BaseModel):
    name: str
    executors: list[LiveExecutor]


class Heartbeat(BaseModel):
    id: str
    ttl_s: int


def pool_service(request: Request) -> PoolService:
    return pool_service_of(request.app.state, node_of(request))


def pool_service_of(state: State, node: Node) -> PoolService:
    """The API's one :class:`PoolService` (made on first use), kept in the app's ``state``."""
    service: PoolService | None = getattr(state, "pool_service", None)
    if service is None:
        service = PoolService(node.coordinator, node.guard, node.settings.limits, node.clock, node.figures)
        state.pool_service = service
    return service


def executor_json(executor: Executor) -> dict[str, Any]:
    """The executor as the coordinator keeps it (:meth:`Executor.to_json`), its registration an ISO instant."""
    stored = executor.to_json()
    registered_at_ms = stored.pop("registered_at_ms")
    return {**stored, "registered_at": iso_ms(registered_at_ms) if registered_at_ms else None}


def executor_state_json(state: ExecutorState) -> dict[str, Any]:
    """A live executor with its last heartbeat (as this node knows it: docs/pools.md), the instant its
    lease ends without another heartbeat, and the callbacks every node has in flight to it."""
    return {
        **executor_json(state.executor),
        "last_heartbeat_at": iso_ms(state.last_heartbeat_ms),
        "lease_expires_at": iso_ms(state.lease_expires_at_ms),
        "in_flight": state.in_flight,
    }


@router.post(
    "/pools/{pool}/executors",
    status_code=201,
    summary="Register an executor into a pool (201), or again (200: idempotent per id; renews its lease)",
    responses={**ok(201, wire.StoredExecutor, "registered"), **ok(200, wire.StoredExecutor), **errors(401, 422)},
    openapi_extra=body_doc(wire.ExecutorRegistration),
)
async def register_executor(pool: PoolNamePath, request: Request, app: AppDep) -> Any:
    executor, created = await pool_service(request).register(app, pool, await json_body(request))
    return json_response(executor_json(executor), 201 if created else 200)


HEARTBEAT_PATH = "/pools/{pool}/executors/{executor_id}/heartbeat"


@router.put(
    HEARTBEAT_PATH,
    summary="Renew an executor's lease (404: not registered any more; register again)",
    responses={**ok(200, Heartbeat), **errors(401, 404)},
    openapi_extra=BEARER,
)
async def heartbeat(pool: PoolNamePath, executor_id: ExecutorIdPath, request: Request) -> Any:
    # the pool's hot path (every executor, every third of its TTL): served by heartbeat_route below
    app = await request_app(request)
    executor = await pool_service(request).renew(app, pool, executor_id)
    return json_response({"id": executor.id, "ttl_s": executor.ttl_s})


async def _heartbeat_by_path(request: Request) -> Any:
    return await heartbeat(request.path_params["pool"], request.path_params["executor_id"], request)


heartbeat_route = NamedRoute(
    router.prefix + HEARTBEAT_PATH, _heartbeat_by_path, methods=["PUT"], include_in_schema=False
)
"""The heartbeat as a plain Starlette route, put first in the app's routes (:func:`tjobs.api.app.create_api`):
the same function behind the same middleware (admission, metrics under the same route template, body
limit, error handlers), without FastAPI's walk through every router and its parameter solving. The
:func:`heartbeat` route above stays for the OpenAPI document."""


@router.delete(
    "/pools/{pool}/executors/{executor_id}",
    status_code=204,
    summary="Deregister an executor (on shutdown)",
    responses={204: {"description": "deregistered"}, **errors(401, 404)},
)
async def deregister_executor(
    pool: PoolNamePath, executor_id: ExecutorIdPath, request: Request, app: AppDep
) -> Response:
    await pool_service(request).deregister(app, pool, executor_id)
    return Response(status_code=204)


@router.get(
    "/pools", summary="The app's pools that have live executors", responses={**ok(200, PoolList), **errors(401)}
)
async def list_pools(request: Request, app: AppDep) -> Any:
    pools = await pool_service(request).pools(app)
    items = [
        {"name": name, "executors": len(executors), "zones": sorted({e.zone for e in executors})}
        for name, executors in pools.items()
    ]
    return json_response({"items": items})


@router.get(
    "/pools/{pool}",
    summary="A pool's live executors, each with its last heartbeat, lease expiry and callbacks in flight",
    responses={**ok(200, PoolOut), **errors(401, 404)},
)
async def show_pool(pool: PoolNamePath, request: Request, app: AppDep) -> Any:
    states = await pool_service(request).pool_state(app, pool)
    return json_response({"name": pool, "executors": [executor_state_json(state) for state in states]})
