"""Per-app service levels as this node sees them, for ``GET /v1/slo`` and ``/v1/stats``: fire lateness
over recent windows and the flows' final outcomes (reach). The node feeds them on the fire path
whether or not Prometheus metrics are on (``metrics.enabled``), so the API's SLO accounting never
depends on the metrics.

**Lateness** (:class:`RecentLateness`, windows of 1 min, 5 min, 1 h): fires are counted into 10-second
slots of a bucketed histogram (the metrics' buckets), 360 slots per app (one hour), so a window's
percentiles sum the slots it covers: O(buckets) per fire, bounded memory. A percentile is known to its
bucket only: :func:`bucketed_quantiles` gives the bucket (its bounds and a label, ``"≤ 250 ms"``),
never a bound dressed as a measured value; :func:`lateness_summary` the upper bounds alone.

**Minutes** (:class:`MinuteFolds`): the same fires, with the flows' outcomes, misses and throttled
callbacks, folded per app and minute for the cluster (:mod:`tjobs.observability.slo_recorder` adds them
to the store once a minute; ``GET /v1/slo?window=`` sums every node's). A fire costs one more dict
lookup and two increments; the histogram slot is found once for both.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

from tjobs.model import SLO_LATENESS_SLOTS, SLO_VALUES, SloCounts, SloMinute
from tjobs.observability.metrics import LATENESS_BUCKETS_S

SLOT_MS = 10_000
SLOTS = 360
WINDOWS_S = (60, 300, 3600)
MAX_APPS = 10_000
MS_PER_MINUTE = 60_000
MAX_REDRIVEN = 100_000  # re-driven dead letters remembered until their outcome
MAX_FOLDED_MINUTES = 60 * MAX_APPS  # (app, minute) folds kept while the store cannot take them
assert len(LATENESS_BUCKETS_S) + 1 == SLO_LATENESS_SLOTS


class ServiceLevels:
    """What ``GET /v1/slo`` reads: the recent-lateness windows (fires' commit lateness, and their first
    attempts' lateness at the answer) and, per (app, final status), the flows this node finished since
    it started."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self.lateness = RecentLateness(now_ms)  # commit lateness
        self.answer_lateness = RecentLateness(now_ms)  # first attempts, at the answer
        self.outcome_counts: dict[tuple[str, str], int] = {}  # (app, status) -> flows
        self.minutes = MinuteFolds()
        self._redriven: dict[tuple[int, int], None] = {}  # dead letters re-driven here, oldest first

    def observe_fire(self, app_id: str, lateness_s: float) -> None:
        now_ms = self._now_ms()
        slot = bisect.bisect_left(LATENESS_BUCKETS_S, lateness_s)
        self.lateness.observe_slot(app_id, slot, now_ms)
        self.minutes.add(app_id, now_ms, _FIRES, slot)

    def observe_first_attempt(self, app_id: str, send_lateness_s: float, answer_lateness_s: float) -> None:
        """One destination's first attempt of a flow: its lateness when the request was written and
        when the answer came back (or the attempt ended without one)."""
        now_ms = self._now_ms()
        answer_slot = bisect.bisect_left(LATENESS_BUCKETS_S, answer_lateness_s)
        self.answer_lateness.observe_slot(app_id, answer_slot, now_ms)
        self.minutes.add_lateness(app_id, now_ms, SEND, bisect.bisect_left(LATENESS_BUCKETS_S, send_lateness_s))
        self.minutes.add_lateness(app_id, now_ms, ANSWER, answer_slot)

    def observe_redrive(self, flow: tuple[int, int]) -> None:
        """A dead letter (``(task_id, scheduled_at_ms)``) re-driven: its death is counted already, so
        the outcome its re-drive comes to is not counted again (:meth:`observe_outcome`)."""
        redriven = self._redriven
        redriven.pop(flow, None)
        if len(redriven) >= MAX_REDRIVEN:
            del redriven[next(iter(redriven))]  # the oldest: bounded memory, at worst counted twice
        redriven[flow] = None

    def observe_outcome(self, app_id: str, status: str, flow: tuple[int, int] | None = None) -> None:
        """A flow's outcome recorded (``flow``: its ``(task_id, scheduled_at_ms)``). A re-driven dead
        letter's final outcome is not counted: it was counted dead once, when it first died."""
        if self._redriven and flow in self._redriven and status in _FINAL:
            del self._redriven[flow]
            return
        key = (app_id, status)
        self.outcome_counts[key] = self.outcome_counts.get(key, 0) + 1
        field = _OUTCOME_FIELDS.get(status)
        if field is not None:
            self.minutes.add(app_id, self._now_ms(), field)

    def observe_misses(self, app_id: str, missed: int) -> None:
        self.minutes.add(app_id, self._now_ms(), _MISSES, count=missed)

    def observe_throttled(self, app_id: str) -> None:
        self.minutes.add(app_id, self._now_ms(), _THROTTLED)


_FIRES, _DELIVERED, _DEAD, _MISSES, _THROTTLED = range(5)
_OUTCOME_FIELDS = {"delivered": _DELIVERED, "dead": _DEAD}
_FINAL = frozenset({"delivered", "dead", "skipped", "cancelled"})
COMMIT, SEND, ANSWER = range(3)  # the lateness histograms, in :meth:`SloCounts.values` order
_FOLD_SIZE = SLO_VALUES


class MinuteFolds:
    """Per (app, minute): fires, delivered, dead, misses, throttled, then the three lateness
    histograms' slots, as one list of counts (:meth:`SloCounts.values`'s order). :meth:`take` hands
    them over (to be added to the store) and starts afresh."""

    def __init__(self) -> None:
        self._folds: dict[tuple[str, int], list[int]] = {}

    def _fold(self, app_id: str, now_ms: int) -> list[int] | None:
        key = (app_id, now_ms // MS_PER_MINUTE)
        fold = self._folds.get(key)
        if fold is None:
            if len(self._folds) >= MAX_FOLDED_MINUTES:
                return None
            fold = self._folds[key] = [0] * _FOLD_SIZE
        return fold

    def add(self, app_id: str, now_ms: int, field: int, slot: int | None = None, count: int = 1) -> None:
        """``count`` more of ``field``; with ``slot``, one more fire in that slot of the commit lateness."""
        fold = self._fold(app_id, now_ms)
        if fold is None:
            return
        fold[field] += count
        if slot is not None:
            fold[_THROTTLED + 1 + slot] += 1

    def add_lateness(self, app_id: str, now_ms: int, histogram: int, slot: int) -> None:
        """One count in ``slot`` of ``histogram`` (:data:`SEND`, :data:`ANSWER`), no other count."""
        fold = self._fold(app_id, now_ms)
        if fold is not None:
            fold[_THROTTLED + 1 + histogram * SLO_LATENESS_SLOTS + slot] += 1

    def take(self) -> list[SloMinute]:
        folds, self._folds = self._folds, {}
        return [SloMinute(app, minute, SloCounts.from_values(fold)) for (app, minute), fold in folds.items()]

    def give_back(self, minutes: list[SloMinute]) -> None:
        """Minutes the store did not take: folded in again, to go with the next :meth:`take`."""
        for minute in minutes:
            values = list(minute.counts.values())
            key = (minute.app_id, minute.minute)
            fold = self._folds.get(key)
            if fold is None:
                if len(self._folds) >= MAX_FOLDED_MINUTES:
                    continue
                self._folds[key] = values
            else:
                self._folds[key] = [a + b for a, b in zip(fold, values, strict=True)]


class RecentLateness:
    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._bounds = list(LATENESS_BUCKETS_S)
        # app -> slot index -> (slot number, counts per bucket + overflow)
        self._slots: dict[str, list[tuple[int, list[int]] | None]] = {}

    def observe(self, app_id: str, lateness_s: float) -> None:
        self.observe_slot(app_id, bisect.bisect_left(self._bounds, lateness_s), self._now_ms())

    def observe_slot(self, app_id: str, slot: int, now_ms: int) -> None:
        """A fire whose lateness falls in histogram slot ``slot`` (``bisect_left`` of the bounds)."""
        slots = self._slots.get(app_id)
        if slots is None:
            if len(self._slots) >= MAX_APPS:
                return
            slots = self._slots[app_id] = [None] * SLOTS
        number = now_ms // SLOT_MS
        index = number % SLOTS
        entry = slots[index]
        if entry is None or entry[0] != number:
            entry = slots[index] = (number, [0] * (len(self._bounds) + 1))
        entry[1][slot] += 1

    def windows(self, app_id: str) -> dict[str, Any]:
        """``{"1m": {...}, "5m": {...}, "1h": {...}}`` with count and p50/p90/p99 in seconds."""
        return {label: lateness_summary(counts) for label, counts in self.histograms(app_id).items()}

    def histograms(self, app_id: str) -> dict[str, list[int]]:
        """``{"1m": counts, "5m": counts, "1h": counts}``: the app's histogram over each window."""
        now_number = self._now_ms() // SLOT_MS
        slots = self._slots.get(app_id) or []
        out: dict[str, list[int]] = {}
        for window_s in WINDOWS_S:
            span = window_s * 1000 // SLOT_MS
            counts = [0] * (len(self._bounds) + 1)
            for entry in slots:
                if entry is not None and now_number - span < entry[0] <= now_number:
                    counts = [a + b for a, b in zip(counts, entry[1], strict=True)]
            out[_label(window_s)] = counts
        return out


QUANTILES = ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"))
_PER_MILLE = {name: round(q * 1000) for q, name in QUANTILES}


def _quantile_slot(counts: Sequence[int], total: int, name: str) -> int:
    """The slot holding the ``name`` quantile by nearest rank: the slot of the ⌈q·total⌉-th smallest
    lateness (integer arithmetic, so no rounding moves it into the next slot)."""
    rank = max(1, -(-_PER_MILLE[name] * total // 1000))
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            return index
    return len(counts) - 1


def lateness_summary(counts: Sequence[int]) -> dict[str, Any]:
    """Count and p50/p90/p99 (seconds, the upper bound of the bucket holding the quantile; ``None``
    past the last bound or without fires) of a lateness histogram, one count per slot of
    :data:`LATENESS_BUCKETS_S`."""
    total = sum(counts)
    out: dict[str, Any] = {"count": total}
    for _, name in QUANTILES:
        slot = _quantile_slot(counts, total, name) if total else None
        out[f"{name}_s"] = None if slot is None or slot >= len(LATENESS_BUCKETS_S) else LATENESS_BUCKETS_S[slot]
    return out


def bucketed_quantiles(counts: Sequence[int]) -> dict[str, Any]:
    """:func:`lateness_summary` labelled for what it is: each quantile is known only to the bucket
    that holds it, so besides ``pNN_s`` (the bucket's upper bound: the true quantile is at most this)
    it gives ``pNN_above_s`` (the bound below: the true quantile is more than this; 0 in the first
    bucket) and ``pNN_label``, the bucket as a reader should take it (``"≤ 250 ms"``, ``"> 300 s"``
    past the last bound, ``None`` without data). The true quantile is always inside the bucket shown:
    within one bucket."""
    out = lateness_summary(counts)
    total = out["count"]
    bounds = LATENESS_BUCKETS_S
    for _, name in QUANTILES:
        if not total:
            out[f"{name}_above_s"], out[f"{name}_label"] = None, None
            continue
        slot = _quantile_slot(counts, total, name)
        above = bounds[slot - 1] if slot > 0 else 0.0
        out[f"{name}_above_s"] = above
        out[f"{name}_label"] = f"≤ {_duration(bounds[slot])}" if slot < len(bounds) else f"> {_duration(above)}"
    out["quantiles"] = "bucketed: the true quantile is above pNN_above_s and at most pNN_s"
    return out


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:g} ms" if seconds < 1 else f"{seconds:g} s"


def _label(window_s: int) -> str:
    return f"{window_s // 3600}h" if window_s >= 3600 else f"{window_s // 60}m"
