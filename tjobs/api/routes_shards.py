"""The shard map (admin): ``GET /v1/shards`` (where each logical database is and its rows),
``GET /v1/shards/moves`` (the moves in progress and done, :mod:`tjobs.service.shard_moves`) and
``POST /v1/shards:plan`` (the moves an even spread over a server list takes; nothing moves,
:mod:`tjobs.service.shards`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from sharding.topology import MAX_SHARDS
from tjobs.api import schemas
from tjobs.api.deps import NodeDep, body_doc, errors, json_body, json_response, ok, require_admin
from tjobs.service.shard_moves import Outcome, move_json
from tjobs.service.shards import parse_servers, plan, plan_json, stored_map

admin = APIRouter(prefix="/v1", tags=["shards"], dependencies=[Depends(require_admin)])


@admin.get(
    "/shards",
    summary="The shard map with the tasks and flows of each logical database (admin)",
    responses={**ok(200, schemas.Shards), **errors(401)},
)
async def shards(node: NodeDep) -> Any:
    return json_response((await node.shards.status()).to_json())


@admin.get(
    "/shards/moves",
    summary="The moves of logical databases: in progress (step, rows copied, lag) and done (cut-over pause) (admin)",
    responses={**ok(200, schemas.ShardMoves), **errors(401, 422)},
)
async def shard_moves(
    node: NodeDep,
    outcome: Annotated[Outcome | None, Query(description="in_progress or moved; absent: both")] = None,
    database: Annotated[int | None, Query(ge=0, le=MAX_SHARDS - 1, description="one logical database's move")] = None,
) -> Any:
    rows = await node.shards.moves(outcome, database)
    return json_response({"moves": [move_json(row) for row in rows]})


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
