"""The shard map (admin): ``GET /v1/shards`` (where each logical database is and its rows) and
``POST /v1/shards:plan`` (the moves an even spread over a server list takes; nothing moves).
:mod:`tjobs.service.shards` answers both."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from tjobs.api import schemas
from tjobs.api.deps import NodeDep, body_doc, errors, json_body, json_response, ok, require_admin
from tjobs.service.shards import parse_servers, plan, plan_json, shard_status, stored_map

admin = APIRouter(prefix="/v1", tags=["shards"], dependencies=[Depends(require_admin)])


@admin.get(
    "/shards",
    summary="The shard map with the tasks and flows of each logical database (admin)",
    responses={**ok(200, schemas.Shards), **errors(401)},
)
async def shards(node: NodeDep) -> Any:
    return json_response((await shard_status(node.coordinator, node.store)).to_json())


@admin.post(
    "/shards:plan",
    summary="The moves that would spread the logical databases evenly over a server list (admin)",
    responses={**ok(200, schemas.ShardPlan), **errors(401, 422)},
    openapi_extra=body_doc(schemas.ShardPlanRequest),
)
async def plan_shards(request: Request, node: NodeDep) -> Any:
    servers = parse_servers(await json_body(request))
    shard_map = await stored_map(node.coordinator)
    return json_response(plan_json(shard_map, plan(shard_map, servers)))
