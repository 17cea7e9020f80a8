"""``GET /v1/slo?window=``: an app's service levels over the cluster, the same on every node.

The figures are every node's minutes as the store holds them (:mod:`tjobs.observability.slo_recorder`
adds them every ``slo.flush_s``, 60 s by default), summed over the window's minutes
(:meth:`TaskStore.sum_slo_minutes`: the window's whole hours from the per-hour rows, its edges from the
minutes), never the flow tables. A
window ends with the current minute, so the last minute or so (not added yet) is missing, on every
node alike.

**Lateness** is the receiver's: ``delivery_lateness`` is each flow's first attempt to each destination,
from the scheduled instant to the receiver's answer (the p99 objective holds to it), with the same
attempts when the request was written (``at_send``). ``commit_lateness`` (the fire transaction
committed) is shown beside it under its own name: it is not delivery, the callback is sent after it.
Each quantile is the histogram bucket that holds it (:func:`tjobs.observability.slo.bucketed_quantiles`:
``p99_s`` its upper bound, ``p99_above_s`` the bound below, ``p99_label`` such as ``"≤ 250 ms"``); the
objective, 1 s, is a bucket bound, so "met" is exact.

Reach is ``delivered / (delivered + dead)``: the flows that finished in the window and how many of
them arrived; ``fires`` counts what fell due and was committed.
"""

from __future__ import annotations

from typing import Any

from tjobs.clock import Clock, iso_ms
from tjobs.errors import InvalidInput
from tjobs.model import SloCounts
from tjobs.observability.slo import MS_PER_MINUTE, bucketed_quantiles
from tjobs.stores.base import TaskStore

WINDOW_MINUTES = {"5m": 5, "1h": 60, "1d": 1_440, "7d": 10_080}
P99_OBJECTIVE_S = 1.0
REACH_OBJECTIVE = 0.9999


class ClusterServiceLevels:
    """The cluster's service levels as the API and the console read them (one per node: ``Node.service_levels``)."""

    def __init__(self, store: TaskStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def report(self, app_id: str | None, window: str) -> dict[str, Any]:
        """:func:`cluster_service_levels` of ``app_id`` over ``window``, ending with the current minute."""
        return await cluster_service_levels(self._store, app_id, window, self._clock.now_ms())

    async def counts(self, app_id: str | None, from_minute: int, to_minute: int) -> SloCounts:
        """The summed counts of ``app_id`` (every app: ``None``) over ``[from_minute, to_minute)``."""
        return await self._store.sum_slo_minutes(app_id, from_minute, to_minute)


async def cluster_service_levels(store: TaskStore, app_id: str | None, window: str, now_ms: int) -> dict[str, Any]:
    """The report of ``app_id`` (every app: ``None``) over ``window`` ending with the current minute:
    the first attempts' delivery lateness (the objective's), the fires' commit lateness beside it."""
    minutes = WINDOW_MINUTES.get(window)
    if minutes is None:
        raise InvalidInput("window", f"must be one of {', '.join(WINDOW_MINUTES)}", "invalid_choice")
    to_minute = now_ms // MS_PER_MINUTE + 1
    from_minute = to_minute - minutes
    counts = await store.sum_slo_minutes(app_id, from_minute, to_minute)
    finished = counts.delivered + counts.dead
    reach = counts.delivered / finished if finished else None
    return {
        "app_id": app_id,
        "scope": "cluster",
        "window": window,
        "from": iso_ms(from_minute * MS_PER_MINUTE),
        "to": iso_ms(to_minute * MS_PER_MINUTE),
        "objectives": {"p99_lateness_s": P99_OBJECTIVE_S, "reach": REACH_OBJECTIVE},
        "fires": counts.fires,
        "delivery_lateness": delivery_lateness(counts),
        "commit_lateness": {**bucketed_quantiles(counts.lateness), "measured_at": COMMIT_MEASURED_AT},
        "reach": {
            "delivered": counts.delivered,
            "dead": counts.dead,
            "ratio": reach,
            "met": reach is None or reach >= REACH_OBJECTIVE,
        },
        "misses": counts.misses,
        "throttled": counts.throttled,
        "dead": counts.dead,
    }


DELIVERY_MEASURED_AT = "first attempt, answer received (scheduled instant to the receiver's answer)"
SEND_MEASURED_AT = "first attempt, request written"
COMMIT_MEASURED_AT = "fire transaction committed (not delivery: the callback is sent after it)"


def delivery_lateness(counts: SloCounts) -> dict[str, Any]:
    """The first attempts' lateness at the answer, held to the p99 objective, with the same attempts'
    lateness when the request was written beside it (``at_send``)."""
    answered = bucketed_quantiles(counts.first_answer_lateness)
    p99 = answered["p99_s"]
    return {
        **answered,
        "measured_at": DELIVERY_MEASURED_AT,
        "met": answered["count"] == 0 or (p99 is not None and p99 <= P99_OBJECTIVE_S),
        "at_send": {**bucketed_quantiles(counts.first_send_lateness), "measured_at": SEND_MEASURED_AT},
    }
