"""Prometheus metrics of one node: ``tjobs_`` prefix, base units, bounded labels (app, never task id).

One :class:`Metrics` per node owns its registry (no global default registry), so tests can build
several nodes in one process. Hot-path children are cached per app.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENESS_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
DURATION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
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
        self.dead_letters = Counter("tjobs_dead_letters", "Flows moved to the dead letter", ["app"], registry=r)
        self.misfires = Counter("tjobs_misfires", "Misfires by policy", ["app", "policy"], registry=r)
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
        self.cycle_load_duration = Gauge(
            "tjobs_cycle_load_duration_seconds", "Duration of the last cycle load", registry=r
        )
        self.commit_backlog = Gauge("tjobs_fire_backlog", "Due fires waiting for a committer", registry=r)
        self.compensator_backlog = Gauge(
            "tjobs_compensator_backlog", "Flows the last compensation pass handled", registry=r
        )
        self.flows_redriven = Counter("tjobs_flows_redriven", "Flows re-driven by the compensator", registry=r)
        self._fires_committed: dict[str, Counter] = {}
        self._fire_lateness: dict[str, Histogram] = {}

    def observe_fire(self, app_id: str, lateness_s: float) -> None:
        """Hot path: a committed fire; children cached per app."""
        counter = self._fires_committed.get(app_id)
        if counter is None:
            counter = self._fires_committed[app_id] = self.fires.labels(app_id, "committed")
            self._fire_lateness[app_id] = self.fire_lateness.labels(app_id)
        counter.inc()
        self._fire_lateness[app_id].observe(lateness_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
