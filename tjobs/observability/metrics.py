"""Prometheus metrics of one node: ``tjobs_`` prefix, base units, bounded labels (app, never task id).

One :class:`Metrics` per node owns its registry (no global default registry), so tests can build
several nodes in one process. What a fire updates (fires, lateness, callback attempts and duration,
flow outcomes, throttled sends) is kept per app as plain numbers and rendered at scrape
(:mod:`tjobs.observability.metrics_per_app`): the fire path runs thousands of times per second, and
``prometheus_client``'s own counters cost several calls and a lock per update.

Counters are fed where things happen (fire commit, callback attempt, flow update, API request);
gauges that mirror state (wheel size, ownership, the coordinator's view) are set at scrape time by
:meth:`tjobs.node.Node.refresh_gauges` and :meth:`Metrics.observe_cluster`.

``metrics.enabled = false`` gives the node a :class:`NullMetrics`: the same attributes and hooks,
doing nothing (``/metrics`` answers 404). It exists to measure what the metrics cost on the fire
path (``python -m benchmarks.metrics_overhead``) and for operators who scrape nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from tjobs.model import MOVE_STEPS
from tjobs.observability.metrics_per_app import AppSeries, PerAppCollector, status_class

if TYPE_CHECKING:
    from tjobs.stores.contracts import MoveRow

__all__ = ["DURATION_BUCKETS_S", "LATENESS_BUCKETS_S", "Metrics", "NullMetrics", "status_class"]

LATENESS_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
DURATION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    enabled = True

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.up = Gauge("tjobs_node_up", "1 while this node process serves", registry=r)
        self.up.set(1)
        self.registrations = Counter("tjobs_registrations", "Tasks registered", ["app"], registry=r)
        self.api_rate_limited = Counter(  # app "" for requests without a valid key (tjobs.api.ratelimit)
            "tjobs_api_rate_limited",
            "API requests refused with 429 by a rate limit, by bucket",
            ["app", "bucket"],
            registry=r,
        )
        # fires, lateness, callback attempts and duration, flow outcomes, throttled sends: per app, plain
        # numbers (tjobs.observability.metrics_per_app), read by the collector at scrape
        self.per_app: dict[str, AppSeries] = {}
        r.register(PerAppCollector(self.per_app))
        self.retries = Counter(
            "tjobs_callback_retries", "Retries scheduled after a failed attempt", ["app"], registry=r
        )
        self.dead_letters = Counter("tjobs_dead_letters", "Flows moved to the dead letter", ["app"], registry=r)
        self.misfires = Counter("tjobs_misfires", "Misfires by policy", ["app", "policy"], registry=r)
        self.fires_rejected = Counter(
            "tjobs_fires_rejected",
            "Due fires whose compare-and-set failed (task changed, paused, deleted, or fired elsewhere): no flow",
            registry=r,
        )
        self.fire_tx_failures = Counter(
            "tjobs_fire_transaction_failures",
            "Fire transactions not committed, one per database server: error (its fires retried alone) or fenced",
            ["reason"],
            registry=r,
        )
        self.fire_tx_duration = Histogram(
            "tjobs_fire_transaction_duration_seconds",
            "Duration of one fire commit batch",
            buckets=DURATION_BUCKETS_S,
            registry=r,
        )
        self.fire_tx_batch = Histogram(
            "tjobs_fire_transaction_batch_size",
            "Intents per fire commit batch",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=r,
        )
        self.wheel_size = Gauge("tjobs_wheel_tasks", "Tasks loaded in the timing wheel", registry=r)
        self.jobs_owned = Gauge("tjobs_jobs_owned", "Jobs (shards) this node runs", registry=r)
        self.groups_owned = Gauge("tjobs_groups_owned", "Job groups this node holds as primary", registry=r)
        self.groups_without_primary = Gauge(
            "tjobs_groups_without_primary", "Planned job groups no node holds (this node's view)", registry=r
        )
        self.is_leader = Gauge("tjobs_dispatcher_leader", "1 while this node is the dispatcher leader", registry=r)
        self.leadership_changes = Counter(
            "tjobs_leadership_changes", "Times this node gained or lost dispatcher leadership", registry=r
        )
        self.failovers = Gauge(
            "tjobs_failovers",
            "Group failovers this node took over (monotonic; from the coordinator)",
            registry=r,
        )
        self.cluster_nodes = Gauge(
            "tjobs_cluster_nodes", "Live member nodes (this node's view)", ["health"], registry=r
        )
        self.plan_version = Gauge("tjobs_plan_version", "Version of the dispatch plan in force", registry=r)
        self.plan_age = Gauge("tjobs_plan_age_seconds", "Age of the dispatch plan in force", registry=r)
        self.lease_remaining = Gauge("tjobs_lease_remaining_seconds", "Time left on the node's lease", registry=r)
        self.cycle_load_duration = Gauge(
            "tjobs_cycle_load_duration_seconds", "Duration of the last cycle load", registry=r
        )
        self.commit_backlog = Gauge("tjobs_fire_backlog", "Due fires waiting for a committer", registry=r)
        self.sync_lag = Gauge(
            "tjobs_cluster_sync_lag_seconds",
            "Age of the coordinator's last sync with the cluster view",
            registry=r,
        )
        self.clock_offset = Gauge(
            "tjobs_clock_offset_seconds",
            "The database's clock minus this node's (positive: the node is behind); cluster mode",
            registry=r,
        )
        self.clock_offset_exceeded = Gauge(
            "tjobs_clock_offset_exceeded",
            "1 while this node's clock is off the database's past cluster.clock_skew_max_ms (it fires nothing)",
            registry=r,
        )
        self.hot_tier_lag = Histogram(
            "tjobs_hot_tier_lag_seconds",
            "Time from a task change's publish on one node to its apply on the shard's owner",
            ["tier"],
            buckets=LATENESS_BUCKETS_S,
            registry=r,
        )
        self.compensator_backlog = Gauge(
            "tjobs_compensator_backlog",
            "Flows the last compensation pass leased (re-driven, closed, or held here until about their turn)",
            registry=r,
        )
        self.flows_redriven = Counter("tjobs_flows_redriven", "Flows re-driven by the compensator", registry=r)
        self.delivery_queued = Gauge(
            "tjobs_delivery_queued",
            "Deliveries waiting in this node's queue for the app, spilled too (its rate, concurrency, a slow receiver)",
            ["app"],
            registry=r,
        )
        self.delivery_queue_drain = Gauge(
            "tjobs_delivery_queue_drain_seconds",
            "How long the app's queue here takes to drain at the pace it drained over the last 30 s",
            ["app"],
            registry=r,
        )
        self.flows_leased = Counter(
            "tjobs_flows_leased",
            "Flows the compensator leased: re-driven, closed, or held here and leased until about their turn",
            registry=r,
        )
        self.flows_handed_back = Counter(
            "tjobs_flows_handed_back",
            "Flows this node let go unsent (fenced, shards handed over, stopping), written back due for their owner",
            registry=r,
        )
        self.api_requests = Counter(
            "tjobs_api_requests",
            "API requests by route template, method and status class",
            ["route", "method", "status_class"],
            registry=r,
        )
        self.api_duration = Histogram(
            "tjobs_api_request_duration_seconds",
            "API request duration by route template",
            ["route"],
            buckets=DURATION_BUCKETS_S,
            registry=r,
        )
        self.db_server_up = Gauge(
            "tjobs_db_server_up",
            "1 while this node reaches the database server, 0 while it pauses the server's shards",
            ["server"],
            registry=r,
        )
        self.jobs_paused = Gauge(
            "tjobs_jobs_paused",
            "Jobs (shards) paused on this node because their database server is unreachable",
            registry=r,
        )
        # moves of logical databases (tjobs shards move), from the recorded moves a background read
        # keeps (tjobs.service.shard_moves.MoveWatch); a scrape never waits for the database
        self.shard_moves_in_progress = Gauge(
            "tjobs_shard_moves_in_progress", "Moves of logical databases in progress (recorded)", registry=r
        )
        self.shard_move_step = Gauge(
            "tjobs_shard_move_step",
            "1 for the step a move in progress is at (copying, catching_up, cutting_over), per logical database",
            ["database", "step"],
            registry=r,
        )
        self.shard_move_rows_copied = Gauge(
            "tjobs_shard_move_rows_copied",
            "Rows the bulk copy of a move in progress has copied",
            ["database"],
            registry=r,
        )
        self.shard_move_lag_rows = Gauge(
            "tjobs_shard_move_lag_rows",
            "Changed rows the target of a move in progress is behind its source (catch-up backlog, last measured)",
            ["database"],
            registry=r,
        )
        self.shard_move_cut_over_pause = Gauge(
            "tjobs_shard_move_last_cut_over_pause_seconds",
            "How long writes to a logical database were refused during its last move's cut-over",
            ["database"],
            registry=r,
        )
        self._hot_tier_lag: dict[str, Histogram] = {}
        self._was_leader = False
        self._runner_seen = (0, 0, 0)
        self._flows_seen = (0, 0, 0)

    def _new_series(self, app_id: str) -> AppSeries:
        series = self.per_app[app_id] = AppSeries(LATENESS_BUCKETS_S, DURATION_BUCKETS_S)
        return series

    def observe_fire(self, app_id: str, lateness_s: float) -> None:
        """Hot path: a committed fire."""
        series = self.per_app.get(app_id) or self._new_series(app_id)
        series.fires += 1
        series.fire_lateness.observe(lateness_s)

    def observe_attempt(
        self, app_id: str, outcome: str, status: int | None, duration_s: float, protocol: str = "http"
    ) -> None:
        """One callback attempt to one destination, over ``protocol``."""
        series = self.per_app.get(app_id) or self._new_series(app_id)
        key = (outcome, status, protocol)
        series.attempts[key] = series.attempts.get(key, 0) + 1
        durations = series.callback_duration.get(protocol) or series.new_durations(protocol)
        durations.observe(duration_s)

    def observe_flow_update(self, app_id: str, status: str, delivery_lateness_s: float | None) -> None:
        """A flow outcome recorded (``pending`` = a retry is scheduled)."""
        series = self.per_app.get(app_id) or self._new_series(app_id)
        series.outcomes[status] = series.outcomes.get(status, 0) + 1
        if status == "pending":
            self.retries.labels(app_id).inc()
        elif status == "dead":
            self.dead_letters.labels(app_id).inc()
        if delivery_lateness_s is not None:
            series.delivery_lateness.observe(delivery_lateness_s)

    def observe_throttled(self, app_id: str, reason: str) -> None:
        """A callback the app's limits delayed (``reason`` ``rate`` or ``concurrency``; see
        :mod:`tjobs.delivery.limiter`)."""
        series = self.per_app.get(app_id) or self._new_series(app_id)
        series.throttled[reason] = series.throttled.get(reason, 0) + 1

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

    def observe_flow_totals(self, redriven: int, handed_back: int, leased: int) -> None:
        """Advance the re-driven, handed-back and leased flow counters to the compensator's and the deliverer's
        totals (scrape time)."""
        seen = self._flows_seen
        self.flows_redriven.inc(max(redriven - seen[0], 0))
        self.flows_handed_back.inc(max(handed_back - seen[1], 0))
        self.flows_leased.inc(max(leased - seen[2], 0))
        self._flows_seen = (redriven, handed_back, leased)

    def observe_delivery_queues(self, queues: Sequence[tuple[str, int, float | None]]) -> None:
        """Mirror :meth:`tjobs.delivery.lanes.Lanes.queues` (scrape time): only the apps with deliveries waiting."""
        self.delivery_queued.clear()
        self.delivery_queue_drain.clear()
        for app_id, queued, drain_s in queues:
            self.delivery_queued.labels(app_id).set(queued)
            if drain_s is not None:
                self.delivery_queue_drain.labels(app_id).set(drain_s)

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
            self.groups_without_primary.set(sum(1 for g in groups if isinstance(g, dict) and g.get("holder") is None))
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
        self.clock_offset.set(_number(view.get("clock_offset_ms")) / 1000)
        self.clock_offset_exceeded.set(1 if view.get("clock_offset_exceeded") else 0)

    def observe_db_servers(self, servers: list[dict[str, object]]) -> None:
        """Mirror :meth:`tjobs.cluster.db_health.DatabaseHealth.describe` (scrape time)."""
        for server in servers:
            self.db_server_up.labels(str(server["server"])).set(1 if server["reachable"] else 0)
        self.jobs_paused.set(sum(_number(server.get("paused_shards")) for server in servers))

    def observe_shard_moves(self, moves: Sequence[MoveRow]) -> None:
        """Mirror the recorded moves (scrape time, from the last background read): the series of a
        move in progress; the last cut-over pause stays while its move is recorded."""
        running = [move for move in moves if move.state in MOVE_STEPS]
        self.shard_moves_in_progress.set(len(running))
        for gauge in (self.shard_move_step, self.shard_move_rows_copied, self.shard_move_lag_rows):
            gauge.clear()
        for move in running:
            database = str(move.database)
            for step in MOVE_STEPS:
                self.shard_move_step.labels(database, step).set(1 if move.state == step else 0)
            self.shard_move_rows_copied.labels(database).set(move.rows_copied)
            self.shard_move_lag_rows.labels(database).set(move.lag_rows)
        for move in moves:
            if move.cut_over_pause_ms is not None:
                self.shard_move_cut_over_pause.labels(str(move.database)).set(move.cut_over_pause_ms / 1000)

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
    (:mod:`tjobs.observability.slo`)."""

    enabled = False

    def __init__(self) -> None:
        super().__init__()
        for name, value in list(vars(self).items()):
            if isinstance(value, MetricWrapperBase):
                setattr(self, name, _NO_OP)
        self.registry = CollectorRegistry(auto_describe=True)

    def observe_fire(self, app_id: str, lateness_s: float) -> None:
        pass

    def observe_attempt(
        self, app_id: str, outcome: str, status: int | None, duration_s: float, protocol: str = "http"
    ) -> None:
        pass

    def observe_flow_update(self, app_id: str, status: str, delivery_lateness_s: float | None) -> None:
        pass

    def observe_throttled(self, app_id: str, reason: str) -> None:
        pass

    def observe_hot_tier_lag(self, tier: str, lag_s: float) -> None:
        pass

    def observe_runner(self, cas_rejected: int, commit_errors: int, commit_fenced: int) -> None:
        pass

    def observe_flow_totals(self, redriven: int, handed_back: int, leased: int) -> None:
        pass

    def observe_delivery_queues(self, queues: Sequence[tuple[str, int, float | None]]) -> None:
        pass

    def observe_cluster(self, view: Mapping[str, object], node_id: str) -> None:
        pass

    def observe_db_servers(self, servers: list[dict[str, object]]) -> None:
        pass

    def observe_shard_moves(self, moves: Sequence[MoveRow]) -> None:
        pass

    def render(self) -> bytes:
        return b""


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
