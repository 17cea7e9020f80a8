"""The fire bench's ``--slo`` comparison: the node's SLO p99 against the p99 the sink measured.

After the drain the bench asks ``GET /v1/slo?window=5m`` (the cluster's, from the store) with the bench
app's key until its delivery lateness counts every delivered flow (the nodes add their minutes every
``slo.flush_s``: run the node with ``TJOBS_SLO__FLUSH_S=2`` or wait up to a minute), then reports the
SLO's p99 bucket beside the sink's exact p99 (its receive time minus the scheduled instant) and
whether the sink's p99 falls within the SLO's bucket, or within one bucket of it (issue 27: the SLO's
p99 within 10 % or one bucket of what a receiver measures).
"""

from __future__ import annotations

import asyncio
import bisect
import time
from typing import Any

import orjson
from aiohttp import ClientSession

from tjobs.observability.metrics import LATENESS_BUCKETS_S

SLO_WINDOW = "5m"


async def node_slo(session: ClientSession, base_url: str, api_key: str, delivered: int, timeout_s: float) -> Any:
    """The cluster's SLO report once its delivery lateness counts ``delivered`` first attempts (or the
    last one read when ``timeout_s`` passes)."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {api_key}"}
    report: Any = None
    while True:
        async with session.get(f"{base_url}/v1/slo", params={"window": SLO_WINDOW}, headers=headers) as response:
            report = orjson.loads(await response.read())
        if report.get("delivery_lateness", {}).get("count", 0) >= delivered or time.monotonic() >= deadline:
            return report
        await asyncio.sleep(1.0)


def compare(report: Any, sink_p99_ms: float | None) -> dict[str, Any]:
    """The SLO's p99 bucket and the sink's p99, and how far apart they are in buckets (0: the sink's
    p99 is inside the SLO's bucket)."""
    delivery = report.get("delivery_lateness", {})
    commit = report.get("commit_lateness", {})
    out: dict[str, Any] = {
        "slo_attempts": delivery.get("count"),
        "slo_p99_label": delivery.get("p99_label"),
        "slo_p99_s": delivery.get("p99_s"),
        "slo_p99_above_s": delivery.get("p99_above_s"),
        "slo_p99_at_send_label": delivery.get("at_send", {}).get("p99_label"),
        "slo_commit_p99_label": commit.get("p99_label"),
        "sink_p99_ms": sink_p99_ms,
        "buckets_apart": None,
    }
    if sink_p99_ms is not None and delivery.get("count"):
        sink_slot = bisect.bisect_left(LATENESS_BUCKETS_S, sink_p99_ms / 1000)
        upper = delivery.get("p99_s")
        slo_slot = len(LATENESS_BUCKETS_S) if upper is None else LATENESS_BUCKETS_S.index(upper)
        out["buckets_apart"] = slo_slot - sink_slot
    return out
