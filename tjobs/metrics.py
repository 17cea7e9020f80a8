"""Prometheus metrics of one node: ``tjobs_`` prefix, base units, bounded labels (app, never task id).

One :class:`Metrics` per node owns its registry (no global default registry), so tests can build
several nodes in one process. Hot-path children are cached per app (``.labels()`` is a dict lookup
under a lock; the fire path runs thousands of times per second).

Counters are fed where things happen (fire commit, callback attempt, flow update, API request);
gauges that mirror state (wheel size, ownership, the coordinator's view) are set at scrape time by
:meth:`tjobs.node.Node.refresh_gauges` and :meth:`Metrics.observe_cluster`.

``metrics.enabled = false`` gives the node a :class:`NullMetrics`: the same attributes and hooks,
doing nothing (``/metrics`` answers 404). It exists to measure what the metrics cost on the fire
path (``python -m tjobs.bench.metrics_overhead node``) and for operators who scrape nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

LATENESS_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
DURATION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def status_class(status: int | None) -> str:
    """``2xx`` .. ``5xx``, or ``none`` when no response came (connect error, timeout)."""
    if status is None:
        return "none"
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


class Metrics:
    enabled = True

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.up = Gauge("tjobs_node_up", "1 while this node process serves", registry=r)
        self.up.set(1)
        self.registrations = Counter("tjobs_registrations", "Tasks registered", ["app"], registry=r)
        self.fires = Counter("tjobs_fires", "Fires by outcome", ["app", "outcome"], registry=r)
        self.fire_lateness = Histogram(
            "tjobs_fire_lateness_seconds", "Fire commit time minus scheduled instant", ["app"],
            buckets=LATENESS_BUCKETS_S, registry=r,
        )
        self.delivery_lateness = Histogram(
            "tjobs_delivery_lateness_seconds", "First successful delivery minus scheduled instant", ["app"],
            buckets=LATENESS_BUCKETS_S, registry=r,
        )
        self.callback_attempts = Counter(
            "tjobs_callback_attempts", "Callback attempts by outcome and status class",
            ["app", "outcome", "status_class"], registry=r,
        )
        self.callback_duration = Histogram(
            "tjobs_callback_duration_seconds", "Callback request duration", ["app"],
            buckets=DURATION_BUCKETS_S, registry=r,
        )
        self.flow_updates = Counter(
            "tjobs_flow_outcomes", "Flow outcomes recorded (pending = retry scheduled, delivered, dead, ...)",
            ["app", "status"], registry=r,
        )
        self.retries = Counter("tjobs_callback_retries", "Retries scheduled after a failed attempt",
                               ["app"], registry=r)
        self.dead_letters = Counter("tjobs_dead_letters", "Flows moved to the dead letter", ["app"], registry=r)
        self.misfires = Counter("tjobs_misfires", "Misfires by policy", ["app", "policy"], registry=r)
        self.throttled = Counter(
            "tjobs_throttled_fires",
            "Callback sends delayed (never dropped) by the app's rate limit or concurrency cap",
            ["app", "reason"], registry=r,
        )
        self.fires_rejected = Counter(
            "tjobs_fires_rejected",
            "Due fires whose compare-and-set failed (task changed, paused, deleted, or fired elsewhere): no flow",
            registry=r,
        )
        self.fire_tx_failures = Counter(
            "tjobs_fire_transaction_failures",
            "Fire transactions not committed: error (retried in 500 ms) or fenced (left to the shard's owner)",
            ["reason"], registry=r,
        )
        self.fire_tx_duration = Histogram(
            "tjobs_fire_transaction_duration_seconds", "Duration of one fire commit batch",
            buckets=DURATION_BUCKETS_S, registry=r,
        )
        self.fire_tx_batch = Histogram(
            "tjobs_fire_transaction_batch_size", "Intents per fire commit batch",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=r,
        )
        self.wheel_size = Gauge("tjobs_wheel_tasks", "Tasks loaded in the timing wheel", registry=r)
        self.jobs_owned = Gauge("tjobs_jobs_owned", "Jobs (shards) this node runs", registry=r)
        self.groups_owned = Gauge("tjobs_groups_owned", "Job groups this node holds as primary", registry=r)
        self.groups_without_primary = Gauge(
            "tjobs_groups_without_primary", "Planned job groups no node holds (this node's view)", registry=r
        )
        self.is_leader = Gauge("tjobs_dispatcher_leader", "1 while this node is the dispatcher leader",
                               registry=r)
        self.leadership_changes = Counter(
            "tjobs_leadership_changes", "Times this node gained or lost dispatcher leadership", registry=r
        )
        self.failovers = Gauge(
            "tjobs_failovers", "Group failovers this node took over (monotonic; from the coordinator)",
            registry=r,
        )
        self.cluster_nodes = Gauge("tjobs_cluster_nodes", "Live member nodes (this node's view)",
                                   ["health"], registry=r)
        self.plan_version = Gauge("tjobs_plan_version", "Version of the dispatch plan in force", registry=r)
        self.plan_age = Gauge("tjobs_plan_age_seconds", "Age of the dispatch plan in force", registry=r)
        self.lease_remaining = Gauge("tjobs_lease_remaining_seconds", "Time left on the node's lease",
                                     registry=r)
        self.cycle_load_duration = Gauge(
            "tjobs_cycle_load_duration_seconds", "Duration of the last cycle load", registry=r
        )
        self.commit_backlog = Gauge("tjobs_fire_backlog", "Due fires waiting for a committer", registry=r)
        self.sync_lag = Gauge(
            "tjobs_cluster_sync_lag_seconds", "Age of the coordinator's last sync with the cluster view",
            registry=r,
        )
        self.hot_tier_lag = Histogram(
            "tjobs_hot_tier_lag_seconds",
            "Time from a task change's publish on one node to its apply on the shard's owner",
            ["tier"], buckets=LATENESS_BUCKETS_S, registry=r,
        )
        self.compensator_backlog = Gauge(
            "tjobs_compensator_backlog", "Flows the last compensation pass handled", registry=r
        )
        self.flows_redriven = Counter("tjobs_flows_redriven", "Flows re-driven by the compensator", registry=r)
        self.api_requests = Counter(
            "tjobs_api_requests", "API requests by route template, method and status class",
            ["route", "method", "status_class"], registry=r,
        )
        self.api_duration = Histogram(
            "tjobs_api_request_duration_seconds", "API request duration by route template", ["route"],
            buckets=DURATION_BUCKETS_S, registry=r,
        )
        self._fires_committed: dict[str, Counter] = {}
        self._fire_lateness: dict[str, Histogram] = {}
        self._attempts: dict[tuple[str, str, int | None], Counter] = {}
        self._outcomes: dict[tuple[str, str], Counter] = {}
        self._delivery_lateness: dict[str, Histogram] = {}
        self._callback_duration: dict[str, Histogram] = {}
        self._throttled: dict[tuple[str, str], Counter] = {}
        self._hot_tier_lag: dict[str, Histogram] = {}
        self._was_leader = False
        self._runner_seen = (0, 0, 0)

    def observe_fire(self, app_id: str, lateness_s: float) -> None:
        """Hot path: a committed fire; children cached per app."""
        counter = self._fires_committed.get(app_id)
        if counter is None:
            counter = self._fires_committed[app_id] = self.fires.labels(app_id, "committed")
            self._fire_lateness[app_id] = self.fire_lateness.labels(app_id)
        counter.inc()
        self._fire_lateness[app_id].observe(lateness_s)

    def observe_attempt(self, app_id: str, outcome: str, status: int | None, duration_s: float) -> None:
        """One callback attempt to one target; children cached per (app, outcome, status class)."""
        key = (app_id, outcome, status)
        counter = self._attempts.get(key)
        if counter is None:
            counter = self._attempts[key] = self.callback_attempts.labels(app_id, outcome, status_class(status))
        counter.inc()
        histogram = self._callback_duration.get(app_id)
        if histogram is None:
            histogram = self._callback_duration[app_id] = self.callback_duration.labels(app_id)
        histogram.observe(duration_s)

    def observe_flow_update(self, app_id: str, status: str, delivery_lateness_s: float | None) -> None:
        """A flow outcome recorded (``pending`` = a retry is scheduled); cached children."""
        key = (app_id, status)
        counter = self._outcomes.get(key)
        if counter is None:
            counter = self._outcomes[key] = self.flow_updates.labels(app_id, status)
        counter.inc()
        if status == "pending":
            self.retries.labels(app_id).inc()
        elif status == "dead":
            self.dead_letters.labels(app_id).inc()
        if delivery_lateness_s is not None:
            histogram = self._delivery_lateness.get(app_id)
            if histogram is None:
                histogram = self._delivery_lateness[app_id] = self.delivery_lateness.labels(app_id)
            histogram.observe(delivery_lateness_s)

    def observe_throttled(self, app_id: str, reason: str) -> None:
        """A callback the app's limits delayed (``reason`` ``rate`` or ``concurrency``; see
        :mod:`tjobs.callbacks.limiter`); children cached per (app, reason)."""
        key = (app_id, reason)
        counter = self._throttled.get(key)
        if counter is None:
            counter = self._throttled[key] = self.throttled.labels(app_id, reason)
        counter.inc()

    def observe_hot_tier_lag(self, tier: str, lag_s: float) -> None:
        """A task change applied on the shard's owner ``lag_s`` after it was published."""
        histogram = self._hot_tier_lag.get(tier)
        if histogram is None:
            histogram = self._hot_tier_lag[tier] = self.hot_tier_lag.labels(tier)
        histogram.observe(lag_s)

    def observe_runner(self, cas_rejected: int, commit_errors: int, commit_fenced: int) -> None:
        """Advance the fire-path failure counters to the runner's totals (scrape time; nothing per fire)."""
        seen = self._runner_seen
        self.fires_rejected.inc(max(cas_rejected - seen[0], 0))
        self.fire_tx_failures.labels("error").inc(max(commit_errors - seen[1], 0))
        self.fire_tx_failures.labels("fenced").inc(max(commit_fenced - seen[2], 0))
        self._runner_seen = (cas_rejected, commit_errors, commit_fenced)

    def observe_cluster(self, view: Mapping[str, object], node_id: str) -> None:
        """Mirror a coordinator's ``describe()`` (scrape time); keys missing in embedded mode are skipped."""
        leader = bool(view.get("is_leader", view.get("mode") != "cluster"))
        if leader != self._was_leader:
            self.leadership_changes.inc()
            self._was_leader = leader
        self.is_leader.set(1 if leader else 0)
        groups = view.get("groups")
        if isinstance(groups, list):
            self.groups_owned.set(sum(1 for g in groups if isinstance(g, dict) and g.get("holder") == node_id))
            self.groups_without_primary.set(
                sum(1 for g in groups if isinstance(g, dict) and g.get("holder") is None)
            )
        nodes = view.get("nodes")
        if isinstance(nodes, list):
            healthy = sum(1 for n in nodes if not isinstance(n, dict) or n.get("healthy", True))
            self.cluster_nodes.labels("healthy").set(healthy)
            self.cluster_nodes.labels("unhealthy").set(len(nodes) - healthy)
            for n in nodes:
                if isinstance(n, dict) and n.get("id") == node_id:
                    self.failovers.set(_number(n.get("failovers")))
        self.plan_version.set(_number(view.get("plan_version")))
        self.plan_age.set(_number(view.get("plan_age_ms")) / 1000)
        self.lease_remaining.set(_number(view.get("lease_remaining_ms")) / 1000)
        self.sync_lag.set(_number(view.get("sync_lag_ms")) / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _NoOpMetric:
    """Stands in for every counter, gauge and histogram (and their children) of :class:`NullMetrics`."""

    __slots__ = ()

    def labels(self, *values: Any, **labels: Any) -> _NoOpMetric:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass


_NO_OP = _NoOpMetric()


class NullMetrics(Metrics):
    """A node's metrics with ``metrics.enabled = false``: every metric and hook is a no-op and nothing
    is registered, so nothing is rendered. The API's SLO accounting does not depend on it
    (:mod:`tjobs.slo`)."""

    enabled = False

    def __init__(self) -> None:
        super().__init__()
        for name, value in list(vars(self).items()):
            if isinstance(value, MetricWrapperBase):
                setattr(self, name, _NO_OP)
        self.registry = CollectorRegistry(auto_describe=True)

    def observe_fire(self, app_id: str, lateness_s: float) -> None:
        pass

    def observe_attempt(self, app_id: str, outcome: str, status: int | None, duration_s: float) -> None:
        pass

    def observe_flow_update(self, app_id: str, status: str, delivery_lateness_s: float | None) -> None:
        pass

    def observe_throttled(self, app_id: str, reason: str) -> None:
        pass

    def observe_hot_tier_lag(self, tier: str, lag_s: float) -> None:
        pass

    def observe_runner(self, cas_rejected: int, commit_errors: int, commit_fenced: int) -> None:
        pass

    def observe_cluster(self, view: Mapping[str, object], node_id: str) -> None:
        pass

    def render(self) -> bytes:
        return b""


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
