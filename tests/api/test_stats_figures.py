"""``/v1/stats``' fires, callback failures and lateness are the app's own series of this node's metrics:
the same numbers ``/metrics`` renders for that app, and nothing of another app's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tjobs.api.routes_apps import stats_of
from tjobs.model import App
from tjobs.observability.metrics import Metrics
from tjobs.service.task_counts import AppCounts


class _Counts:
    async def of(self, app_id: str) -> AppCounts:
        return AppCounts(active=0, paused=0, completed=0, dead_letters=0, counted_at_ms=0)


def _node(metrics: Metrics) -> Any:
    return SimpleNamespace(
        tasks=SimpleNamespace(counts=_Counts()),
        metrics=metrics,
        slo=SimpleNamespace(lateness=SimpleNamespace(windows=lambda app_id: {})),
    )


def _app(app_id: str) -> App:
    return App(id=app_id, name=app_id, api_key_hash="", secrets=[])


def _rendered(metrics: Metrics, app_id: str) -> tuple[float, float, list[tuple[float, float]]]:
    fires = failures = 0.0
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if sample.labels.get("app") != app_id:
                continue
            if sample.name == "tjobs_fires_total" and sample.labels["outcome"] == "committed":
                fires = sample.value
            elif sample.name == "tjobs_callback_attempts_total" and sample.labels["outcome"] != "delivered":
                failures += sample.value
            elif sample.name == "tjobs_fire_lateness_seconds_bucket":
                buckets.append((float(sample.labels["le"]), sample.value))
    return fires, failures, sorted(buckets)


async def test_stats_figures_are_the_apps_own_series_as_metrics_renders_them() -> None:
    metrics = Metrics()
    for lateness_s in (0.001, 0.002, 0.03, 0.2, 0.2, 4.0, 400.0):
        metrics.observe_fire("a", lateness_s)
    metrics.observe_fire("other", 0.001)
    metrics.observe_attempt("a", "delivered", 200, 0.01)
    metrics.observe_attempt("a", "failed", 500, 0.01)
    metrics.observe_attempt("a", "timeout", None, 0.01)
    metrics.observe_attempt("other", "failed", 500, 0.01)
    stats = await stats_of(_node(metrics), _app("a"))
    fires, failures, buckets = _rendered(metrics, "a")
    assert (stats["fires"], stats["callback_failures"]) == (fires, failures) == (7, 2)
    assert stats["fire_lateness"] == {"count": 7, "p50_s": 0.25, "p90_s": None, "p99_s": None}
    assert buckets[-1] == (float("inf"), 7)
    quiet = await stats_of(_node(metrics), _app("quiet"))
    assert (quiet["fires"], quiet["callback_failures"]) == (0, 0)
    assert quiet["fire_lateness"] == {"count": 0, "p50_s": None, "p90_s": None, "p99_s": None}
