"""The job runner: one timing wheel for every job (shard) this node owns.

Each cycle (``cycle_s``, aligned to the epoch so every node agrees) the runner raises its loaded
*horizon* to the next cycle's end, ``load_lead_s`` before that cycle starts, and loads each owned
shard's active tasks due before the new horizon into the wheel, overdue ones included. On a node
without a cluster, whose in-process hot tier hears every write (``HotTier.complete``), it reads only
the overdue ones (``next_run_at`` before the load's start) and the new cycle (``[old horizon, new
horizon)``), not again the span in between, not due yet and already in the wheel (loaded by the
previous load, kept current by the hot tier); a cluster's hot tier can lose a change, so there the
load reads that span again and a lost change waits at most for it. A change missed in a skipped span
is still never lost (invariant 7 in docs/design.md): a task created or
moved into that span is due before the next cycle load starts (``load_lead_s < cycle_s``, which the
settings enforce), so that load reads it as overdue and it fires late under its misfire policy; a
stale entry left in the wheel fires, its compare-and-set is rejected and the task is re-read and
offered as stored (:meth:`JobRunner._reconcile`). Take-over loads (a gained job), a resumed shard, a
reload and the first cycle load after a restart read everything below the horizon. Loading only
reads (invariant 3 in docs/design.md). Changes made during a cycle arrive through the hot tier and
are offered to the wheel the same way; an offer never replaces an entry holding a newer task
version.

Every tick the wheel yields its due entries; committers take them in batches and call
:meth:`TaskStore.commit_fires` (invariant 1 in docs/design.md: one transaction per database server per
batch). While one batch commits, newly due entries queue up and form the next, larger batch (group commit), so batches
grow with load instead of transactions multiplying. Committed flows go to the deliverer; a recurring
task's next occurrence re-enters the wheel if it falls before the horizon.

A batch spans database servers, and each server's transaction commits or fails on its own: what
committed is delivered and re-enters the wheel as above, and the intents of a failed transaction go
back into the wheel alone, retried after 0.5 s, doubling up to 5 s. A retried intent that is then
rejected has its task re-read and offered as stored: the failed attempt may have committed unseen (a
connection lost during COMMIT), and then its flow is delivered too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sharding import shard_of_task_id
from tjobs.clock import Clock
from tjobs.cluster.base import Coordinator
from tjobs.errors import Fenced
from tjobs.firing.load_pace import PACED_PAGE_ROWS, LoadPace, offer_in_chunks
from tjobs.firing.pacing import MisfirePacer
from tjobs.firing.planner import flow_instant
from tjobs.firing.wheel import TimingWheel, WheelEntry
from tjobs.hot_tier.base import HotTier, TaskChange
from tjobs.model import (
    DueTask,
    FireIntent,
    FireOutcome,
    Flow,
    FlowKind,
    FlowStatus,
    MisfirePolicy,
    Task,
    TaskStatus,
)
from tjobs.observability.observer import NO_OBSERVER, FireObserver
from tjobs.settings import SchedulerSettings
from tjobs.stores.base import FirePlanner, TaskStore

logger = logging.getLogger(__name__)

COMMIT_RETRY_FIRST_MS = 500  # a failed fire transaction's intents are retried after this long,
COMMIT_RETRY_MAX_MS = 5_000  # doubling per consecutive failure up to this

FlowSink = Callable[[Task, Flow], None]
"""Receives every committed flow that must be sent (status pending or sending)."""

_PACED = (MisfirePolicy.FIRE_SOON, MisfirePolicy.CATCH_UP)


class ShardRuns(Protocol):
    """The overlap gate's live runs per shard (the deliverer's; :mod:`tjobs.delivery.run_watch`)."""

    async def learn_runs(self, shards: Sequence[int]) -> None: ...

    def forget_runs(self, shards: frozenset[int]) -> None: ...


@dataclass(slots=True)
class RunnerStats:
    """Counters the metrics module and ``/v1/cluster`` read."""

    loaded: int = 0
    fires_committed: int = 0
    newest_committed_instant_ms: int | None = None  # the latest instant of a committed fire
    flows_sent: int = 0
    flows_skipped: int = 0
    cas_rejected: int = 0
    commit_batches: int = 0
    commit_errors: int = 0
    commit_fenced: int = 0
    commit_retries: int = 0  # intents of failed fire transactions put back in the wheel
    reconciled: int = 0  # rejected intents whose task was re-read
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
        observer: FireObserver = NO_OBSERVER,
        hot_tier: HotTier | None = None,
        disabled_apps: Container[str] = frozenset(),
        runs: ShardRuns | None = None,
    ) -> None:
        """``flow_sink`` takes every committed flow to send (the deliverer); ``observer`` is told of
        every fire transaction batch that committed something; ``hot_tier`` (whose changes reach
        :meth:`on_task_change`) is told the owned jobs right before gained ones are loaded; the tasks
        of ``disabled_apps`` are kept out of the wheel (see :meth:`reload`); ``runs`` learns the live runs
        of gained and resumed jobs before anything of theirs fires, and forgets those of lost jobs."""
        self._store = store
        self._coordinator = coordinator
        self._planner = planner
        self._flow_sink = flow_sink
        self._settings = settings
        self._clock = clock
        self._committers = committers
        self._load_slots = asyncio.Semaphore(load_concurrency)
        self._loading: dict[int, set[asyncio.Future[int]]] = {}  # shard -> its loads under way
        self._observer = observer
        self._hot_tier = hot_tier
        # the cycle load leaves out what it loaded before only when no change can miss the wheel
        self._skip_loaded_span = hot_tier is not None and hot_tier.complete
        self._disabled_apps = disabled_apps
        self._runs = runs
        self._cycle_ms = settings.cycle_s * 1000
        self._threshold_ms = int(settings.misfire_threshold_s * 1000)
        self._pacer = MisfirePacer(settings.misfire_rate_per_s)
        self.wheel = TimingWheel(settings.tick_ms, clock.now_ms())
        self.stats = RunnerStats()
        self._owned: frozenset[int] = frozenset()
        self._paused: frozenset[int] = frozenset()  # shards whose database server is unreachable
        self._horizon_ms = 0
        # the next cycle load reads everything below its horizon (see start)
        self._full_cycle_load = False
        self._pending: dict[str, list[WheelEntry]] = {}  # database server -> its due entries, oldest first
        # task id -> its entry taken from the wheel and not settled yet (waiting for a committer, or
        # being committed): a load does not offer that fire again (see _load_shard)
        self._in_flight: dict[int, WheelEntry] = {}
        # failed intent -> (consecutive failures, now_ms of the last failed attempt)
        self._commit_failures: dict[FireIntent, tuple[int, int]] = {}
        self._committing: dict[str, asyncio.Event] = {}  # database server -> "its entries are due"
        self._servers: dict[int, str] = {}  # shard -> its database server (store.server_of_shard)
        self._one_server = len(store.database_servers()) == 1
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        self._stopping = asyncio.Event()  # set by stop(): ends the cycle loop's nap
        self._loads_in_progress = 0
        self._last_cycle_rows = 0  # what the last cycle load read: the next one's pace (load_pace.py)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def horizon_ms(self) -> int:
        return self._horizon_ms

    @property
    def owned(self) -> frozenset[int]:
        return self._owned

    @property
    def paused(self) -> frozenset[int]:
        """Shards paused because their database server cannot be reached (owned or not)."""
        return self._paused

    def firing_jobs(self) -> frozenset[int]:
        """The jobs this node fires now: owned, and not paused for their database server (what the
        compensator and retention work on)."""
        return self._owned - self._paused

    def _fires(self, shard: int) -> bool:
        return shard in self._owned and shard not in self._paused

    @property
    def backlog(self) -> int:
        """Due entries waiting for a committer."""
        return sum(len(entries) for entries in self._pending.values())

    async def start(self) -> None:
        self._running = True
        self._stopping.clear()
        now_ms = self._clock.now_ms()
        self._horizon_ms = (now_ms // self._cycle_ms + 1) * self._cycle_ms
        # Started again with its jobs (no take-over load follows): what the wheel holds was loaded
        # up to another horizon, so the first cycle load cannot skip what it would have loaded.
        self._full_cycle_load = bool(self._owned)
        self._tasks.append(asyncio.create_task(self._tick_loop(), name="tjobs-tick"))
        self._tasks.append(asyncio.create_task(self._cycle_loop(), name="tjobs-cycle"))

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop ticking; let a commit or a load page in progress finish (a database call is never
        cancelled half-way unless it outlasts ``timeout_s``). Uncommitted due entries are dropped:
        the store still holds them for whoever loads the shard next."""
        self._running = False
        self._stopping.set()  # the cycle loop's nap ends now
        for ready in self._committing.values():
            ready.set()
        _, unfinished = await asyncio.wait(self._tasks, timeout=timeout_s)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._in_flight.clear()  # what waited is dropped (the store still holds it); nothing commits now
        self._committing.clear()  # their committers have ended; a restart starts new ones

    # ---- ownership and changes ---------------------------------------------------------------

    async def set_owned(self, owned: frozenset[int]) -> None:
        """Coordinator listener: drop lost jobs from the wheel (``runs`` forgets their runs); for gained
        ones, ``runs`` learns their live runs first, then they are loaded up to the horizon. A learn or a
        load that fails leaves the gained jobs not owned (nothing of theirs in the wheel) and raises;
        calling again with the same set retries it."""
        if self._hot_tier is not None:
            # Right before the load: the later changes of a gained job follow what the load reads.
            await self._hot_tier.watch(owned)
        gained = owned - self._owned
        lost = self._owned - owned
        self._owned = owned - gained  # a gained job is owned (fires) once its live runs are known
        if lost:
            removed = self.wheel.remove_where(lambda entry: shard_of_task_id(entry.task_id) in lost)
            self._drop_pending(lost)
            if self._runs is not None:
                self._runs.forget_runs(lost)
            logger.info(
                "released %d jobs, %d wheel entries dropped", len(lost), removed, extra={"action": "jobs_released"}
            )
        if gained:
            if self._runs is not None:  # raises: the gained jobs stay not owned, a call with the same set retries
                await self._runs.learn_runs(sorted(gained - self._paused))
            self._owned = self._owned | gained
            try:
                await self._load(sorted(gained - self._paused), self._horizon_ms)
            except Exception:
                self._owned = self._owned - gained
                self.wheel.remove_where(lambda entry: shard_of_task_id(entry.task_id) in gained)
                self._drop_pending(gained)
                raise
            logger.info("acquired %d jobs", len(gained), extra={"action": "jobs_acquired"})

    async def set_paused(self, paused: frozenset[int]) -> None:
        """Database health listener: stop firing the shards whose server this node cannot reach (their
        wheel and backlog entries are dropped, nothing is committed for them) and, once their server
        answers again, reload those still owned up to the horizon. Other shards are not touched.
        A reload that fails leaves its shards paused and raises; calling again retries it."""
        newly_paused = paused - self._paused
        resumed = (self._paused - paused) & self._owned
        self._paused = paused
        if newly_paused:
            for shard in newly_paused:
                for load in self._loading.get(shard, ()):
                    load.cancel()  # a load waiting on the unreachable server: reloaded on resume
            removed = self.wheel.remove_where(lambda entry: shard_of_task_id(entry.task_id) in newly_paused)
            self._drop_pending(newly_paused)
            logger.warning(
                "paused %d shards (database server unreachable), %d wheel entries dropped",
                len(newly_paused),
                removed,
                extra={"action": "jobs_paused"},
            )
        if resumed:
            try:
                if self._runs is not None:  # taken while paused, or ended elsewhere meanwhile: read them now
                    self._paused = self._paused | resumed
                    await self._runs.learn_runs(sorted(resumed))
                    self._paused = self._paused - resumed
                await self._load(sorted(resumed), self._horizon_ms)
            except Exception:
                # Not loaded: stay paused, so the next call with the same set retries the reload.
                self._paused = self._paused | resumed
                raise
            logger.info("resumed %d shards", len(resumed), extra={"action": "jobs_resumed"})

    def on_task_change(self, change: TaskChange) -> None:
        """Hot-path listener: apply a create/update/pause/delete to the wheel before its instant."""
        if not self._fires(shard_of_task_id(change.task_id)):
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
        if app_id in self._disabled_apps:  # its fires wait in the store until it is enabled (reload)
            self.wheel.cancel(task_id)
            return
        existing = self.wheel.get(task_id)
        if existing is not None and existing.version > version:
            return
        fire_at_ms = scheduled_at_ms
        now_ms = self._clock.now_ms()
        if now_ms - scheduled_at_ms > self._threshold_ms and policy in _PACED:
            fire_at_ms = self._pacer.slot(app_id, now_ms)
        self.wheel.add(task_id, fire_at_ms, scheduled_at_ms, version)

    async def reload(self) -> None:
        """Load every shard this node fires up to the horizon again: an app enabled again has its
        tasks back in the wheel now (overdue ones fire under their misfire policy), not at the next
        cycle load. Offers never replace newer entries, so what the wheel holds is unchanged."""
        await self._load(sorted(self.firing_jobs()), self._horizon_ms)

    # ---- cycle loading -----------------------------------------------------------------------

    async def _cycle_loop(self) -> None:
        lead_ms = self._settings.load_lead_s * 1000
        while self._running:
            wake_at_ms = self._horizon_ms - lead_ms
            delay_ms = wake_at_ms - self._clock.now_ms()
            if delay_ms > 0:
                await self._nap(min(delay_ms, 1000) / 1000)
                continue
            # Raise the horizon first: hot-path changes for the new cycle go straight to the wheel
            # while the load runs, and the load's older versions never replace them.
            old_horizon_ms = self._horizon_ms
            new_horizon_ms = old_horizon_ms + self._cycle_ms
            self._horizon_ms = new_horizon_ms
            now_ms = self._clock.now_ms()
            self._pacer.forget_idle(now_ms)
            self._commit_failures = {i: n for i, n in self._commit_failures.items() if i.task_id in self.wheel}
            # With a complete hot tier (a node without a cluster: every write goes through it), read
            # the overdue tasks (before now_ms) and the new cycle [old horizon, new horizon), in one
            # statement per page, not [now_ms, old horizon): not due yet, and in the wheel already
            # (the previous cycle load, a take-over or resume load, each up to the old horizon, then
            # the hot tier). Should a change there still be missed, it is due before the next cycle
            # load starts (at old horizon + cycle - lead > old horizon: the settings refuse
            # load_lead_s >= cycle_s), which reads it as overdue: late, never lost; a stale entry
            # fires, is rejected and _reconcile offers the task as stored. A hot tier that can lose
            # changes (a cluster's) gets the full read: a change it lost waits at most for this load.
            # After a restart (start) or a late wake-up past the old horizon nothing can be skipped.
            # A retry after a failed load (below) skips the same span: the horizon is put back, and
            # what that span held is still in the wheel.
            skip: tuple[int, int] | None = None
            if self._skip_loaded_span and not self._full_cycle_load and now_ms < old_horizon_ms:
                skip = (now_ms, old_horizon_ms)
            # Spread over part of the lead (tjobs/firing/load_pace.py): a load read at once held the fires due meanwhile
            spread, expected = self._settings.load_spread, self._last_cycle_rows
            pace = LoadPace.for_cycle(now_ms, old_horizon_ms, spread, expected)
            try:
                self._last_cycle_rows = await self._load(sorted(self._owned - self._paused), new_horizon_ms, skip, pace)
            except Exception:
                logger.exception("cycle load failed; retrying shortly", extra={"action": "cycle_load_failed"})
                self._horizon_ms = old_horizon_ms
                await self._nap(1.0)
            else:
                self._full_cycle_load = False

    async def _nap(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when :meth:`stop` is called meanwhile."""
        try:
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
        except TimeoutError:
            pass

    async def _load(
        self, shards: Iterable[int], before_ms: int, skip: tuple[int, int] | None = None, pace: LoadPace | None = None
    ) -> int:
        """Load each shard's active tasks due before ``before_ms``, except those due in ``skip``
        (``[from, until)``, the cycle load's span already in the wheel; ``None``: read everything), its
        reads spread as ``pace`` says (``None``: as fast as the store answers); return how many.

        Each shard loads on its own task, so a shard paused meanwhile (its server stopped answering
        in the middle of the load) is cancelled by :meth:`set_paused` instead of holding up the load,
        and with it the next cycle's load of every other shard."""
        started_ms = self._clock.now_ms()
        shards = list(shards)
        loads = [asyncio.ensure_future(self._load_shard(shard, before_ms, skip, pace)) for shard in shards]
        for shard, load in zip(shards, loads, strict=True):
            self._loading.setdefault(shard, set()).add(load)
        try:
            results = await asyncio.gather(*loads, return_exceptions=True)
        finally:
            for shard, load in zip(shards, loads, strict=True):
                running = self._loading.get(shard)
                if running is not None:
                    running.discard(load)
                    if not running:
                        del self._loading[shard]
        counts: list[int] = []
        for shard, result in zip(shards, results, strict=True):
            if isinstance(result, BaseException):
                if shard in self._paused:
                    continue  # its server went away: reloaded when it answers again (set_paused)
                raise result
            counts.append(result)
        total = sum(counts)
        self.stats.loaded += total
        self.stats.last_load_ms = self._clock.now_ms() - started_ms
        logger.info(
            "loaded %d tasks due before %d%s in %d ms",
            total,
            before_ms,
            "" if skip is None else f" (not again those due in [{skip[0]}, {skip[1]}))",
            self.stats.last_load_ms,
            extra={"action": "cycle_loaded"},
        )
        return total

    async def _load_shard(self, shard: int, before_ms: int, skip: tuple[int, int] | None, pace: LoadPace | None) -> int:
        page_size = self._settings.load_page_size
        if pace is not None:
            page_size = min(page_size, PACED_PAGE_ROWS)
        loaded = 0
        after: tuple[int, int] | None = None
        async with self._load_slots:
            while self._fires(shard) and self._running:
                # One statement per page for both ranges: a second query per shard for the overdue
                # costs about what the re-read rows did (docs/benchmarks.md, issue 2).
                page = await self._store.load_due(shard, before_ms, page_size, after, skip=skip)
                await offer_in_chunks(page, self._offer_loaded)
                loaded += len(page)
                more = len(page) == page_size  # this shard's next page: due at its last instant or later
                if pace is not None:
                    next_due_ms = page[-1].next_run_at_ms if more else None  # None: another shard's (unknown)
                    if wait_ms := pace.wait_ms(len(page), next_due_ms, self._clock.now_ms()):
                        await self._nap(wait_ms / 1000)
                if not more:
                    break
                after = (page[-1].next_run_at_ms, page[-1].task_id)
        return loaded

    def _offer_loaded(self, due: DueTask) -> None:
        taken = self._in_flight.get(due.task_id)
        if taken is not None and taken.scheduled_at_ms == due.next_run_at_ms and taken.version == due.version:
            # That fire left the wheel and waits for its commit: offered again, it would be a second
            # transaction for the task, waiting on the first's row locks before its compare-and-set is
            # rejected. Its outcome puts the next run in the wheel.
            return
        self._offer(due.task_id, due.app_id, due.next_run_at_ms, due.version, due.misfire_policy)

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
                    self._queue(due)
            next_tick += tick_s
            delay = next_tick - loop.time()
            if delay < 0:  # fell behind (GC, a long callback): resynchronise instead of bursting
                next_tick = loop.time()
                delay = 0
            await asyncio.sleep(delay)

    def servers_changed(self) -> None:
        """The shard map moved a logical database: shards are looked up on their server again, what
        waits for a committer goes to its shard's server now, and what waits to retry a failed commit
        is retried now (invariant 9 holds after a move)."""
        self._servers.clear()
        self._one_server = len(self._store.database_servers()) == 1
        waiting = [entry for entries in self._pending.values() for entry in entries]
        self._pending.clear()
        if waiting:
            self._queue(waiting)
        # Intents waiting out a failed commit are due at once: most were refused by the database that
        # moved (StaleShardMap), and the new map routes them to where they commit. One that failed for
        # another reason fails again and waits its next delay, as before.
        now_ms = self._clock.now_ms()
        for intent in self._commit_failures:
            entry = self.wheel.get(intent.task_id)
            if entry is not None and entry.fire_at_ms > now_ms and entry.scheduled_at_ms == intent.scheduled_at_ms:
                self.wheel.add(entry.task_id, now_ms, entry.scheduled_at_ms, entry.version)

    def _server_of(self, task_id: int) -> str:
        shard = shard_of_task_id(task_id)
        server = self._servers.get(shard)
        if server is None:
            server = self._servers[shard] = self._store.server_of_shard(shard)
        return server

    def _queue(self, due: list[WheelEntry]) -> None:
        """Queue due entries per database server and wake that server's committers (started on first
        use: ``committers`` per server, so a server whose transactions stall holds only its own)."""
        by_server: dict[str, list[WheelEntry]] = {}
        if self._one_server:
            by_server[""] = due
        else:
            for entry in due:
                by_server.setdefault(self._server_of(entry.task_id), []).append(entry)
        for entry in due:
            self._in_flight[entry.task_id] = entry
        for server, entries in by_server.items():
            self._pending.setdefault(server, []).extend(entries)
            ready = self._committing.get(server)
            if ready is None:
                ready = self._committing[server] = asyncio.Event()
                for index in range(self._committers):
                    self._tasks.append(
                        asyncio.create_task(self._commit_loop(server, ready), name=f"tjobs-commit-{server}-{index}")
                    )
            ready.set()

    def _drop_pending(self, shards: frozenset[int]) -> None:
        for server, entries in list(self._pending.items()):
            self._pending[server] = [e for e in entries if shard_of_task_id(e.task_id) not in shards]
            self._settled([e for e in entries if shard_of_task_id(e.task_id) in shards])

    def _settled(self, entries: Iterable[WheelEntry]) -> None:
        """These entries are no longer waiting for a commit (committed, failed, rejected or dropped)."""
        for entry in entries:
            if self._in_flight.get(entry.task_id) is entry:
                del self._in_flight[entry.task_id]

    def _take_batch(self, server: str) -> list[WheelEntry]:
        """Up to ``fire_batch_max`` due entries of ``server``, oldest first; never another server's,
        so a batch never waits for a server it does not touch."""
        entries = self._pending.get(server)
        if not entries:
            return []
        batch = entries[: self._settings.fire_batch_max]
        del entries[: self._settings.fire_batch_max]
        return batch

    async def _commit_loop(self, server: str, ready: asyncio.Event) -> None:
        while self._running:
            await ready.wait()
            batch = self._take_batch(server)
            if not self._pending.get(server):
                ready.clear()
            if not batch:
                continue
            if self._paused:  # never commit for a paused shard (set_paused dropped what it could)
                self._settled(entry for entry in batch if shard_of_task_id(entry.task_id) in self._paused)
                batch = [entry for entry in batch if shard_of_task_id(entry.task_id) not in self._paused]
                if not batch:
                    continue
            await self._commit(batch)

    async def _commit(self, batch: list[WheelEntry]) -> None:
        intents = [FireIntent(e.task_id, e.scheduled_at_ms, e.version) for e in batch]
        now_ms = self._clock.now_ms()
        if not self._coordinator.may_fire(now_ms):
            self._settled(batch)
            return  # fenced: entries are dropped; the next owner loads them from the store
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            outcomes = await self._store.commit_fires(intents, now_ms, self._planner, self._may_commit)
        except Exception as error:  # every transaction of the batch failed: nothing was written
            outcomes = [FireOutcome(intent, None, [], error) for intent in intents]
        finally:
            self._settled(batch)
        self._log_failures(outcomes)
        if not all(outcome.failed for outcome in outcomes):
            self.stats.commit_batches += 1
            self._observer.fires_committed(outcomes, now_ms, loop.time() - started)
        rejected: list[tuple[FireIntent, int | None]] = []
        for entry, outcome in zip(batch, outcomes, strict=True):
            if outcome.failed:
                self._retry_later(entry, outcome.intent, now_ms)
            elif outcome.task is None:
                rejected.append((outcome.intent, self._after_rejection(outcome)))
            else:
                self._after_commit(outcome)
        for intent, failed_at_ms in rejected:
            await self._reconcile(intent, failed_at_ms)

    def _log_failures(self, outcomes: list[FireOutcome]) -> None:
        """Count and log each failed transaction (its intents share one error) once."""
        failed: dict[int, tuple[Exception, int]] = {}
        for outcome in outcomes:
            if outcome.error is not None:
                _, count = failed.get(id(outcome.error), (outcome.error, 0))
                failed[id(outcome.error)] = (outcome.error, count + 1)
        for error, count in failed.values():
            if isinstance(error, Fenced):
                # Stopped inside the transaction while the fence closed: rolled back, nothing written.
                self.stats.commit_fenced += 1
                logger.warning(
                    "fire transaction of %d intents rolled back: this node is fenced",
                    count,
                    extra={"action": "fire_commit_fenced"},
                )
            else:
                self.stats.commit_errors += 1
                logger.warning(
                    "fire transaction of %d intents failed (%s); retrying them",
                    count,
                    error,
                    extra={"action": "fire_commit_failed"},
                )

    def _retry_later(self, entry: WheelEntry, intent: FireIntent, attempt_ms: int) -> None:
        """Put a failed intent back in the wheel, alone, after a delay that doubles per failure.

        Nothing of it was written (or, after a connection lost during COMMIT, it committed and its
        retry is rejected: see :meth:`_reconcile`). The tick loop yields it only while this node may
        fire; a released job's entries leave the wheel with it.
        """
        failures = self._commit_failures.get(intent, (0, 0))[0] + 1
        if self.wheel.get(entry.task_id) is not None or not self._fires(shard_of_task_id(entry.task_id)):
            self._commit_failures.pop(intent, None)  # a newer entry took its place, or the job left
            return
        self._commit_failures[intent] = (failures, attempt_ms)
        delay_ms = min(COMMIT_RETRY_FIRST_MS * 2 ** min(failures - 1, 16), COMMIT_RETRY_MAX_MS)
        self.stats.commit_retries += 1
        self.wheel.add(entry.task_id, self._clock.now_ms() + delay_ms, entry.scheduled_at_ms, entry.version)

    async def _reconcile(self, intent: FireIntent, failed_at_ms: int | None) -> None:
        """An intent was rejected: the task changed meanwhile (an edit, or another node fired the
        instant first while ownership moved), or, for a retried intent (``failed_at_ms``: its last
        failed attempt's ``now_ms``), the failed attempt did commit (a connection lost while the
        server committed: the retry that follows such an attempt is the one rejected). Offer the task
        as the store holds it now, so its next instant does not wait for the next cycle load; and if
        the instant's flow is that failed attempt's own (created at its ``now_ms``) and not finished,
        deliver it now rather than after the compensator's grace."""
        if not self._fires(shard_of_task_id(intent.task_id)):
            return  # the job left: its next owner loads the task
        try:
            task = await self._store.get_task(intent.task_id)
            flow = (
                await self._store.get_flow(intent.task_id, flow_instant(task, intent.scheduled_at_ms))
                if task is not None and failed_at_ms is not None
                else None
            )
        except Exception as error:
            logger.warning(
                "could not re-read task %d after a rejected fire (%s); the next load offers it",
                intent.task_id,
                error,
                extra={"action": "fire_reconcile_failed"},
            )
            return
        self.stats.reconciled += 1
        if task is None:
            return
        if flow is not None and flow.created_at_ms == failed_at_ms and flow.status.deliverable:
            logger.info(
                "flow %s committed although its fire transaction failed; delivering it",
                flow.id,
                extra={"action": "fire_commit_found", "flow_id": flow.id},
            )
            self.stats.flows_sent += 1
            self._flow_sink(task, flow)
        self._offer_next_run(task)

    def _offer_next_run(self, task: Task) -> None:
        """Put the task's next run in the wheel when it is due within this cycle on a shard we fire."""
        if (
            task.status is TaskStatus.ACTIVE
            and task.next_run_at_ms is not None
            and task.next_run_at_ms < self._horizon_ms
            and self._fires(shard_of_task_id(task.id))
        ):
            self._offer(task.id, task.app_id, task.next_run_at_ms, task.version, task.misfire_policy)

    def _may_commit(self) -> bool:
        return self._coordinator.may_fire(self._clock.now_ms())

    def _after_rejection(self, outcome: FireOutcome) -> int | None:
        """Count a rejected intent; the ``now_ms`` of its last failed attempt when it had failed before."""
        failures = self._commit_failures.pop(outcome.intent, None)
        self.stats.cas_rejected += 1
        return None if failures is None else failures[1]

    def _after_commit(self, outcome: FireOutcome) -> None:
        """Deliver a committed fire's flows and offer its next run."""
        self._commit_failures.pop(outcome.intent, None)
        task = outcome.task
        assert task is not None
        self.stats.fires_committed += 1
        newest = self.stats.newest_committed_instant_ms
        if newest is None or outcome.intent.scheduled_at_ms > newest:
            self.stats.newest_committed_instant_ms = outcome.intent.scheduled_at_ms
        for flow in outcome.flows:
            if flow.status in (FlowStatus.PENDING, FlowStatus.SENDING):
                self.stats.flows_sent += 1
                self._flow_sink(task, flow)
            else:
                self.stats.flows_skipped += 1
            if flow.kind is FlowKind.MISFIRE:
                key = task.misfire_policy.value
                self.stats.misfires[key] = self.stats.misfires.get(key, 0) + 1
        self._offer_next_run(task)
