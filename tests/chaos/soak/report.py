"""The soak's arithmetic, pure: the counts summed over rounds, the lateness of first sends per fault kind
(a histogram at 1-ms resolution, so hours of fires keep exact percentiles in bounded memory), the
resource samples' trend (first quarter against last quarter), the verdict and the text report.

An instant belongs to a fault when it is due from the fault's start to ``after_ms`` past its end (the
recovery: a resumed node takes its jobs back, a moved shard's backlog drains); otherwise to ``quiet``.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.chaos.accounting import Figures, Promise

QUIET = "quiet"
OVERALL = "overall"
AFTER_FAULT_MS = 5000
EXAMPLES = 20  # instants kept per count for the report


@dataclass(frozen=True)
class FaultRecord:
    """One fault as it ran (epoch ms)."""

    kind: str
    start_ms: int
    end_ms: int
    victim_node: int | None = None
    victim_server: int | None = None
    detail: str = ""


@dataclass
class LatenessHistogram:
    """Lateness values (ms, negative: early) counted per millisecond."""

    counts: Counter[int] = field(default_factory=Counter)

    def add(self, late_ms: int) -> None:
        self.counts[late_ms] += 1

    def merge(self, other: LatenessHistogram) -> None:
        self.counts.update(other.counts)

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    @property
    def early(self) -> int:
        """Values below 0: sent before the instant was due."""
        return sum(count for late, count in self.counts.items() if late < 0)

    def percentile(self, fraction: float) -> int:
        """Nearest rank (``fraction`` in (0, 1]); 0 for no values."""
        total = self.n
        if total == 0:
            return 0
        rank = max(-(-int(fraction * total * 1_000_000) // 1_000_000), 1)  # ceil, without float drift
        seen = 0
        for late in sorted(self.counts):
            seen += self.counts[late]
            if seen >= rank:
                return late
        return max(self.counts)

    def summary(self) -> dict[str, int]:
        return {
            "n": self.n,
            "p50_ms": self.percentile(0.5),
            "p99_ms": self.percentile(0.99),
            "max_ms": max(self.counts, default=0),
            "early": self.early,
        }


def fault_at(instant_ms: int, faults: Sequence[FaultRecord], after_ms: int = AFTER_FAULT_MS) -> FaultRecord | None:
    """The fault ``instant_ms`` is due in (``faults`` sorted by start, not overlapping), ``None`` if none."""
    starts = [f.start_ms for f in faults]
    index = bisect.bisect_right(starts, instant_ms) - 1
    for candidate in (index, index - 1):
        if 0 <= candidate < len(faults):
            fault = faults[candidate]
            if fault.start_ms <= instant_ms <= fault.end_ms + after_ms:
                return fault
    return None


def fault_of(instant_ms: int, faults: Sequence[FaultRecord], after_ms: int = AFTER_FAULT_MS) -> str:
    """The kind of the fault ``instant_ms`` is due in, or :data:`QUIET`."""
    fault = fault_at(instant_ms, faults, after_ms)
    return QUIET if fault is None else fault.kind


COUNTS = ("lost", "duplicate_flows", "phantom", "attempt_reuse")


@dataclass
class Tally:
    """The whole soak's figures, rounds added as they are judged."""

    rounds: int = 0
    expected: int = 0
    delivered: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[Any]] = field(default_factory=dict)
    unknown_task_callbacks: int = 0
    creates: Counter[str] = field(default_factory=Counter)
    lateness: dict[str, LatenessHistogram] = field(default_factory=dict)
    per_fault: dict[int, LatenessHistogram] = field(default_factory=dict)  # by the fault's start_ms

    def histogram(self, kind: str) -> LatenessHistogram:
        return self.lateness.setdefault(kind, LatenessHistogram())

    def add_round(
        self,
        figures: Figures,
        promises: Mapping[int, Promise],
        faults: Sequence[FaultRecord],
        *,
        creates: Mapping[str, int] | None = None,
        after_ms: int = AFTER_FAULT_MS,
    ) -> None:
        """Add one judged round: its counts, and the lateness of its first sends, each under the fault its
        instant was due in (or :data:`QUIET`) and under :data:`OVERALL`; for a fault on one database server,
        also under ``"<kind> (its server)"`` or ``"<kind> (other servers)"`` by the task's server. An
        instant due before its task's create was acknowledged is left out: that lateness is the create's."""
        self.rounds += 1
        self.expected += figures.expected
        self.delivered += figures.delivered
        self.unknown_task_callbacks += figures.unknown_task_callbacks
        found: dict[str, Sequence[Any]] = {
            "lost": figures.lost,
            "duplicate_flows": figures.duplicate_flows,
            "phantom": figures.phantom,
            "attempt_reuse": figures.attempt_reuse,
        }
        for name, items in found.items():
            self.counts[name] += len(items)
            kept = self.examples.setdefault(name, [])
            kept.extend(list(items)[: max(EXAMPLES - len(kept), 0)])
        self.creates.update(creates or {})
        ordered = sorted(faults, key=lambda f: f.start_ms)
        overall = self.histogram(OVERALL)
        for (task_id, instant), late in figures.first_send_late_ms.items():
            promise = promises[task_id]
            if instant < promise.create_acked_ms:
                continue
            overall.add(late)
            fault = fault_at(instant, ordered, after_ms)
            if fault is None:
                self.histogram(QUIET).add(late)
                continue
            self.histogram(fault.kind).add(late)
            self.per_fault.setdefault(fault.start_ms, LatenessHistogram()).add(late)
            if fault.victim_server is not None:
                side = "its server" if promise.server == fault.victim_server else "other servers"
                self.histogram(f"{fault.kind} ({side})").add(late)

    def lateness_summary(self) -> dict[str, dict[str, int]]:
        return {kind: histogram.summary() for kind, histogram in sorted(self.lateness.items())}

    def worst_fault(self, faults: Sequence[FaultRecord]) -> tuple[FaultRecord, dict[str, int]] | None:
        """The fault whose instants' first sends had the highest p99, with that summary."""
        judged = [(f, self.per_fault[f.start_ms].summary()) for f in faults if f.start_ms in self.per_fault]
        return max(judged, key=lambda pair: pair[1]["p99_ms"], default=None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "expected": self.expected,
            "delivered": self.delivered,
            **{name: self.counts[name] for name in COUNTS},
            "unknown_task_callbacks": self.unknown_task_callbacks,
            "creates": dict(self.creates),
            "examples": {
                name: [list(e) if isinstance(e, tuple) else e for e in v] for name, v in self.examples.items()
            },
            "lateness": self.lateness_summary(),
        }


