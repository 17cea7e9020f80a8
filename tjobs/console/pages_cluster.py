"""The cluster (admin only): what this node knows of the cluster, as ``GET /v1/cluster`` answers it.

Nodes and their health, job groups with primary, backups and holder, the plan and its epoch, the
database servers' health and this node's own figures (jobs owned, wheel size, fire backlog). In the
embedded mode there is one node, no plan and no groups.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from tjobs.console.context import ConsoleRoute, console_of, require_admin

router = APIRouter(route_class=ConsoleRoute)

HOT_TIERS = {
    "LocalHotPath": "in-process (changes reach other nodes at their cycle load)",
    "RedisHotPath": "Redis",
    "DbPollHotPath": "database poll",
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
    return console.render(
        request,
        "cluster.html",
        principal,
        view=view,
        this_node=this_node,
        servers=status.database_servers,
        hot_tier=HOT_TIERS.get(type(node.hotpath).__name__, type(node.hotpath).__name__),
        topology=node.settings.storage.topology,
    )
