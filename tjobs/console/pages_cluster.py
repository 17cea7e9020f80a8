"""The cluster (admin only): what this node knows of the cluster, as ``GET /v1/cluster`` answers it.

Nodes and their health, job groups with primary, backups and holder, the plan and its epoch, the
database servers' health and this node's own figures (jobs owned, wheel size, fire backlog). In the
embedded mode there is one node, no plan and no groups.

The shard map (each logical database's server, and the map's epoch, as ``GET /v1/shards`` has it
without counting rows) and the moves of logical databases in progress and done (as
``GET /v1/shards/moves``): read from the coordinator and the move record at each view. Servers are
shown as ``host:port``, never with a credential.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from tjobs.console.context import ConsoleRoute, console_of, require_admin
from tjobs.node import Node
from tjobs.service.shard_moves import move_json, without_credentials

router = APIRouter(route_class=ConsoleRoute)

HOT_TIERS = {
    "LocalHotTier": "in-process (changes reach other nodes at their cycle load)",
    "RedisHotTier": "Redis",
    "DbPollHotTier": "database poll",
}


@router.get("/console/cluster")
async def cluster_page(request: Request) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    require_admin(principal, "cluster")
    node = console.node
    status = node.status()
    view: dict[str, Any] = dict(status.cluster)
    this_node = {
        "id": status.node_id,
        "started": status.started,
        "jobs": len(status.jobs),
        "wheel_tasks": status.wheel_tasks,
        "fire_backlog": status.fire_backlog,
        "fires_committed": status.fires_committed,
        "cas_rejected": status.cas_rejected,
    }
    shard_map, moves = await _shard_map_and_moves(node)
    return console.render(
        request,
        "cluster.html",
        principal,
        view=view,
        this_node=this_node,
        servers=status.database_servers,
        hot_tier=HOT_TIERS.get(type(node.hot_tier).__name__, type(node.hot_tier).__name__),
        topology=node.settings.storage.topology,
        shard_map=shard_map,
        moves=moves,
    )


async def _shard_map_and_moves(node: Node) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The map as the template shows it (``None`` before one is stored) and the recorded moves."""
    moves = [move_json(row) for row in await node.shards.moves()]
    stored = await node.coordinator.read_shard_map()
    if stored is None:
        return None, moves
    moving = {move["database"]: move for move in moves if move["outcome"] == "in_progress"}
    databases = [
        {
            "database": database,
            "server": without_credentials(server),
            "shards": node.shards.shards_of_database(database),
            "moving": moving.get(database),
        }
        for database, server in enumerate(stored.placement)
    ]
    servers = [
        {"server": without_credentials(server), "databases": stored.databases_on(server)} for server in stored.servers
    ]
    return {"epoch": stored.epoch, "databases": databases, "servers": servers}, moves