@dataclass(frozen=True)
class Sample:
    """One node's resources at one moment (``state``: ``running``, ``stopped`` or ``down``)."""

    at_ms: int
    node: int
    pid: int
    state: str
    rss_kb: int = 0
    fds: int = 0
    db_connections: int = 0  # established TCP connections to the database servers (server 1 via its proxy)
    etcd_connections: int = 0
    redis_connections: int = 0


TREND_METRICS = ("rss_kb", "fds", "db_connections")


@dataclass(frozen=True)
class Tolerance:
    """A metric grew too much when its last-quarter median exceeds the first's by more than ``ratio``
    of it plus ``slack`` (in the metric's unit)."""

    ratio: float
    slack: float


DEFAULT_TOLERANCES: Mapping[str, Tolerance] = {
    "rss_kb": Tolerance(0.25, 32 * 1024),
    "fds": Tolerance(0.25, 16),
    "db_connections": Tolerance(0.25, 8),
}


@dataclass(frozen=True)
class Trend:
    node: int
    metric: str
    first: float  # median over the first quarter of the judged span
    last: float  # ... over the last quarter
    samples: int
    grew: bool

    @property
    def growth(self) -> float:
        return (self.last - self.first) / self.first if self.first else 0.0


def trends(
    samples: Iterable[Sample],
    *,
    from_ms: int,
    until_ms: int,
    tolerances: Mapping[str, Tolerance] = DEFAULT_TOLERANCES,
) -> list[Trend]:
    """Per node and metric of :data:`TREND_METRICS`: the median of the running samples taken in the first
    quarter of ``[from_ms, until_ms]`` against that of the last quarter. A node with no running sample in
    either quarter has no trend."""
    quarter = (until_ms - from_ms) / 4
    by_node: dict[int, list[Sample]] = {}
    for sample in samples:
        if sample.state == "running" and from_ms <= sample.at_ms <= until_ms:
            by_node.setdefault(sample.node, []).append(sample)
    found = []
    for node, taken in sorted(by_node.items()):
        early = [s for s in taken if s.at_ms < from_ms + quarter]
        late = [s for s in taken if s.at_ms >= until_ms - quarter]
        if not early or not late:
            continue
        for metric in TREND_METRICS:
            first = float(statistics.median(getattr(s, metric) for s in early))
            last = float(statistics.median(getattr(s, metric) for s in late))
            tolerance = tolerances[metric]
            grew = last > first * (1 + tolerance.ratio) + tolerance.slack
            found.append(Trend(node, metric, first, last, len(early) + len(late), grew))
    return found


