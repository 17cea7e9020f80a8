"""``GET /v1/slo``: the calling app's service levels as seen by THIS node.

p99 fire lateness over the last 1 m / 5 m / 1 h (the node's recent-lateness windows) and reach
(delivered / (delivered + dead)) over the flows this node finished since it started, each against
its objective (p99 < 1 s, reach >= 99.99 %). A node only sees the fires it committed and the flows
it delivered; the cluster-wide figures are Prometheus' (recording rules
``tjobs:fire_lateness_p99_seconds:5m`` and ``tjobs:reach_ratio:30m``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tjobs.api.deps import AppDep, NodeDep, errors, json_response

router = APIRouter(prefix="/v1", tags=["apps"])

P99_OBJECTIVE_S = 1.0
REACH_OBJECTIVE = 0.9999


@router.get("/slo", summary="The calling app's p99 lateness and reach on this node", responses={**errors(401)})
async def my_slo(app: AppDep, node: NodeDep) -> Any:
    windows = node.slo.lateness.windows(app.id)
    counts = node.slo.outcome_counts
    delivered = counts.get((app.id, "delivered"), 0)
    dead = counts.get((app.id, "dead"), 0)
    finished = delivered + dead
    reach = delivered / finished if finished else None
    lateness = {
        name: {
            "fires": window.get("count", 0),
            "p99_s": window.get("p99_s"),
            "met": window.get("p99_s") is None or window["p99_s"] <= P99_OBJECTIVE_S,
        }
        for name, window in windows.items()
    }
    return json_response(
        {
            "app_id": app.id,
            "scope": "node",
            "node_id": node.node_id,
            "objectives": {"p99_lateness_s": P99_OBJECTIVE_S, "reach": REACH_OBJECTIVE},
            "fire_lateness": lateness,
            "reach": {
                "delivered": delivered,
                "dead": dead,
                "ratio": reach,
                "met": reach is None or reach >= REACH_OBJECTIVE,
                "since": "node start",
            },
        }
    )
