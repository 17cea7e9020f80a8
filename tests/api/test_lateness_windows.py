"""Recent fire lateness per app: each window counts only its own slots, percentiles are bucket bounds."""

from __future__ import annotations

from tjobs.observability.slo import RecentLateness


class Clock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def __call__(self) -> int:
        return self.ms


def test_windows_count_only_recent_fires_of_the_app() -> None:
    clock = Clock()
    recent = RecentLateness(clock)
    for _ in range(90):
        recent.observe("a", 0.004)  # bucket 0.005
    for _ in range(10):
        recent.observe("a", 0.3)  # bucket 0.5
    recent.observe("b", 100.0)
    windows = recent.windows("a")
    assert windows["1m"] == {"count": 100, "p50_s": 0.005, "p90_s": 0.005, "p99_s": 0.5}

    clock.ms += 120_000  # two minutes later: out of the 1-minute window, still in 5 minutes and 1 hour
    recent.observe("a", 2.0)
    windows = recent.windows("a")
    assert windows["1m"]["count"] == 1 and windows["1m"]["p50_s"] == 2.5
    assert windows["5m"]["count"] == 101 and windows["1h"]["count"] == 101

    clock.ms += 3_600_000  # an hour later everything has aged out
    assert recent.windows("a")["1h"] == {"count": 0, "p50_s": None, "p90_s": None, "p99_s": None}
    assert recent.windows("nobody")["5m"]["count"] == 0


def test_lateness_beyond_the_last_bucket_has_no_finite_percentile() -> None:
    recent = RecentLateness(Clock())
    recent.observe("a", 10_000.0)
    assert recent.windows("a")["1m"] == {"count": 1, "p50_s": None, "p90_s": None, "p99_s": None}


def test_service_levels_count_outcomes_per_app_and_feed_the_windows() -> None:
    from tjobs.observability.slo import ServiceLevels

    levels = ServiceLevels(Clock())
    levels.observe_fire("a", 0.004)
    for status in ("pending", "delivered", "delivered", "dead"):
        levels.observe_outcome("a", status)
    levels.observe_outcome("b", "delivered")
    assert levels.outcome_counts == {
        ("a", "pending"): 1,
        ("a", "delivered"): 2,
        ("a", "dead"): 1,
        ("b", "delivered"): 1,
    }
    assert levels.lateness.windows("a")["1m"]["count"] == 1