def failures(tally: Tally, found_trends: Iterable[Trend]) -> list[str]:
    """What fails the soak: any lost, duplicate flow, phantom, reused attempt or early first send, a task id
    that two creates' answers named, and any metric that grew beyond its tolerance. Empty: it passed."""
    reasons = [f"{name}={tally.counts[name]}" for name in COUNTS if tally.counts[name]]
    if tally.creates.get("ids_named_twice"):
        reasons.append(f"ids_named_twice={tally.creates['ids_named_twice']}")
    early = tally.histogram(OVERALL).early
    if early:
        reasons.append(f"early_first_sends={early}")
    if tally.expected == 0:
        reasons.append("nothing was owed: the workload did not run")
    for trend in found_trends:
        if trend.grew:
            reasons.append(
                f"node{trend.node} {trend.metric} grew {trend.first:g} -> {trend.last:g} ({trend.growth:+.0%})"
            )
    return reasons


def text_report(
    tally: Tally,
    found_trends: Sequence[Trend],
    faults: Sequence[FaultRecord],
    reasons: Sequence[str],
    header: Mapping[str, Any],
) -> str:
    """A short human summary of the JSON report."""
    lines = ["nemesis soak: " + ", ".join(f"{key}={value}" for key, value in header.items())]
    lines.append(
        f"rounds={tally.rounds} expected={tally.expected} delivered={tally.delivered} "
        + " ".join(f"{name}={tally.counts[name]}" for name in COUNTS)
        + f" unknown_task_callbacks={tally.unknown_task_callbacks}"
    )
    if tally.creates:
        lines.append("creates: " + " ".join(f"{k}={v}" for k, v in sorted(tally.creates.items())))
    ran = Counter(f.kind for f in faults)
    lines.append("faults run: " + (" ".join(f"{k}={v}" for k, v in sorted(ran.items())) or "none"))
    lines.append("first-send lateness (ms) by the fault its instant was due in (+5 s after its end):")
    for kind, summary in tally.lateness_summary().items():
        lines.append(
            f"  {kind:<28} n={summary['n']:<9} p50={summary['p50_ms']:<6} p99={summary['p99_ms']:<6} "
            f"max={summary['max_ms']:<7} early={summary['early']}"
        )
    worst = tally.worst_fault(faults)
    if worst is not None:
        fault, summary = worst
        victim = f" node{fault.victim_node}" if fault.victim_node is not None else ""
        lines.append(
            f"worst single fault: {fault.kind}{victim} {fault.end_ms - fault.start_ms} ms long, "
            f"p99={summary['p99_ms']} max={summary['max_ms']} (n={summary['n']})"
        )
    lines.append("resources, median of the first quarter -> the last (running samples):")
    for trend in found_trends:
        unit = " MB" if trend.metric == "rss_kb" else ""
        scale = 1024 if trend.metric == "rss_kb" else 1
        name = "rss" if trend.metric == "rss_kb" else trend.metric
        lines.append(
            f"  node{trend.node} {name:<15} {trend.first / scale:.0f}{unit} -> {trend.last / scale:.0f}{unit} "
            f"({trend.growth:+.0%}){'  GREW BEYOND TOLERANCE' if trend.grew else ''}"
        )
    lines.append("verdict: " + ("PASS" if not reasons else "FAIL: " + "; ".join(reasons)))
    return "\n".join(lines) + "\n"


def sample_dicts(samples: Iterable[Sample]) -> list[dict[str, Any]]:
    return [asdict(s) for s in samples]
