"""The job runner: one timing wheel for every job (shard) this node owns.

Each cycle (``cycle_s``, aligned to the epoch so every node agrees) the runner raises its loaded
*horizon* to the next cycle's end, ``load_lead_s`` before that cycle starts, and loads each owned
shard's active tasks with ``next_run_at < horizon`` (overdue ones included) into the wheel. Loading
only reads (invariant 3). Changes made during a cycle arrive through the hot path and are offered to
the wheel the same way; an offer never replaces an entry holding a newer task version.

Every tick the wheel yields its due entries; committers take them in batches and call
:meth:`TaskStore.commit_fires` (one transaction per database per batch, invariant 1). While one batch
commits, newly due entries queue up and form the next, larger batch (group commit), so batches grow
with load instead of transactions multiplying. Committed flows go to the deliverer; a recurring
task's next occurrence re-enters the wheel if it falls before the horizon.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sharding import shard_of_task_id
from tjobs.clock import Clock
from tjobs.coordinators.base import Coordinator
from tjobs.errors import Fenced
from tjobs.hotpath.base import TaskChange
from tjobs.model import (
    FireIntent,
    FireOutcome,
    Flow,
    FlowKind,
    FlowStatus,
    MisfirePolicy,
    Task,
    TaskStatus,
)
from tjobs.scheduler.pacing import MisfirePacer
from tjobs.settings import SchedulerSettings
from tjobs.stores.base import FirePlanner, TaskStore
from tjobs.wheel import TimingWheel, WheelEntry

logger = logging.getLogger(__name__)

FlowSink = Callable[[Task, Flow], None]
"""Receives every committed flow that must be sent (status pending or sending)."""

_PACED = (MisfirePolicy.FIRE_SOON, MisfirePolicy.CATCH_UP)


@dataclass(slots=True)
class RunnerStats:
    """Counters the metrics module and ``/v1/cluster`` read."""

    loaded: int = 0
    fires_committed: int = 0
    flows_sent: int = 0
    flows_skipped: int = 0
    cas_rejected: int = 0
    commit_batches: int = 0
    commit_errors: int = 0
    commit_fenced: int = 0
    last_load_ms: int = 0
    misfires: dict[str, int] = field(default_factory=dict)


class JobRunner:
    def __init__(
        self,
        store: TaskStore,
        coordinator: Coordinator,
        planner: FirePlanner,
        flow_sink: FlowSink,
        settings: SchedulerSettings,
        clock: Clock,
        committers: int = 4,
        load_concurrency: int = 8,
        on_fire_outcomes: Callable[[list[FireOutcome], int, float], None] | None = None,
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._planner = planner
        self._flow_sink = flow_sink
        self._settings = settings
        self._clock = clock
        self._committers = committers
        self._load_slots = asyncio.Semaphore(load_concurrency)
        self._on_fire_outcomes = on_fire_outcomes
        self._cycle_ms = settings.cycle_s * 1000
        self._threshold_ms = int(settings.misfire_threshold_s * 1000)
        self._pacer = MisfirePacer(settings.misfire_rate_per_s)
        self.wheel = TimingWheel(settings.tick_ms, clock.now_ms())
        self.stats = RunnerStats()
        self._owned: frozenset[int] = frozenset()
        self._horizon_ms = 0
        self._pending: list[WheelEntry] = []
        self._pending_ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        self._loads_in_progress = 0

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def horizon_ms(self) -> int:
        return self._horizon_ms

    @property
    def owned(self) -> frozenset[int]:
        return self._owned

    @property
    def backlog(self) -> int:
        """Due entries waiting for a committer."""
        return len(self._pending)

    async def start(self) -> None:
        self._running = True
        now_ms = self._clock.now_ms()
        self._horizon_ms = (now_ms // self._cycle_ms + 1) * self._cycle_ms
        self._tasks.append(asyncio.create_task(self._tick_loop(), name="tjobs-tick"))
        self._tasks.append(asyncio.create_task(self._cycle_loop(), name="tjobs-cycle"))
        for index in range(self._committers):
            self._tasks.append(asyncio.create_task(self._commit_loop(), name=f"tjobs-commit-{index}"))

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop ticking; let a commit or a load page in progress finish (a database call is never
        cancelled half-way unless it outlasts ``timeout_s``). Uncommitted due entries are dropped:
        the store still holds them for whoever loads the shard next."""
        self._running = False
        self._pending_ready.set()
        _, unfinished = await asyncio.wait(self._tasks, timeout=timeout_s)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    # ---- ownership and changes ---------------------------------------------------------------

    async def set_owned(self, owned: frozenset[int]) -> None:
        """Coordinator listener: drop lost jobs from the wheel, load gained ones up to the horizon."""
        gained = owned - self._owned
        lost = self._owned - owned
        self._owned = owned
        if lost:
            removed = self.wheel.remove_where(lambda entry: shard_of_task_id(entry.task_id) in lost)
            self._pending = [e for e in self._pending if shard_of_task_id(e.task_id) not in lost]
            logger.info("released %d jobs, %d wheel entries dropped", len(lost), removed,
                        extra={"action": "jobs_released"})
        if gained:
            await self._load(sorted(gained), self._horizon_ms)
            logger.info("acquired %d jobs", len(gained), extra={"action": "jobs_acquired"})

    def on_task_change(self, change: TaskChange) -> None:
        """Hot-path listener: apply a create/update/pause/delete to the wheel before its instant."""
        if shard_of_task_id(change.task_id) not in self._owned:
            return
        existing = self.wheel.get(change.task_id)
        if existing is not None and existing.version > change.version:
            return
        if change.next_run_at_ms is None or change.next_run_at_ms >= self._horizon_ms:
            self.wheel.cancel(change.task_id)
            return
        self._offer(change.task_id, change.app_id, change.next_run_at_ms, change.version, None)

    def _offer(
        self, task_id: int, app_id: str, scheduled_at_ms: int, version: int, policy: MisfirePolicy | None
    ) -> None:
        existing = self.wheel.get(task_id)
        if existing is not None and existing.version > version:
            return
        fire_at_ms = scheduled_at_ms
        now_ms = self._clock.now_ms()
        if now_ms - scheduled_at_ms > self._threshold_ms and policy in _PACED:
            fire_at_ms = self._pacer.slot(app_id, now_ms)
        self.wheel.add(task_id, fire_at_ms, scheduled_at_ms, version)

    # ---- cycle loading -----------------------------------------------------------------------

    async def _cycle_loop(self) -> None:
        lead_ms = self._settings.load_lead_s * 1000
        while self._running:
            wake_at_ms = self._horizon_ms - lead_ms
            delay_ms = wake_at_ms - self._clock.now_ms()
            if delay_ms > 0:
                await asyncio.sleep(min(delay_ms, 1000) / 1000)
                continue
            # Raise the horizon first: hot-path changes for the new cycle go straight to the wheel
            # while the load runs, and the load's older versions never replace them.
            new_horizon_ms = self._horizon_ms + self._cycle_ms
            self._horizon_ms = new_horizon_ms
            self._pacer.forget_idle(self._clock.now_ms())
            try:
                await self._load(sorted(self._owned), new_horizon_ms)
            except Exception:
                logger.exception("cycle load failed; retrying shortly", extra={"action": "cycle_load_failed"})
                self._horizon_ms = new_horizon_ms - self._cycle_ms
                await asyncio.sleep(1.0)

    async def _load(self, shards: Iterable[int], before_ms: int) -> None:
        started_ms = self._clock.now_ms()
        counts = await asyncio.gather(*(self._load_shard(shard, before_ms) for shard in shards))
        total = sum(counts)
        self.stats.loaded += total
        self.stats.last_load_ms = self._clock.now_ms() - started_ms
        logger.info("loaded %d tasks due before %d in %d ms", total, before_ms, self.stats.last_load_ms,
                    extra={"action": "cycle_loaded"})

    async def _load_shard(self, shard: int, before_ms: int) -> int:
        page_size = self._settings.load_page_size
        loaded = 0
        after: tuple[int, int] | None = None
        async with self._load_slots:
            while shard in self._owned and self._running:
                page = await self._store.load_due(shard, before_ms, page_size, after)
                for due in page:
                    self._offer(due.task_id, due.app_id, due.next_run_at_ms, due.version, due.misfire_policy)
                loaded += len(page)
                if len(page) < page_size:
                    break
                after = (page[-1].next_run_at_ms, page[-1].task_id)
        return loaded

    # ---- firing ------------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        tick_s = self._settings.tick_ms / 1000
        next_tick = loop.time()
        while self._running:
            now_ms = self._clock.now_ms()
            if self._coordinator.may_fire(now_ms):
                due = self.wheel.advance(now_ms)
                if due:
                    self._pending.extend(due)
                    self._pending_ready.set()
            next_tick += tick_s
            delay = next_tick - loop.time()
            if delay < 0:  # fell behind (GC, a long callback): resynchronise instead of bursting
                next_tick = loop.time()
                delay = 0
            await asyncio.sleep(delay)

    async def _commit_loop(self) -> None:
        batch_max = self._settings.fire_batch_max
        while self._running:
            await self._pending_ready.wait()
            if not self._pending:
                self._pending_ready.clear()
                continue
            batch = self._pending[:batch_max]
            del self._pending[:batch_max]
            if not self._pending:
                self._pending_ready.clear()
            await self._commit(batch)

    async def _commit(self, batch: list[WheelEntry]) -> None:
        intents = [FireIntent(e.task_id, e.scheduled_at_ms, e.version) for e in batch]
        now_ms = self._clock.now_ms()
        if not self._coordinator.may_fire(now_ms):
            return  # fenced: entries are dropped; the next owner loads them from the store
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            outcomes = await self._store.commit_fires(intents, now_ms, self._planner, self._may_commit)
        except Fenced:
            # Stopped inside the transaction while the fence closed: rolled back, nothing written.
            # Like the fenced path above, the entries are dropped for the shard's owner to fire.
            self.stats.commit_fenced += 1
            logger.warning("fire commit of %d intents rolled back: this node is fenced", len(batch),
                           extra={"action": "fire_commit_fenced"})
            return
        except Exception as error:
            self.stats.commit_errors += 1
            logger.warning("fire commit of %d intents failed (%s); retrying in 500 ms", len(batch), error,
                           extra={"action": "fire_commit_failed"})
            retry_at_ms = self._clock.now_ms() + 500
            for entry in batch:
                if self.wheel.get(entry.task_id) is None and shard_of_task_id(entry.task_id) in self._owned:
                    self.wheel.add(entry.task_id, retry_at_ms, entry.scheduled_at_ms, entry.version)
            return
        self.stats.commit_batches += 1
        if self._on_fire_outcomes is not None:
            self._on_fire_outcomes(outcomes, now_ms, loop.time() - started)
        for outcome in outcomes:
            self._after_commit(outcome)

    def _may_commit(self) -> bool:
        return self._coordinator.may_fire(self._clock.now_ms())

    def _after_commit(self, outcome: FireOutcome) -> None:
        task = outcome.task
        if task is None:
            self.stats.cas_rejected += 1
            return
        self.stats.fires_committed += 1
        for flow in outcome.flows:
            if flow.status in (FlowStatus.PENDING, FlowStatus.SENDING):
                self.stats.flows_sent += 1
                self._flow_sink(task, flow)
            else:
                self.stats.flows_skipped += 1
            if flow.kind is FlowKind.MISFIRE:
                key = task.misfire_policy.value
                self.stats.misfires[key] = self.stats.misfires.get(key, 0) + 1
        if (
            task.status is TaskStatus.ACTIVE
            and task.next_run_at_ms is not None
            and task.next_run_at_ms < self._horizon_ms
            and shard_of_task_id(task.id) in self._owned
        ):
            self._offer(task.id, task.app_id, task.next_run_at_ms, task.version, task.misfire_policy)
