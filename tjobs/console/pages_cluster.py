"""The cluster (admin only): what this node knows of the cluster, as ``GET /v1/cluster`` answers it.

Nodes and their health, job groups with primary, backups and holder, the plan and its epoch, the
database servers' health, and every node's runtime figures (jobs owned, wheel size, fire and delivery
backlogs, callbacks in flight, cycle load, sync lag, hot-tier lag, clock skew, lease left): each node
publishes its own every 5 s on the coordinator (:mod:`tjobs.service.node_figures`), and the page shows
them with their age; the serving node's are taken at the request. In the embedded mode there is one
node, no plan and no groups.

The shard map (each logical database's server, and the map's epoch, as ``GET /v1/shards`` has it
without counting rows) and the moves of logical databases in progress and done (as
``GET /v1/shards/moves``): read from the coordinator and the move record at each view. Servers are
shown as ``host:port``, never with a credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response

from tjobs.console.context import ConsoleRoute, console_of, require_admin
from tjobs.node import Node
from tjobs.service.shard_moves import move_json, without_credentials

router = APIRouter(route_class=ConsoleRoute)


@dataclass(frozen=True, slots=True)
class Figure:
    """One row of the nodes' runtime figures: its label, the record's key, how it is written, what it means."""

    label: str
    key: str
    kind: str  # "count", "ms" (a duration) or "text"
    help: str = ""


FIGURES = (
    Figure("Jobs owned", "jobs_owned", "count"),
    Figure("Wheel size", "wheel_tasks", "count", "tasks loaded in the timing wheel"),
    Figure("Fire backlog", "fire_backlog", "count", "due fires waiting for their transaction"),
    Figure("Delivery backlog", "delivery_backlog", "count", "deliveries waiting for an app's slot"),
    Figure("Callbacks in flight", "callbacks_in_flight", "count"),
    Figure("Compensator backlog", "compensator_backlog", "count", "stale flows found at its last pass"),
    Figure("Last cycle load", "cycle_load_ms", "ms"),
    Figure("Sync lag", "sync_lag_ms", "ms", "since the last cluster sync"),
    Figure("Hot-tier lag", "hot_tier_lag_ms", "ms", "the last task change from another node"),
    Figure("Clock skew", "clock_skew_ms", "ms"),
    Figure("Lease left", "lease_remaining_ms", "ms"),
    Figure("Fenced", "fenced", "text"),
    Figure("Fires committed", "fires_committed", "count", "since the node started"),
    Figure("Compare-and-set rejected", "cas_rejected", "count", "since the node started"),
    Figure("Commit errors", "commit_errors", "count", "since the node started"),
)

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
    records, figures_missing = await node.figures.every_node()
    members = [member["id"] for member in view.get("nodes", [])]
    node_ids = members + sorted(set(records) - set(members))  # a record outlives its member by a sync at most
    shard_map, moves = await _shard_map_and_moves(node)
    return console.render(
        request,
        "cluster.html",
        principal,
        view=view,
        this_node={"id": status.node_id},
        node_ids=node_ids,
        records=records,
        figures=FIGURES,
        figures_missing=figures_missing,
        now_ms=node.clock.now_ms(),
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
