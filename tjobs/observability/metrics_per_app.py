"""The per-fire metrics of a node, per app, as plain numbers turned into Prometheus families at scrape.

A fire updates seven series (fires, fire lateness, callback attempts and duration, flow outcomes,
delivery lateness, throttled sends). Attempts and their duration also carry the destination's
``protocol`` (``http`` for inline URLs and HTTP targets), kept in the same per-app dictionaries.
With ``prometheus_client``'s own ``Counter`` and ``Histogram`` each update is several method calls
and a lock per value; here it is an attribute or list increment on one :class:`AppSeries` per app.
Updates and scrapes both run on the node's event loop, so nothing needs a lock.
:class:`PerAppCollector` renders the same families, names, labels and buckets the
``prometheus_client`` classes did (no ``_created`` samples).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


def status_class(status: int | None) -> str:
    """``2xx`` .. ``5xx``, or ``none`` when no response came (connect error, timeout)."""
    if status is None:
        return "none"
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


def _le(bound: float) -> str:
    """A bucket bound as Prometheus' own client writes its ``le`` label (``0.005``, ``1.0``, ``+Inf``)."""
    text: str = floatToGoString(bound)  # type: ignore[no-untyped-call]
    return text


class Buckets:
    """One histogram series: per-bucket counts (not cumulative; the last is +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bound >= value: Prometheus' "le"
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        seen = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            seen += count
            out.append((_le(bound), seen))
        return out


class AppSeries:
    """Every per-fire series of one app."""

    __slots__ = (
        "_duration_bounds",
        "attempts",
        "callback_duration",
        "delivery_lateness",
        "fire_lateness",
        "fires",
        "outcomes",
        "throttled",
    )

    def __init__(self, lateness_bounds: Sequence[float], duration_bounds: Sequence[float]) -> None:
        self.fires = 0  # committed
        self.fire_lateness = Buckets(lateness_bounds)
        self.attempts: dict[tuple[str, int | None, str], int] = {}  # (outcome, HTTP status, protocol) -> attempts
        self._duration_bounds = duration_bounds
        self.callback_duration: dict[str, Buckets] = {}  # protocol -> attempt durations
        self.outcomes: dict[str, int] = {}  # flow status -> outcomes recorded
        self.delivery_lateness = Buckets(lateness_bounds)
        self.throttled: dict[str, int] = {}  # reason -> sends delayed

    def new_durations(self, protocol: str) -> Buckets:
        buckets = self.callback_duration[protocol] = Buckets(self._duration_bounds)
        return buckets


class PerAppCollector(Collector):
    """Renders ``series`` (app -> :class:`AppSeries`) as the fire path's metric families."""

    def __init__(self, series: dict[str, AppSeries]) -> None:
        self._series = series

    def collect(self) -> Iterator[Metric]:
        series = sorted(self._series.items())
        fires = CounterMetricFamily("tjobs_fires", "Fires by outcome", labels=["app", "outcome"])
        attempts = CounterMetricFamily(
            "tjobs_callback_attempts",
            "Callback attempts by outcome, status class and protocol",
            labels=["app", "outcome", "status_class", "protocol"],
        )
        outcomes = CounterMetricFamily(
            "tjobs_flow_outcomes",
            "Flow outcomes recorded (pending = retry scheduled, delivered, dead, ...)",
            labels=["app", "status"],
        )
        throttled = CounterMetricFamily(
            "tjobs_throttled_fires",
            "Callback sends delayed (never dropped) by the app's rate limit or concurrency cap",
            labels=["app", "reason"],
        )
        histograms = {
            "fire_lateness": HistogramMetricFamily(
                "tjobs_fire_lateness_seconds", "Fire commit time minus scheduled instant", labels=["app"]
            ),
            "delivery_lateness": HistogramMetricFamily(
                "tjobs_delivery_lateness_seconds", "First successful delivery minus scheduled instant", labels=["app"]
            ),
        }
        durations = HistogramMetricFamily(
            "tjobs_callback_duration_seconds", "Callback attempt duration", labels=["app", "protocol"]
        )
        for app, s in series:
            if s.fires:
                fires.add_metric([app, "committed"], s.fires)
            by_class: dict[tuple[str, str, str], int] = {}
            for (outcome, status, protocol), count in s.attempts.items():
                key = (outcome, status_class(status), protocol)
                by_class[key] = by_class.get(key, 0) + count
            for (outcome, klass, protocol), count in sorted(by_class.items()):
                attempts.add_metric([app, outcome, klass, protocol], count)
            for protocol, of_protocol in sorted(s.callback_duration.items()):
                durations.add_metric([app, protocol], of_protocol.cumulative(), of_protocol.sum)
            for flow_status, count in sorted(s.outcomes.items()):
                outcomes.add_metric([app, flow_status], count)
            for reason, count in sorted(s.throttled.items()):
                throttled.add_metric([app, reason], count)
            for attribute, family in histograms.items():
                buckets: Buckets = getattr(s, attribute)
                if any(buckets.counts):
                    family.add_metric([app], buckets.cumulative(), buckets.sum)
        yield from (fires, attempts, outcomes, throttled, *histograms.values(), durations)
