"""Writes grafana/dashboards/*.json from the panel tables below: ``python grafana/build_dashboards.py``.

Every panel is one PromQL target against the datasource uid ``prometheus``; ``$app`` is the per-app
template variable. Panels that are empty when all is well (failures, dead letters) end in
``or vector(0)`` so they show 0 rather than "no data". tests/ops/test_dashboards.py evaluates every
target against a real Prometheus that scraped a real node.
"""

from __future__ import annotations

import json
from pathlib import Path

DS = {"type": "prometheus", "uid": "prometheus"}
P99_FIRE = "histogram_quantile(0.99, sum by (le) (rate(tjobs_fire_lateness_seconds_bucket{%s}[1m])))"
P99_DELIVERY = "histogram_quantile(0.99, sum by (le) (rate(tjobs_delivery_lateness_seconds_bucket{%s}[1m])))"
REACH = (
    'sum(increase(tjobs_flow_outcomes_total{status="delivered"%s}[5m]))'
    ' / sum(increase(tjobs_flow_outcomes_total{status=~"delivered|dead"%s}[5m]))'
)
APP = 'app=~"$app"'

DASHBOARDS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "slo-overview": (
        "tjobs / SLO overview",
        [
            ("p99 fire lateness", "s", P99_FIRE % ""),
            ("p99 first-delivery lateness", "s", P99_DELIVERY % ""),
            ("reach (delivered / finished, 5m)", "percentunit", REACH % ("", "")),
            ("fire rate", "ops", "sum(rate(tjobs_fires_total[1m]))"),
            (
                "failed callback attempts by status class",
                "ops",
                'sum by (status_class) (rate(tjobs_callback_attempts_total{outcome!="delivered"}[1m])) or vector(0)',
            ),
            ("dead letters (5m)", "short", "sum(increase(tjobs_dead_letters_total[5m])) or vector(0)"),
            ("misfires (5m)", "short", "sum by (policy) (increase(tjobs_misfires_total[5m])) or vector(0)"),
        ],
    ),
    "per-app": (
        "tjobs / per app",
        [
            ("fire rate", "ops", f"sum by (app) (rate(tjobs_fires_total{{{APP}}}[1m]))"),
            (
                "p99 fire lateness",
                "s",
                f"histogram_quantile(0.99, sum by (app, le) (rate(tjobs_fire_lateness_seconds_bucket{{{APP}}}[1m])))",
            ),
            (
                "p99 first-delivery lateness",
                "s",
                "histogram_quantile(0.99, sum by (app, le) "
                f"(rate(tjobs_delivery_lateness_seconds_bucket{{{APP}}}[1m])))",
            ),
            ("reach (5m)", "percentunit", REACH % ("," + APP, "," + APP)),
            (
                "callback attempts by outcome and status class",
                "ops",
                f"sum by (outcome, status_class) (rate(tjobs_callback_attempts_total{{{APP}}}[1m]))",
            ),
            (
                "p99 callback duration",
                "s",
                f"histogram_quantile(0.99, sum by (le) (rate(tjobs_callback_duration_seconds_bucket{{{APP}}}[1m])))",
            ),
            ("retries scheduled", "ops", f"sum(rate(tjobs_callback_retries_total{{{APP}}}[1m])) or vector(0)"),
            ("dead letters (5m)", "short", f"sum(increase(tjobs_dead_letters_total{{{APP}}}[5m])) or vector(0)"),
            (
                "misfires by policy (5m)",
                "short",
                f"sum by (policy) (increase(tjobs_misfires_total{{{APP}}}[5m])) or vector(0)",
            ),
            (
                "throttled callbacks by reason (delayed by the app's limits, not missed)",
                "ops",
                f"sum by (reason) (rate(tjobs_throttled_fires_total{{{APP}}}[1m])) or vector(0)",
            ),
            ("registrations", "ops", f"sum(rate(tjobs_registrations_total{{{APP}}}[1m])) or vector(0)"),
            (
                "callbacks waiting in the nodes' queues (the app's limits or a slow receiver)",
                "short",
                f"sum by (app) (tjobs_delivery_queued{{{APP}}}) or vector(0)",
            ),
            (
                "time to drain the longest queue at its pace",
                "s",
                f"max by (app) (tjobs_delivery_queue_drain_seconds{{{APP}}}) or vector(0)",
            ),
        ],
    ),
    "cluster": (
        "tjobs / cluster",
        [
            ("nodes up", "short", 'sum(up{job="tjobs"})'),
            ("jobs owned per node", "short", "sum by (instance) (tjobs_jobs_owned)"),
            ("groups held per node", "short", "sum by (instance) (tjobs_groups_owned)"),
            ("groups without a primary", "short", "max(tjobs_groups_without_primary)"),
            ("dispatcher leader", "short", "max by (instance) (tjobs_dispatcher_leader)"),
            ("failovers", "short", "sum by (instance) (tjobs_failovers)"),
            ("leadership changes (1h)", "short", "sum(increase(tjobs_leadership_changes_total[1h]))"),
            ("plan version", "short", "max(tjobs_plan_version)"),
            ("plan age", "s", "max(tjobs_plan_age_seconds)"),
            ("wheel tasks per node", "short", "sum by (instance) (tjobs_wheel_tasks)"),
            ("fire backlog per node", "short", "sum by (instance) (tjobs_fire_backlog)"),
            ("cycle load duration", "s", "max by (instance) (tjobs_cycle_load_duration_seconds)"),
            ("compensator backlog", "short", "sum by (instance) (tjobs_compensator_backlog)"),
            (
                "flows handed back for their owner (5m: fenced, handed over, stopping)",
                "short",
                "sum by (instance) (increase(tjobs_flows_handed_back_total[5m])) or vector(0)",
            ),
            (
                "flows re-driven by compensators (5m)",
                "short",
                "sum by (instance) (increase(tjobs_flows_redriven_total[5m])) or vector(0)",
            ),
            ("API requests by route", "reqps", "sum by (route) (rate(tjobs_api_requests_total[1m]))"),
            (
                "API p99 latency by route",
                "s",
                "histogram_quantile(0.99, sum by (route, le) (rate(tjobs_api_request_duration_seconds_bucket[1m])))",
            ),
        ],
    ),
    "storage": (
        "tjobs / storage",
        [
            (
                "p99 fire transaction duration (DB latency)",
                "s",
                "histogram_quantile(0.99, sum by (le) (rate(tjobs_fire_transaction_duration_seconds_bucket[1m])))",
            ),
            ("fire transactions per second", "ops", "sum(rate(tjobs_fire_transaction_duration_seconds_count[1m]))"),
            (
                "mean fire batch size",
                "short",
                "sum(rate(tjobs_fire_transaction_batch_size_sum[1m]))"
                " / sum(rate(tjobs_fire_transaction_batch_size_count[1m]))",
            ),
            (
                "load skew across nodes (max / mean wheel tasks)",
                "short",
                "max(tjobs_wheel_tasks) / clamp_min(avg(tjobs_wheel_tasks), 1)",
            ),
            (
                "jobs skew across nodes (max / mean jobs owned)",
                "short",
                "max(tjobs_jobs_owned) / clamp_min(avg(tjobs_jobs_owned), 1)",
            ),
            ("cycle load duration", "s", "max(tjobs_cycle_load_duration_seconds)"),
            ("cluster sync lag", "s", "max(tjobs_cluster_sync_lag_seconds)"),
            (
                "clock offset by node (database minus node; past cluster.clock_skew_max_ms it fires nothing)",
                "s",
                "max by (instance) (tjobs_clock_offset_seconds)",
            ),
            (
                "fires rejected by the compare-and-set (changed or fired elsewhere)",
                "ops",
                "sum(rate(tjobs_fires_rejected_total[1m])) or vector(0)",
            ),
            (
                "failed fire transactions by reason",
                "ops",
                "sum by (reason) (rate(tjobs_fire_transaction_failures_total[1m])) or vector(0)",
            ),
        ],
    ),
}


