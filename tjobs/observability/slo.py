"""Per-app service levels as this node sees them, for ``GET /v1/slo`` and ``/v1/stats``: fire lateness
over recent windows and the flows' final outcomes (reach). The node feeds them on the fire path
whether or not Prometheus metrics are on (``metrics.enabled``), so the API's SLO accounting never
depends on the metrics.

**Lateness** (:class:`RecentLateness`, windows of 1 min, 5 min, 1 h): fires are counted into 10-second
slots of a bucketed histogram (the metrics' buckets), 360 slots per app (one hour), so a window's
percentiles sum the slots it covers: O(buckets) per fire, bounded memory. Percentiles are bucket upper
bounds (like Prometheus' ``histogram_quantile`` without interpolation).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from tjobs.observability.metrics import LATENESS_BUCKETS_S

SLOT_MS = 10_000
SLOTS = 360
WINDOWS_S = (60, 300, 3600)
MAX_APPS = 10_000


class ServiceLevels:
    """What ``GET /v1/slo`` reads: the recent-lateness windows and, per (app, final status), the flows
    this node finished since it started."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self.lateness = RecentLateness(now_ms)
        self.outcome_counts: dict[tuple[str, str], int] = {}  # (app, status) -> flows

    def observe_fire(self, app_id: str, lateness_s: float) -> None:
        self.lateness.observe(app_id, lateness_s)

    def observe_outcome(self, app_id: str, status: str) -> None:
        key = (app_id, status)
        self.outcome_counts[key] = self.outcome_counts.get(key, 0) + 1


class RecentLateness:
    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._bounds = list(LATENESS_BUCKETS_S)
        # app -> slot index -> (slot number, counts per bucket + overflow)
        self._slots: dict[str, list[tuple[int, list[int]] | None]] = {}

    def observe(self, app_id: str, lateness_s: float) -> None:
        slots = self._slots.get(app_id)
        if slots is None:
            if len(self._slots) >= MAX_APPS:
                return
            slots = self._slots[app_id] = [None] * SLOTS
        number = self._now_ms() // SLOT_MS
        index = number % SLOTS
        entry = slots[index]
        if entry is None or entry[0] != number:
            entry = slots[index] = (number, [0] * (len(self._bounds) + 1))
        entry[1][bisect.bisect_left(self._bounds, lateness_s)] += 1

    def windows(self, app_id: str) -> dict[str, Any]:
        """``{"1m": {...}, "5m": {...}, "1h": {...}}`` with count and p50/p90/p99 in seconds."""
        now_number = self._now_ms() // SLOT_MS
        slots = self._slots.get(app_id) or []
        out: dict[str, Any] = {}
        for window_s in WINDOWS_S:
            span = window_s * 1000 // SLOT_MS
            counts = [0] * (len(self._bounds) + 1)
            for entry in slots:
                if entry is not None and now_number - span < entry[0] <= now_number:
                    counts = [a + b for a, b in zip(counts, entry[1], strict=True)]
            out[_label(window_s)] = self._summary(counts)
        return out

    def _summary(self, counts: list[int]) -> dict[str, Any]:
        total = sum(counts)

        def quantile(q: float) -> float | None:
            if total == 0:
                return None
            rank, seen = q * total, 0
            for index, count in enumerate(counts):
                seen += count
                if seen >= rank:
                    return self._bounds[index] if index < len(self._bounds) else None
            return None

        return {"count": total, "p50_s": quantile(0.5), "p90_s": quantile(0.9), "p99_s": quantile(0.99)}


def _label(window_s: int) -> str:
    return f"{window_s // 3600}h" if window_s >= 3600 else f"{window_s // 60}m"
