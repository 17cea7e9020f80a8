"""One tjobs node: storage, coordination, hot tier, wheel, deliverer, compensator and retention, wired.

The embedded default and a cluster node differ only in the store URL, the coordinator and the hot
path handed in here; everything else is the same code.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sharding.shard_map import ShardMap
from tjobs.alerts.wiring import NodeAlerts
from tjobs.clock import Clock, SystemClock
from tjobs.cluster.base import Coordinator
from tjobs.cluster.db_health import DatabaseHealth
from tjobs.cluster.local import LocalCoordinator
from tjobs.cluster.shard_maps import establish_shard_map
from tjobs.delivery.deliverer import Deliverer
from tjobs.delivery.foreign_flows import ForeignFlows
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.pool_dispatcher import PoolDispatcher
from tjobs.delivery.ssrf import TargetGuard
from tjobs.delivery.transport import Transport
from tjobs.delivery.wiring import build_transport
from tjobs.errors import TjobsError
from tjobs.firing.compensator import Compensator
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.firing.retention import RetentionSweeper
from tjobs.firing.runner import JobRunner
from tjobs.hot_tier.base import HotTier
from tjobs.hot_tier.local import LocalHotTier
from tjobs.observability.metrics import Metrics, NullMetrics
from tjobs.observability.observer import MetricsObserver
from tjobs.observability.slo import ServiceLevels
from tjobs.observability.slo_recorder import SloRecorder
from tjobs.service.accounts import AccountService
from tjobs.service.apps import AppDirectory, AppService
from tjobs.service.audit import AuditService
from tjobs.service.backfill import BACKFILL, BackfillService
from tjobs.service.backfill_walk import BackfillWalks
from tjobs.service.calendars import CalendarService
from tjobs.service.child_flows import ChildFlows
from tjobs.service.cluster_slo import ClusterServiceLevels
from tjobs.service.disabled_apps import DisabledApps
from tjobs.service.node_figures import STARVED_WINDOW_MS, NodeFigures, in_flight_entries
from tjobs.service.operator_job_runner import OperatorJobRunner
from tjobs.service.operator_jobs import OperatorJobService, finished_job_entry
from tjobs.service.runs import RunService
from tjobs.service.shard_moves import MoveWatch
from tjobs.service.shards import ShardService
from tjobs.service.targets import TargetDirectory, TargetService
from tjobs.service.tasks import TaskService
from tjobs.settings import Settings
from tjobs.stores import create_store
from tjobs.stores.audit_store import audit_log_of
from tjobs.stores.base import TaskStore
from tjobs.stores.calendar_store import calendars_of
from tjobs.stores.contracts.operator_jobs import OperatorJob
from tjobs.stores.operator_job_store import operator_jobs_of
from tjobs.stores.task_parent_store import task_parents_of
from tjobs.targets.addresses import AddressAllowList
from tjobs.targets.model import Protocol

logger = logging.getLogger(__name__)

GC_THRESHOLDS = (50_000, 20, 20)  # allocations before a young collection; young, middle per older one


def settle_heap() -> None:
    """For a node process, once started: freeze the objects made so far (modules, settings, pools:
    they live as long as the process) out of the collector's reach and collect young objects less
    often. The fire path allocates a few hundred objects per fire, nearly all freed by reference
    counting; with the default thresholds a node firing thousands of fires a second runs a young
    collection every few fires and a full one every few seconds, each walking every live object while
    the loop waits, which costs node CPU per fire and lateness (figures: docs/benchmarks.md, "Moved
    from docstrings"). Process-wide: call it from a server's entry point, not from a library or test
    that hosts nodes."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """What a node tells the API about itself: a read-only snapshot, so no route reaches into the
    runner, the coordinator or the health checker."""

    node_id: str
    started: bool
    jobs: frozenset[int]  # owned by this node (paused ones included)
    wheel_tasks: int
    fire_backlog: int  # due intents waiting for a fire transaction
    fires_committed: int
    newest_committed_instant_ms: int | None  # a fenced node never commits an instant due after its fence
    cas_rejected: int
    cluster: Mapping[str, Any]  # the coordinator's view (:meth:`tjobs.cluster.base.Coordinator.describe`)
    database_servers: list[dict[str, Any]]  # per server: name, reachable, paused jobs


@dataclass(slots=True)
class NodeParts:
    """Overrides for tests and cluster mode; anything left ``None`` gets the embedded default."""

    store: TaskStore | None = None
    coordinator: Coordinator | None = None
    hot_tier: HotTier | None = None
    clock: Clock | None = None
    transport: Transport | None = None  # callbacks: the HTTP transport with the node's SSRF guard
    # named targets' other protocols (tests: the in-memory twin); else each loaded on its first use
    protocol_transports: Mapping[Protocol, Transport] | None = None


class Node:
    def __init__(self, settings: Settings, parts: NodeParts | None = None) -> None:
        parts = parts or NodeParts()
        self.settings = settings
        self.node_id = settings.node_identity()
        self.topology = settings.storage.parsed_topology()
        self.clock: Clock = parts.clock or SystemClock()
        self.store: TaskStore = parts.store or create_store(settings.storage)
        # Per database server: shards of a server this node cannot reach pause; the others keep firing.
        self.db_health = DatabaseHealth(self.store, self.topology.shard_count)
        if settings.cluster.etcd_endpoints:  # cluster mode: etcd coordination, Redis or DB-poll hot tier
            from tjobs.cluster.wiring import build_coordinator, build_hot_tier

            parts.coordinator = parts.coordinator or build_coordinator(
                settings, self.node_id, self.store, self.clock, self.db_health
            )
            parts.hot_tier = parts.hot_tier or build_hot_tier(settings, self.node_id, self.clock, self.store)
        self.coordinator: Coordinator = parts.coordinator or LocalCoordinator(
            self.topology.shard_count, self.node_id, self.db_health, map_home=self.store
        )
        self.coordinator.watch_shard_map(self._route_by)
        self.hot_tier: HotTier = parts.hot_tier or LocalHotTier(sole_node=True)  # no cluster: every write is ours
        self.metrics = Metrics() if settings.metrics.enabled else NullMetrics()
        self.slo = ServiceLevels(self.clock.now_ms)  # fed with or without metrics: GET /v1/slo, /v1/stats
        # Metrics and SLO accounting hang off this one observer of the runner, deliverer, limiter and hot tier.
        self.observer = MetricsObserver(self.metrics, self.slo, self.clock.now_ms)
        # this node's service-level minutes, added to the store every slo.flush_s: GET /v1/slo?window= sums every node's
        self.slo_recorder = SloRecorder(
            self.store, self.slo.minutes, self.node_id, self.clock, interval_s=settings.slo.flush_s
        )
        # Apps and named targets live on the server holding the apps table: cached, read ahead of expiry,
        # and served from the last good copy (bounded) while that server is silent (issue 28).
        directory = settings.directory
        serve_stale_ms, read_deadline_ms = int(directory.serve_stale_s * 1000), directory.read_deadline_ms
        # An API key this node has no copy of waits for that server as long as a create waits for its own.
        self.apps = AppDirectory(
            self.store,
            self.clock,
            int(directory.app_ttl_s * 1000),
            serve_stale_ms,
            read_deadline_ms,
            key_miss_deadline_ms=int(settings.storage.create_timeout_s * 1000),
        )
        self.disabled_apps = DisabledApps(self.store)  # their tasks do not fire (planner and runner)
        # SSRF: every send re-judges the target (with the allow-list its request carries) and connects
        # only to the judged addresses.
        self.guard = TargetGuard(allow_loopback=settings.allow_loopback_callbacks)
        # Named targets: cached per app, read per attempt; brokers and gRPC only where the operator allows.
        self.targets = TargetDirectory(
            self.store, self.clock, int(settings.targets.cache_ttl_s * 1000), serve_stale_ms, read_deadline_ms
        )
        self.transport: Transport = build_transport(
            settings.callbacks,
            policy=self.guard.policy,
            allowed_addresses=AddressAllowList.parse(settings.targets.allowed_addresses),
            transports=parts.protocol_transports,
            http=parts.transport,
        )
        self.limiter = AppLimiter(settings.callbacks.global_max_in_flight, observer=self.observer)
        # Executor pools: the coordinator holds the registry; the dispatcher routes each pool attempt.
        self.pools = PoolDispatcher(self.coordinator, self.transport)
        self.task_parents = task_parents_of(self.store)  # README "Child tasks": who names a task as a child
        self.child_flows = ChildFlows(self.store, self.topology.shard_count, self.task_parents)
        self.deliverer = Deliverer(
            self.store,
            self.transport,
            self.limiter,
            settings.callbacks,
            self.clock,
            apps=self.apps,
            observer=self.observer,
            fence=self.coordinator.may_fire,
            status_reader=self.store,
            run_reader=self.store,  # a shard taken over: its live runs hold the overlap gate here too
            targets=self.targets,
            pools=self.pools,
            task_changes=self.hot_tier.publish,
            flush_interval_s=settings.callbacks.outcome_flush_ms / 1000,
            flush_batch=settings.callbacks.outcome_flush_batch,
            run_timeout_ms=settings.runs.timeout_ms,
            ended=self.child_flows.ended,
            # what the API commits for a shard another node owns: retried here only while that owner cannot lease it
            foreign=ForeignFlows(
                lambda: self.runner.owned, settings.compensator.grace_s, settings.cluster.clock_skew_max_ms
            ),
            # what it lets go unsent (fenced, handed over, stopping): written back due for any owner's next pass
            hand_back_ms=int(settings.compensator.grace_s * 1000) + 2 * settings.cluster.clock_skew_max_ms,
            keep_in_memory=settings.callbacks.queue_keep_min,  # past it, first attempts wait in the store
        )
        scheduler = settings.scheduler
        # in memory for the planner, read again every scheduler.calendar_refresh_s
        self.calendars = CalendarService(calendars_of(self.store), self.clock, scheduler.calendar_refresh_s)
        self.planner = FirePlanner(
            FirePolicy(
                int(scheduler.misfire_threshold_s * 1000),
                scheduler.catch_up_max,
                settings.callbacks.max_age_s * 1000,
                settings.callbacks.timeout_ms,
            ),
            disabled_apps=self.disabled_apps,
            calendars=self.calendars.rules,
        )
        self.runner = JobRunner(
            self.store,
            self.coordinator,
            self.planner,
            self.deliverer.deliver,
            scheduler,
            self.clock,
            observer=self.observer,
            hot_tier=self.hot_tier,
            disabled_apps=self.disabled_apps,
            runs=self.deliverer,  # learns a gained shard's live runs before it fires, forgets a lost one's
        )
        self.db_health.subscribe(self.runner.set_paused)
        self.disabled_apps.subscribe(self.runner.reload)
        lease_ms = settings.callbacks.timeout_ms * 2 + 10_000
        self.compensator = Compensator(
            self.store,
            self.runner.firing_jobs,
            self.deliverer.is_in_flight,
            self.deliverer.deliver,
            settings.compensator,
            self.clock,
            lease_ms,
            fence=self.coordinator.may_fire,
            task_changes=self.hot_tier.publish,
            ended=self.child_flows.ended,
            observer=self.observer,  # a run's end at its deadline: the service levels count it
            outcomes_written=lambda: self.deliverer.flush_calls,
            wait_ms=self.deliverer.wait_ms,  # a held flow leased until its queue reaches it
            spill=self.deliverer.spill,  # a spilled flow re-driven once its app's queue has room
        )
        self.retention = RetentionSweeper(self.store, self.runner.firing_jobs, settings.retention, self.clock)
        self.target_service = TargetService(self.store, self.targets, settings, self.clock, self.guard)
        self.tasks = TaskService(
            self.store,
            self.hot_tier,
            settings,
            self.clock,
            self.topology,
            flow_sink=self.deliverer.deliver,
            targets=self.target_service,
            unreachable_shards=self.db_health.paused_shards,  # a create there answers 503 at once
            observer=self.observer,  # re-driven dead letters: counted dead once (tjobs.observability.slo)
            calendars=self.calendars.rules,
            membership=self.coordinator.membership,  # an app's quota is the cluster's: this node takes its share
            parents=self.task_parents,
        )
        # Job runs: an executor's reports, log lines and an owner's cancel, on whichever node takes them
        self.runs = RunService(
            self.store,
            settings.runs,
            self.clock,
            self.tasks.get_flow,
            flow_sink=self.deliverer.deliver,
            task_changes=self.hot_tier.publish,
            ended=self.child_flows.ended,
            observer=self.observer,  # a run's end by a report or a cancel: the service levels count it
            decide_run=self.tasks.decide_run,  # a report's read and write: one call of the store
        )
        self.child_flows.bind(self.tasks, self.apps.get)
        self.move_watch = MoveWatch(self.store)  # the recorded shard moves, for the metrics
        # The API and the console reach the store only through the services (tasks, target_service and these).
        self.app_service = AppService(self.store, self.apps, settings, self.clock, self.disabled_apps)
        self.accounts = AccountService(self.store, self.clock)  # operator users, their tokens, console sessions
        self.shards = ShardService(self.coordinator, self.store)
        self.cluster_slo = ClusterServiceLevels(self.store, self.clock)
        self.audit = AuditService(audit_log_of(self.store), self.clock, settings.audit)  # who changed what
        # Operator jobs (a redrive of every matching dead letter): run in batches by whichever node claims one,
        # and a backfill of a task's past range (tjobs.service.backfill)
        operator_jobs = operator_jobs_of(self.store)
        backfill_walks = BackfillWalks(self.tasks, self.apps.get, self.clock)
        self.job_runner = OperatorJobRunner(
            operator_jobs,
            self.tasks.search,
            self.tasks.redrive,
            self.apps.get,
            self.clock,
            self.node_id,
            kinds={BACKFILL: backfill_walks.open},
        )
        self.job_runner.on_finished = self._job_ended  # an ended job goes on record in the audit log
        self.operator_jobs = OperatorJobService(operator_jobs, self.tasks.search, self.clock, self.job_runner.wake)
        self.backfills = BackfillService(operator_jobs, self.tasks, self.clock, self.job_runner.wake)
        # Alert rules and channels, evaluated once per cluster: on the dispatcher leader (tjobs.alerts)
        self.alerts = NodeAlerts(
            settings, self.store, self.coordinator, self.apps, self.guard, self.transport, self.clock
        )
        # this node's runtime figures, published on the coordinator: the cluster page shows every node's
        self.figures = NodeFigures(self.node_id, self.coordinator, self.runtime_figures, self.clock)
        self.started = False

    async def start(self) -> None:
        """Start the parts in order. If one fails, those already started are stopped and the store is
        closed before the error propagates: a pool left open would be closed by the garbage collector, or
        not at all (aiosqlite warns; tests/unit/test_node_start_failure.py)."""
        async with contextlib.AsyncExitStack() as started:
            await self.store.start()
            started.push_async_callback(self.store.close)
            for closing in (self.transport.close, self.targets.close, self.apps.close):
                started.push_async_callback(closing)
            await self.store.check_layout()  # never run on data laid out for other settings
            await establish_shard_map(self.coordinator, self.store)  # nor on other servers than the map's

            async def begin(starting: Awaitable[object], stop: Callable[[], Awaitable[object]]) -> None:
                await starting
                started.push_async_callback(stop)

            await begin(self.deliverer.start(), lambda: self.deliverer.stop(drain_timeout_s=0.0))
            await begin(self.runner.start(), self.runner.stop)
            await begin(self.db_health.start(), self.db_health.stop)
            # changes the tier lost (a Redis flush): the jobs are read again now, not at the next cycle
            hot_tier = self.hot_tier.start(self.runner.on_task_change, self.observer, lost=self.runner.reload)
            await begin(hot_tier, self.hot_tier.stop)
            await begin(self.disabled_apps.start(), self.disabled_apps.stop)  # known before the first load
            await begin(self.calendars.start(), self.calendars.stop)  # known before the first fire
            await begin(self.coordinator.start(self._jobs_owned), self.coordinator.stop)
            await begin(self.compensator.start(), self.compensator.stop)
            await begin(self.retention.start(), self.retention.stop)
            await begin(self.tasks.counts.start(), self.tasks.counts.stop)
            await begin(self.tasks.reconciler.start(), self.tasks.reconciler.stop)
            await begin(self.slo_recorder.start(), self.slo_recorder.stop)
            await begin(self.audit.retention.start(), self.audit.retention.stop)
            await begin(self.alerts.start(), self.alerts.stop)
            await begin(self.job_runner.start(), self.job_runner.stop)
            await begin(self.figures.start(), self.figures.stop)
            if self.metrics.enabled:
                await self.move_watch.start()
            started.pop_all()  # all started: stop() ends them from now on
        self.started = True
        logger.info(
            "node %s started with %d jobs", self.node_id, len(self.runner.owned), extra={"action": "node_started"}
        )

    async def _route_by(self, shard_map: ShardMap) -> None:
        """A newer shard map (a logical database moved): route by it from now on, and rebuild what is
        per server (the runner's committers, the health checker's servers)."""
        self.store.use_shard_map(shard_map)
        self.runner.servers_changed()
        self.db_health.servers_changed()

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Stop the parts in order, the store last. A part whose stop fails does not keep the parts after it
        running, or the store open (its pooled SQLite connections would be closed by the garbage collector,
        or not at all: tests/unit/test_node_stop_failure.py): every step runs, then the first error is raised."""
        self.started = False
        steps: list[Callable[[], Awaitable[object]]] = [
            self.figures.stop,
            self.job_runner.stop,  # its batch's progress saved, its lease given back
            self.alerts.stop,
            self.coordinator.stop,
            self.runner.stop,
            self.compensator.stop,
            self.retention.stop,
            self.audit.retention.stop,
            self.disabled_apps.stop,
            self.calendars.stop,
            self.tasks.reconciler.stop,
            self.tasks.counts.stop,
            self.move_watch.stop,
            self.db_health.stop,
            self.hot_tier.stop,
            lambda: self.deliverer.stop(drain_timeout_s),
            self.apps.close,
            self.targets.close,
            self.slo_recorder.stop,  # with the drained flows' outcomes
            self.transport.close,
            self.store.close,
        ]
        failed: Exception | None = None
        for step in steps:
            try:
                await step()
            except Exception as error:  # the next steps still run; the first error is raised after them
                logger.exception(
                    "node %s: a step of its stop failed", self.node_id, extra={"action": "node_stop_failed"}
                )
                failed = failed or error
        if failed is not None:
            raise failed
        logger.info("node %s stopped", self.node_id, extra={"action": "node_stopped"})

    def status(self) -> NodeStatus:
        stats = self.runner.stats
        return NodeStatus(
            node_id=self.node_id,
            started=self.started,
            jobs=self.runner.owned,
            wheel_tasks=len(self.runner.wheel),
            fire_backlog=self.runner.backlog,
            fires_committed=stats.fires_committed,
            newest_committed_instant_ms=stats.newest_committed_instant_ms,
            cas_rejected=stats.cas_rejected,
            cluster=self.coordinator.describe(),
            database_servers=self.db_health.describe(),
        )

    def runtime_figures(self) -> dict[str, Any]:
        """This node's runtime figures as :mod:`tjobs.service.node_figures` publishes them (JSON-able)."""
        stats = self.runner.stats
        cluster = self.coordinator.describe()
        lag_s = self.observer.last_hot_tier_lag_s
        starved_since_ms = self.clock.now_ms() - STARVED_WINDOW_MS
        return {
            "started": self.started,
            "zone": self.settings.cluster.zone,
            "jobs_owned": len(self.runner.owned),
            "wheel_tasks": len(self.runner.wheel),
            "fire_backlog": self.runner.backlog,
            "delivery_backlog": self.deliverer.backlog,
            "callbacks_in_flight": self.deliverer.in_flight_count(),
            "compensator_backlog": self.compensator.backlog,
            "fires_committed": stats.fires_committed,
            "cas_rejected": stats.cas_rejected,
            "commit_errors": stats.commit_errors,
            "cycle_load_ms": stats.last_load_ms,
            "sync_lag_ms": cluster.get("sync_lag_ms"),
            "lease_remaining_ms": cluster.get("lease_remaining_ms"),
            "clock_skew_ms": cluster.get("clock_skew_ms"),
            "fenced": cluster.get("fenced"),
            "hot_tier_lag_ms": None if lag_s is None else round(lag_s * 1000),
            "pools": {
                "in_flight": in_flight_entries(self.pools.in_flight_all()),
                "starved": [list(entry) for entry in self.pools.starved(starved_since_ms)],
            },
        }

    async def _jobs_owned(self, owned: frozenset[int]) -> None:
        """The coordinator's listener: the runner takes the set, and a node taking shards runs a compensation
        pass at once (one read per database): what a node wrote back due as it let it go unsent
        (:mod:`tjobs.delivery.hand_back`; this node or the shards' former owner) goes out now, not a pass later."""
        gained = owned - self.runner.owned
        await self.runner.set_owned(owned)
        if gained:
            self.compensator.wake()

    async def _job_ended(self, job: OperatorJob) -> None:
        """An operator job ended on this node: on record in the audit log (a failed write is logged there)."""
        with contextlib.suppress(TjobsError):
            await self.audit.record(finished_job_entry(job, self.node_id))

    async def not_ready_reason(self) -> str | None:
        """``None`` when the node is ready (a database server answers and it owns jobs), else why not.
        Ready while at least one server answers: the shards of an unreachable one pause and the
        others keep firing and serving. The reason is short and names no server or address (``/readyz``
        is open); which servers fail, and their errors, are in ``/v1/cluster`` and the node's log."""
        servers = self.db_health.describe()
        if servers and not any(server["reachable"] for server in servers):
            return f"no database server answers (0 of {len(servers)})"
        if not self.db_health.running:
            try:
                await self.store.ping()
            except TjobsError:
                return "the database does not answer"
        if self.coordinator.describe().get("clock_offset_exceeded"):
            return "this node's clock is off the database's past cluster.clock_skew_max_ms"
        if not self.started or not self.runner.owned:
            return "node owns no jobs yet"
        return None

    def refresh_gauges(self) -> None:
        """Bring the scrape-time gauges up to date (called by ``GET /metrics``)."""
        self.metrics.jobs_owned.set(len(self.runner.owned))
        self.metrics.wheel_size.set(len(self.runner.wheel))
        self.metrics.cycle_load_duration.set(self.runner.stats.last_load_ms / 1000)
        self.metrics.commit_backlog.set(self.runner.backlog)
        self.metrics.compensator_backlog.set(self.compensator.backlog)
        stats = self.runner.stats
        self.metrics.observe_runner(stats.cas_rejected, stats.commit_errors, stats.commit_fenced)
        self.metrics.observe_flow_totals(self.compensator.redriven, self.deliverer.handed_back, self.compensator.leased)
        self.metrics.observe_delivery_queues(self.deliverer.lanes.queues())
        self.metrics.observe_cluster(self.coordinator.describe(), self.node_id)
        self.metrics.observe_db_servers(self.db_health.describe())
        self.metrics.observe_shard_moves(self.move_watch.latest)