def dashboard(uid: str, title: str, panels: list[tuple[str, str, str]]) -> dict[str, object]:
    items = []
    for i, (name, unit, expr) in enumerate(panels):
        items.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": name,
                "datasource": DS,
                "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [{"refId": "A", "datasource": DS, "expr": expr, "legendFormat": "__auto"}],
            }
        )
    templating = []
    if any("$app" in expr for _, _, expr in panels):
        templating.append(
            {
                "name": "app",
                "type": "query",
                "datasource": DS,
                "label": "app",
                "query": {"query": "label_values(tjobs_fires_total, app)", "refId": "app"},
                "definition": "label_values(tjobs_fires_total, app)",
                "includeAll": True,
                "multi": True,
                "allValue": ".*",
                "refresh": 2,
                "current": {"text": "All", "value": "$__all"},
            }
        )
    return {
        "uid": f"tjobs-{uid}",
        "title": title,
        "tags": ["tjobs"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": templating},
        "panels": items,
    }


def main() -> None:
    out = Path(__file__).resolve().parent / "dashboards"
    for uid, (title, panels) in DASHBOARDS.items():
        text = json.dumps(dashboard(uid, title, panels), indent=2) + "\n"
        (out / f"{uid}.json").write_text(text)


if __name__ == "__main__":
    main()
