"""``GET /v1/slo``: an app's service levels, for the cluster (``?window=``) or as seen by THIS node.

With ``window`` (``5m``, ``1h``, ``1d``, ``7d``) the answer is the cluster's, the same on every node
(:mod:`tjobs.service.cluster_slo`: every node's minutes summed from the store): p50/p90/p99 of the
first attempts' delivery lateness (scheduled instant to the receiver's answer; at the send beside
it) and of the fires' commit lateness, reach, misses, throttled and dead, for the calling app; the
admin key names an app with ``app_id``, or gets every app's total without it. Without ``window``,
the app's figures on this node, as below.

p99 first-attempt delivery lateness (and commit lateness, beside it) over the last 1 m / 5 m / 1 h
(the node's recent windows) and reach (delivered / (delivered + dead)) over the flows this node
finished since it started, each against its objective (p99 <= 1 s, reach >= 99.99 %). A node only
sees the fires it committed and the flows it delivered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Query

from tjobs.api.deps import AppOrAdminDep, NodeDep, errors, json_response
from tjobs.errors import InvalidInput, NotFound
from tjobs.model import App
from tjobs.observability.slo import bucketed_quantiles
from tjobs.service.cluster_slo import COMMIT_MEASURED_AT, DELIVERY_MEASURED_AT
from tjobs.service.cluster_slo import P99_OBJECTIVE_S as P99_OBJECTIVE_S  # the console reads the objectives here
from tjobs.service.cluster_slo import REACH_OBJECTIVE as REACH_OBJECTIVE

if TYPE_CHECKING:
    from tjobs.node import Node

P99_KEYS = ("p99_s", "p99_above_s", "p99_label")  # the bucket holding the p99 (tjobs.observability.slo)

router = APIRouter(prefix="/v1", tags=["apps"])


@router.get(
    "/slo",
    summary="Service levels: the cluster's over a window (the same on every node), or this node's",
    responses={**errors(401, 404, 422)},
)
async def my_slo(
    caller: AppOrAdminDep,
    node: NodeDep,
    window: Annotated[Literal["5m", "1h", "1d", "7d"] | None, Query(description="the cluster's, over")] = None,
    app_id: Annotated[str | None, Query(max_length=64, description="admin: one app (default: all)")] = None,
) -> Any:
    if window is not None:
        if caller is not None and app_id not in (None, caller.id):
            raise NotFound("app", app_id)
        subject = caller.id if caller is not None else app_id
        return json_response(await node.cluster_slo.report(subject, window))
    if caller is None:
        raise InvalidInput("window", "the admin key reads the cluster's service levels: give a window")
    return json_response(node_service_levels(caller, node))


def node_service_levels(app: App, node: Node) -> dict[str, Any]:
    counts = node.slo.outcome_counts
    delivered = counts.get((app.id, "delivered"), 0)
    dead = counts.get((app.id, "dead"), 0)
    finished = delivered + dead
    reach = delivered / finished if finished else None
    delivery = {}
    for name, histogram in node.slo.answer_lateness.histograms(app.id).items():
        window = bucketed_quantiles(histogram)
        p99 = window["p99_s"]
        delivery[name] = {
            "attempts": window["count"],
            **{key: window[key] for key in P99_KEYS},
            "met": window["count"] == 0 or (p99 is not None and p99 <= P99_OBJECTIVE_S),
        }
    commit = {}
    for name, histogram in node.slo.lateness.histograms(app.id).items():
        window = bucketed_quantiles(histogram)
        commit[name] = {"fires": window["count"], **{key: window[key] for key in P99_KEYS}}
    return {
        "app_id": app.id,
        "scope": "node",
        "node_id": node.node_id,
        "objectives": {"p99_lateness_s": P99_OBJECTIVE_S, "reach": REACH_OBJECTIVE},
        "delivery_lateness": {**delivery, "measured_at": DELIVERY_MEASURED_AT},
        "commit_lateness": {**commit, "measured_at": COMMIT_MEASURED_AT},
        "reach": {
            "delivered": delivered,
            "dead": dead,
            "ratio": reach,
            "met": reach is None or reach >= REACH_OBJECTIVE,
            "since": "node start",
        },
    }
