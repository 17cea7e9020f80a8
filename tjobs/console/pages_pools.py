"""Pools and executors: every executor pool of an app with its live executors (id, address, zone, last
heartbeat, lease expiry, callbacks in flight), and a warning for each pool where flows found no live
executor in the last 15 minutes and which has none now.

One source with ``GET /v1/pools/{pool}``: :meth:`tjobs.service.pools.PoolService.app_state` (through the
API's one :class:`~tjobs.service.pools.PoolService`). In a cluster, the last heartbeat is the newest this
node knows (docs/pools.md) and the in-flight counts are every node's as each last published them (every
5 s: the page says how old). An app session sees its own app's pools; the admin picks an app.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from tjobs.api.routes_pools import pool_service_of
from tjobs.console.context import ConsoleRoute, console_of

router = APIRouter(route_class=ConsoleRoute)


@router.get("/console/pools")
async def pools_page(request: Request, app: Annotated[str | None, Query(max_length=200)] = None) -> Response:
    console = console_of(request)
    principal, scoped = await console.listing_scope(request, app)
    state = None
    if scoped is not None:
        state = await pool_service_of(request.app.state, console.node).app_state(scoped)
    return await console.render_listing(
        request, "pools.html", principal, scoped, state=state, now_ms=console.node.clock.now_ms()
    )
