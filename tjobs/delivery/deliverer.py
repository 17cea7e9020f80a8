"""The delivery loop: committed fires in, signed callbacks out, flow outcomes recorded in batches.

Life of a flow handed to :meth:`Deliverer.deliver` (always after its fire transaction committed):

0. Its app comes from the app directory: cached, or read once for every flow waiting on it (a flow whose app cannot be
   read now stays ``pending`` in the store, and the compensator re-drives it; :mod:`tjobs.delivery.lookup`).
1. It joins its app's queue (a first attempt past what the queue keeps in memory waits in the store instead:
   :mod:`tjobs.delivery.spill`). Up to the app's ``max_concurrency`` workers drain that queue, each attempt holding an
   :class:`AppLimiter` slot, so a slow or throttled app only ever waits on itself.
2. An attempt sends to every target not yet delivered (one target for unicast), signed afresh.
3. All targets ``2xx`` → ``delivered``. A permanent failure (see :mod:`tjobs.delivery.retry`), an at-most-once flow's
   single attempt failing, ``max_attempts`` reached, or a next attempt that would fall after
   ``scheduled_at + max_age_s`` → ``dead`` (the dead letter). Otherwise the flow is recorded ``pending`` with
   ``next_attempt_at_ms`` = the retry time, and waits in memory (an asyncio timer) until then: ``Retry-After`` when a
   ``429``/``503`` gave one, else exponential backoff with full jitter. A multicast flow's retries go only to the
   targets that have not answered ``2xx`` yet (tracked in memory; a re-drive after a crash sends to all of them
   again). Retries far ahead, or too many at once, are left to the compensator (see ``__init__``).

**Named targets** (``callback.targets``): read before the first attempt and again before every attempt, each with its
own retry budget and timeout (:mod:`tjobs.delivery.lookup`).

The first attempt of a flow is always made, however late (lateness is the misfire policy's business); ``max_age_s`` only
bounds retries, and a re-driven flow that is already past it dies unsent.

Outcomes are coalesced per flow and written by one background flusher at most every ``flush_interval_s`` (or as soon as
``flush_batch`` are pending; :mod:`tjobs.delivery.outcomes`). A failed write keeps its updates and is retried; meanwhile
those flows count as in flight, so the compensator leaves them alone. If the node dies first, the database still says
``pending`` (or ``sending``) and the compensator re-drives (or closes) the flow: at least once, never lost.

At-most-once flows arrive ``sending`` with ``attempts=1`` (written by the fire transaction) and get exactly one attempt.
One that arrives ``pending`` (a manual trigger) is first recorded ``sending``, synchronously, and only then sent.

Before every attempt the node's ``fence`` is asked: once the node's lease has expired nothing more is sent
(:mod:`tjobs.delivery.fenced_flows`). Shards handed over by a healthy node (:meth:`Deliverer.forget_runs`, before their
group is released) have their flows here let go, queued, waiting or under way (no retry); a retry waits for the outcome
of the attempt before it to be written (:mod:`tjobs.delivery.outcomes`): the new owner's lease covers one attempt. A
flow let go unsent, there or at a stop, is handed back to its shard's owner, due at once or at its retry time
(:mod:`tjobs.delivery.hand_back`). A flow of a shard not this node's when it came (what the API commits) is retried, or
recorded ``sending``, only while the owner cannot lease it (:mod:`tjobs.delivery.foreign_flows`). Before a retry, or an
attempt that waited long in its app's queue (:data:`tjobs.delivery.lanes.LONG_WAIT_MS`, else the fire path pays no read)
the stored flow is read: one ``cancelled`` meanwhile (its task deleted, on any node) or ended elsewhere is not sent.

Attempt numbers (``tjobs-attempt``) grow with every send: retries count on from the recorded ``attempts``, a re-drive
from the attempt a crash may have lost (:mod:`tjobs.firing.compensator`). In memory: :mod:`tjobs.delivery.in_flight`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any

from sharding import shard_of_task_id
from tjobs.clock import Clock
from tjobs.delivery.child_triggers import with_children
from tjobs.delivery.fenced_flows import FencedFlows
from tjobs.delivery.foreign_flows import ForeignFlows
from tjobs.delivery.hand_back import HandBack
from tjobs.delivery.in_flight import Delivery, let_go, missing_target, retry_may_go, target_timeout_ms, unusable
from tjobs.delivery.lanes import KEEP_MIN, Lanes
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.lookup import AppSource, CallbackJob, JobLookup, TargetSource
from tjobs.delivery.outcomes import FLUSH_BATCH, FLUSH_INTERVAL_S, FlowReader, FlowRecorder, OutcomeWriter, rescheduled
from tjobs.delivery.pool_dispatcher import PoolDispatcher
from tjobs.delivery.retry import compute_backoff_ms
from tjobs.delivery.run_start import starts_run
from tjobs.delivery.run_watch import RUN_WATCH_S, RunReader, RunWatch
from tjobs.delivery.spill import Spill
from tjobs.delivery.transport import AttemptResult, Outcome, Transport
from tjobs.hot_tier.base import TaskChange
from tjobs.model import Flow, FlowRun, FlowStatus, FlowUpdate, RunStatus, Task
from tjobs.observability.observer import NO_OBSERVER, FireObserver
from tjobs.pools.overlap import OverlapGate, Verdict
from tjobs.settings import CallbackSettings
from tjobs.specs import FixedDelaySpec
from tjobs.specs.pool import Overlap
from tjobs.targets.model import TARGET_KEY_PREFIX

__all__ = ["AppSource", "CallbackJob", "Deliverer", "FlowReader", "FlowRecorder", "TargetSource"]

logger = logging.getLogger(__name__)

RETRY_HORIZON_S = 600.0
MAX_WAITING_RETRIES = 50_000


class Deliverer:
    """Delivers committed fires (see the module docstring); one per node, on the node's event loop."""

    def __init__(
        self,
        recorder: FlowRecorder,
        transport: Transport,
        limiter: AppLimiter,
        settings: CallbackSettings,
        clock: Clock,
        rng: random.Random | None = None,
        *,
        apps: AppSource | None = None,
        observer: FireObserver = NO_OBSERVER,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        flush_batch: int = FLUSH_BATCH,
        retry_horizon_s: float = RETRY_HORIZON_S,
        max_waiting_retries: int = MAX_WAITING_RETRIES,
        fence: Callable[[int], bool] | None = None,
        status_reader: FlowReader | None = None,
        targets: TargetSource | None = None,
        pools: PoolDispatcher | None = None,
        task_changes: Callable[[TaskChange], Awaitable[None]] | None = None,
        run_timeout_ms: int = 86_400_000,
        ended: Callable[[FlowUpdate], Awaitable[None]] | None = None,
        run_watch_s: float = RUN_WATCH_S,
        run_reader: RunReader | None = None,
        foreign: ForeignFlows | None = None,
        hand_back_ms: int | None = None,
        keep_in_memory: int = KEEP_MIN,
    ) -> None:
        """``apps`` resolves the app of each flow handed to :meth:`deliver` (without it, only :meth:`submit` with the
        app known). ``observer`` sees every attempt to every target and every outcome recorded (``pending`` with a
        retry time, ``delivered``, ``dead``).

        Memory stays bounded when a receiver is down: a retry due over ``retry_horizon_s`` ahead, or beyond
        ``max_waiting_retries`` waiting, is only recorded ``pending`` at its retry time: the compensator re-drives it.

        ``fence(now_ms)`` is ``False`` while this node may not send (its lease expired: the coordinator's ``may_fire``),
        and a flow it lets go unsent is written back due ``hand_back_ms`` early (:mod:`tjobs.delivery.hand_back`;
        without it, left as stored); ``status_reader`` reads a flow's stored status before a retry. Without them,
        neither check is made. ``targets`` resolves the named targets of a task that names them (without it, such a flow
        dead-letters as unusable). ``pools`` routes the flows of a task naming an executor pool (without it, such a flow
        dead-letters). ``task_changes`` (the hot tier's publish) is told a fixed_delay task's next run once its flow's
        final outcome set it. ``run_timeout_ms`` bounds a run (:mod:`tjobs.delivery.run_start`) whose task sets no
        ``callback.run_timeout_ms``; a run of a pool flow whose task must not overlap itself holds the task's overlap
        gate until the run ends, read from ``status_reader`` every ``run_watch_s`` (:mod:`tjobs.delivery.run_watch`);
        ``run_reader`` reads a shard's live runs for :meth:`learn_runs`. ``ended`` is told each written ending that
        triggers child tasks (:mod:`tjobs.service.child_flows`). ``foreign`` bounds the retries of flows of shards this
        node does not own (without it, every flow is retried as its owner's). An app's queue keeps at least
        ``keep_in_memory`` deliveries in memory; first attempts past what it keeps are spilled (:mod:`.spill`)."""
        self._recorder = recorder
        self._transport = transport
        self._limiter = limiter
        self._settings = settings
        self._run_timeout_ms = run_timeout_ms
        self._clock = clock
        self._rng = rng or random.Random()
        self._lookup = JobLookup(apps, targets)
        self._observer = observer
        self._app_lookups: set[asyncio.Task[None]] = set()
        self._outcomes = OutcomeWriter(recorder, clock, flush_interval_s, flush_batch, task_changes, ended)
        self._retry_horizon_ms = int(retry_horizon_s * 1000)
        self._max_waiting_retries = max_waiting_retries
        self._fence = fence
        self._status_reader = status_reader
        self._foreign = foreign
        self._pools = pools
        self._overlap: OverlapGate[Delivery] = OverlapGate()
        self._runs = None if status_reader is None else RunWatch(status_reader, run_watch_s, self._resume, run_reader)
        self._waiting_retries = 0
        self._active: dict[str, Delivery] = {}
        self.lanes = Lanes(limiter, self._attempt, self._failed, lambda: self._running, keep_in_memory)  # per app
        self._running = False
        self.handed_over = 0  # flows let go: their shards went to another node
        self._hand_back = HandBack(clock, self._outcomes, hand_back_ms)
        self.spill = Spill(self.lanes, self._hand_back)  # first attempts held in the store, past an app's queue
        self.fenced_flows = FencedFlows(clock, self._hand_back)  # what the fence kept from being sent
        self.cancelled = 0

    @property
    def handed_back(self) -> int:
        """Flows let go unsent and written back due for their owner (:mod:`tjobs.delivery.hand_back`)."""
        return self._hand_back.flows

    @property
    def flush_calls(self) -> int:
        """Outcome writes made (:class:`tjobs.delivery.outcomes.OutcomeWriter`)."""
        return self._outcomes.flush_calls

    @property
    def flush_failures(self) -> int:
        """Outcome writes that failed (and were kept for the next flush)."""
        return self._outcomes.flush_failures

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._running = True
        self._outcomes.start()

    async def stop(self, drain_timeout_s: float) -> None:
        """Finish the attempts under way (up to ``drain_timeout_s``), then write every pending outcome. Flows waiting
        for a retry or still queued are handed back (:mod:`tjobs.delivery.hand_back`); stored ``pending`` anyway."""
        self._running = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout_s
        for lookup in list(self._app_lookups):  # their flows are still pending in the store
            lookup.cancel()
        await asyncio.gather(*self._app_lookups, return_exceptions=True)
        for delivery in list(self._active.values()):
            if delivery.timer is not None:
                delivery.timer.cancel()
                delivery.timer = None
                self._waiting_retries -= 1
        await self.lanes.drain(drain_timeout_s)
        self._hand_back_unsent(list(self._active.values()))
        self.spill.let_go()
        self.lanes.clear()
        self._active.clear()
        if self._runs is not None:
            await self._runs.stop()
        self.fenced_flows.close()
        await self._outcomes.stop(deadline)

    # ---- a change of owner (tjobs.delivery.run_watch) --------------------------------------------

    async def learn_runs(self, shards: Sequence[int]) -> None:
        """Before anything of ``shards`` (taken over) fires here: their live runs that another node started hold
        their tasks' overlap gates here too, and a fire queued behind one waits here. Raises if the store can't say."""
        if self._runs is None:
            return
        held, parked = await self._runs.learn(shards)
        for task_id, flow_id in held:
            self._overlap.hold(task_id, flow_id)
        for task, flow in parked if self._lookup.apps is not None else ():
            # its app read now, so it waits here before any later fire of its task is judged
            job = self._lookup.cached(task, flow) or await self._lookup.read(task, flow)
            if job is not None:
                self.submit(job)

    def forget_runs(self, shards: frozenset[int]) -> None:
        """``shards`` are another node's now: their flows here are let go unsent (queued, waiting for a retry,
        under way: no retry), for the new owner's compensator; their runs hold no gate here, and a fire queued
        here behind one is let go as stored (parked at the run's deadline, where the new owner finds it)."""
        gone, timers = let_go(self._active, shards)
        self._waiting_retries -= timers
        self.handed_over += len(gone) + self.spill.let_go(shards)
        self._hand_back_unsent(gone)
        self.lanes.drop_lost()
        if self._runs is None:
            return

        def lost(task_id: int) -> bool:
            return shard_of_task_id(task_id) in shards

        self._runs.forget(lost)
        for waiter in self._overlap.forget(lost):
            self._active.pop(waiter.flow_id, None)

    def _hand_back_unsent(self, deliveries: list[Delivery]) -> None:
        """Hand back those of ``deliveries`` that wait in a queue or for a retry: nothing of them is sent from here.
        One taken from its queue, not sent yet, is handed back at its attempt (:meth:`_attempt`)."""
        for delivery in deliveries:
            if delivery.retry_at_ms is not None:
                self._hand_back.waiting(delivery)
            elif delivery.turn >= 0:  # in its queue
                self._hand_back.unsent(delivery)

    # ---- intake -------------------------------------------------------------------------------

    def deliver(self, task: Task, flow: Flow) -> None:
        """Deliver a committed flow (the runner's, the compensator's and the API's flow sink); never
        blocks. The app comes from the directory's cache, or from one shared read when it is cold."""
        job = self._lookup.cached(task, flow)
        if job is not None:
            self.submit(job)
            return
        self._read_first(self._deliver_after_lookup(task, flow))

    def _read_first(self, reading: Coroutine[Any, Any, None]) -> None:
        """Run a read that comes before a flow's delivery (cancelled by :meth:`stop`: the flow stays open)."""
        lookup = asyncio.get_running_loop().create_task(reading)
        self._app_lookups.add(lookup)
        lookup.add_done_callback(self._app_lookups.discard)

    async def _deliver_after_lookup(self, task: Task, flow: Flow) -> None:
        job = await self._lookup.read(task, flow)
        if job is not None:
            self.submit(job)

    def submit(self, job: CallbackJob) -> None:
        """Queue a committed fire whose app is known; never blocks. Duplicates of a flow in flight are ignored."""
        flow_id = job.flow.id
        if flow_id in self._active or flow_id in self.spill:
            return
        if not self._running or not job.flow.status.deliverable:
            why = f"already {job.flow.status.value}" if self._running else "stopped: left to the compensator"
            logger.warning(
                "flow %s not delivered (%s)", flow_id, why, extra={"action": "delivery_refused", "flow_id": flow_id}
            )
            return
        try:
            delivery = Delivery(job, flow_id, self._settings)
        except Exception as error:
            # A stored callback spec we cannot read can never be delivered: dead letter, loudly.
            logger.exception(
                "flow %s has an unusable callback spec", flow_id, extra={"action": "flow_dead", "flow_id": flow_id}
            )
            self._outcomes.put(flow_id, unusable(job.flow, error))
            return
        self._active[flow_id] = delivery
        delivery.window = None if self._foreign is None else self._foreign.window(job.flow)
        if self._runs is not None:
            self._runs.discard(flow_id)  # a retry of a run that ended here: delivery holds its gate again
        spent = delivery.spent(self._clock.now_ms()) if job.flow.attempts > 0 else None  # a re-drive's limits
        if spent is not None:
            self._finish(delivery, FlowStatus.DEAD, delivery.attempt - 1, spent)
            return
        if delivery.pool is not None and delivery.pool.route.overlap is not Overlap.ALLOW:
            if self._runs is not None and not self._overlap.skips(
                job.task.id, flow_id, delivery.pool.route.overlap, self._holds_gate
            ):
                self._read_first(self._judge(delivery))  # the task's runs on other nodes too (tjobs.delivery.run_watch)
                return
            if not self._admit(delivery):
                return
        if not self.spill.spills(delivery, self._active):  # else past what its app's queue keeps: in the store
            self.lanes.add(delivery)

    async def _judge(self, delivery: Delivery) -> None:
        """Admit a fire its gate here would let go (or queue) once the task's runs in the store hold the gate
        too: those another node started or awaits the retry of, and a fire another node queued behind one."""
        assert self._runs is not None
        task_id = delivery.job.task.id
        try:
            held, queued = await self._runs.judge(delivery.job.task, delivery.flow_id, self._active.__contains__)
        except Exception:
            self._leave_to_compensator(
                delivery, "could not read the runs of flow %s's task; the compensator re-drives it"
            )
            return
        if self._active.get(delivery.flow_id) is delivery and self._running:
            for flow_id in held:
                self._overlap.hold(task_id, flow_id)
            if self._admit(delivery, queued):
                self.lanes.add(delivery)

    def _admit(self, delivery: Delivery, queued_elsewhere: bool = False) -> bool:
        """A pool flow whose task must not overlap itself (:mod:`tjobs.pools.overlap`): whether it goes now; otherwise
        it is skipped, or waits for the task's running flow to end (skipped where another node queued its fire)."""
        assert delivery.pool is not None
        task_id = delivery.job.task.id
        policy = Overlap.SKIP_IF_RUNNING if queued_elsewhere else delivery.pool.route.overlap
        verdict, running = self._overlap.admit(task_id, delivery.flow_id, policy, delivery, self._holds_gate)
        if verdict is Verdict.SKIP:
            delivery.last_status, delivery.last_error = None, f"skipped: flow {running} of the task is still running"
            self._finish(delivery, FlowStatus.SKIPPED, delivery.attempt - 1, None)
        if verdict is Verdict.WAIT and self._runs is not None and not delivery.at_most_once:
            park_ms = self._runs.deadline_of(running)
            if park_ms is not None:  # behind a run: parked till its deadline (tjobs.delivery.run_watch), no outcome
                self._outcomes.put(delivery.flow_id, delivery.update(FlowStatus.PENDING, delivery.attempt - 1, park_ms))
                if delivery.window is not None:  # a foreign one's window follows its stored next attempt, as a retry's
                    delivery.window.retry_at(park_ms)
                    self._outcomes.when_written(delivery.flow_id, lambda: self._in_window(delivery))
        return verdict is Verdict.GO

    def _holds_gate(self, flow_id: str) -> bool:
        """Whether a flow still runs for the overlap gate: in delivery here, or a live run sent from here."""
        return flow_id in self._active or (self._runs is not None and flow_id in self._runs)

    def in_flight(self) -> set[str]:
        """Flow ids queued, being sent, waiting for a retry, or with an outcome not yet written."""
        return set(self._active).union(self.spill, self._outcomes.pending, self._outcomes.flushing)

    def is_in_flight(self, flow_id: str) -> bool:
        """Whether ``flow_id`` is in :meth:`in_flight`, without copying it (28 ms at 170,000 flows in flight)."""
        return flow_id in self._active or flow_id in self.spill or self._outcomes.unwritten(flow_id)

    def wait_ms(self, flow_id: str) -> float:
        """How long until a flow held here is taken for its attempt, or taken back (:mod:`.spill`); 0 unless queued."""
        spilled = self.spill.wait_ms(flow_id)
        return self.lanes.wait_ms(self._active.get(flow_id)) if spilled is None else spilled

    def in_flight_count(self) -> int:
        """``len(in_flight())`` without building the set (a flow may be counted twice)."""
        return len(self._active) + len(self.spill) + len(self._outcomes.pending) + len(self._outcomes.flushing)

    @property
    def backlog(self) -> int:
        """Deliveries waiting in app queues for a slot."""
        return self.lanes.backlog

    def _retry_due(self, delivery: Delivery) -> None:
        delivery.timer = None
        self._waiting_retries -= 1
        if not self._running or delivery.lost:
            return
        if self._outcomes.unwritten(delivery.flow_id):  # the previous attempt's outcome first (module docstring)
            self._outcomes.when_written(delivery.flow_id, lambda: self._retry_written(delivery))
            return
        self.lanes.add(delivery)

    def _retry_written(self, delivery: Delivery) -> None:
        if self._running and self._active.get(delivery.flow_id) is delivery and self._in_window(delivery):
            self.lanes.add(delivery)

    def _in_window(self, delivery: Delivery) -> bool:  # a flow of another node's shard (foreign_flows)
        return retry_may_go(self._active, delivery, self._clock.now_ms(), self._release)

    # ---- attempts -----------------------------------------------------------------------------

    def _failed(self, delivery: Delivery) -> None:  # an attempt raised: a bug, not a receiver failure
        self._leave_to_compensator(delivery, "delivery of flow %s failed", "delivery_failed")

    async def _attempt(self, delivery: Delivery) -> None:
        if self._fence is not None and not self._fence(self._clock.now_ms()):
            self._active.pop(delivery.flow_id, None)
            self.fenced_flows.drop(delivery)
            return
        if delivery.recheck and self._status_reader is not None and not await self._still_open(delivery):
            return
        now_ms = self._clock.now_ms()
        attempt = delivery.attempt
        if delivery.record_sending:
            if delivery.lost:  # handed over
                self._hand_back.unsent(delivery)
                return
            if not self._in_window(delivery):  # a foreign one taken late: left pending (its owner may have leased it)
                return
            sending = delivery.update(FlowStatus.SENDING, attempt, now_ms)
            try:
                await self._recorder.record_flow_updates([sending], now_ms)
            except Exception:
                self._leave_to_compensator(delivery, "could not record at-most-once flow %s as sending; not sending it")
                return
            delivery.record_sending = False
            if not self._in_window(delivery):  # written late: its owner may have leased and sent it first
                return
        elif delivery.window is not None and delivery.window.safe_ms > 0 and not self._in_window(delivery):
            return  # a foreign one queued here until its owner may have leased it: the owner's (foreign_flows)
        if delivery.lost:  # its shard handed over while waiting for its slot, or during the read above
            self._hand_back.unsent(delivery)
            return
        try:
            message = delivery.message  # built at its first attempt (tjobs.delivery.in_flight)
        except Exception as error:  # a stored callback spec it cannot be built from: a dead letter, as at submit
            self._finish(delivery, FlowStatus.DEAD, attempt - 1, unusable(delivery.job.flow, error).last_error)
            return
        try:
            headers, body = message.signed(attempt, now_ms)
        except ValueError as error:
            delivery.last_status, delivery.last_error = None, f"cannot sign: {error}"
            self._finish(delivery, FlowStatus.DEAD, attempt, None)
            return
        targets = delivery.targets
        if delivery.named is not None:
            await self._attempt_targets(delivery, attempt, headers, body, now_ms)
            return
        if delivery.pool is not None:
            await self._attempt_pool(delivery, attempt, headers, body, now_ms)
            return
        if len(targets) == 1:
            results = [await self._transport.send(message.request(targets[0], attempt, headers, body))]
        else:
            results = await asyncio.gather(
                *(self._transport.send(message.request(url, attempt, headers, body)) for url in targets)
            )
        self._settle(delivery, results)

    async def _attempt_targets(
        self, delivery: Delivery, attempt: int, headers: dict[str, str], body: bytes | None, now_ms: int
    ) -> None:
        """One attempt to the named targets not delivered yet, each as read now (a change made since
        the last attempt applies); a target gone is a permanent failure naming it."""
        named = delivery.named
        assert named is not None
        pending = [key[len(TARGET_KEY_PREFIX) :] for key in delivery.targets]
        await self._lookup.refresh_targets(delivery.job.app.id, pending, named)
        if delivery.lost:  # its shard handed over during the read
            self._hand_back.unsent(delivery)
            return
        delivery.budget(self._settings)
        explicit_timeout_ms = delivery.job.task.callback.timeout_ms
        sends: list[Awaitable[AttemptResult]] = []
        protocols: list[str] = []
        for name in pending:
            target = named.get(name)
            if target is None:
                sends.append(missing_target(delivery.flow_id, name, attempt, now_ms))
                protocols.append("unknown")
                continue
            timeout_ms = explicit_timeout_ms or target_timeout_ms(target) or self._settings.timeout_ms
            request = delivery.message.target_request(target, attempt, headers, body, timeout_ms)
            sends.append(self._transport.send(request))
            protocols.append(target.protocol.value)
        results = [await sends[0]] if len(sends) == 1 else await asyncio.gather(*sends)
        self._settle(delivery, results, protocols)

    async def _attempt_pool(
        self, delivery: Delivery, attempt: int, headers: dict[str, str], body: bytes | None, now_ms: int
    ) -> None:
        """One attempt to the pool destinations not delivered yet (:mod:`tjobs.delivery.pool_dispatcher`). An attempt
        that found no executor to send to sent nothing: the flow waits for executors per its retry policy without
        spending an attempt, and dies only past ``max_age_s`` (an at-most-once flow, whose single attempt is
        recorded already, dies at once)."""
        pool = delivery.pool
        assert pool is not None
        if self._pools is None:
            delivery.last_status, delivery.last_error = None, "no executor pools on this node"
            self._finish(delivery, FlowStatus.DEAD, attempt, None)
            return
        sent = await self._pools.attempt(pool, delivery.targets, delivery.message, attempt, headers, body, now_ms)
        delivery.targets = sent.destinations
        if sent.dropped:
            delivery.last_error = f"dropped (left the pool): {', '.join(sent.dropped)}"[:240]
        if sent.results:
            self._settle(delivery, sent.results)
        elif not delivery.targets:  # every destination left the pool before it answered
            status = FlowStatus.DELIVERED if pool.delivered else FlowStatus.DEAD
            self._finish(delivery, status, attempt - 1, None if pool.delivered else "every executor left the pool")
        elif delivery.at_most_once:
            delivery.last_status, delivery.last_error = None, sent.nothing_sent
            self._finish(delivery, FlowStatus.DEAD, attempt, None)
        else:  # retried after the backoff of its pool.waits-th wait: pending with the attempts made, not one more
            delivery.last_status, delivery.last_error = None, sent.nothing_sent or "no executor"
            delay_ms = compute_backoff_ms(pool.waits, delivery.backoff_base_ms, delivery.backoff_max_ms, self._rng)
            self._retry_later(delivery, attempt - 1, delay_ms)

    def _retry_later(self, delivery: Delivery, attempts: int, delay_ms: int) -> bool:
        """Record the flow ``pending`` with ``attempts`` made, due ``delay_ms`` from now, and send it again then (on
        a timer when the wait is short enough, else the compensator re-drives it when due); or, when that is past
        its ``max_age_s``, record it dead and answer ``False``."""
        due_ms = self._clock.now_ms() + delay_ms
        if due_ms > delivery.deadline_ms:
            self._finish(delivery, FlowStatus.DEAD, attempts, "max_age_s exceeded")
            return False
        if delivery.lost or not self._running:  # let go while under way: handed back, due at its retry time
            self._record(delivery, delivery.update(FlowStatus.PENDING, attempts, self._hand_back.retry_at(due_ms)))
            if self._active.get(delivery.flow_id) is delivery:
                del self._active[delivery.flow_id]
            return True
        self._record(delivery, delivery.update(FlowStatus.PENDING, attempts, due_ms))
        delivery.recheck = True
        if delay_ms <= self._retry_horizon_ms and self._waiting_retries < self._max_waiting_retries:
            self._waiting_retries += 1
            delivery.retry_at_ms = due_ms
            delivery.timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._retry_due, delivery)
            if delivery.window is not None:  # told once the outcome is written (or _retry_written is, if due first)
                delivery.window.retry_at(due_ms)
                self._outcomes.when_written(delivery.flow_id, lambda: self._in_window(delivery))
        else:
            self._active.pop(delivery.flow_id, None)  # the compensator re-drives it when due
        return True

    async def _still_open(self, delivery: Delivery) -> bool:
        """Whether a retry (or a long-queued attempt) may be sent: its flow is still open in the store (read it)."""
        assert self._status_reader is not None
        job = delivery.job
        try:
            stored = await self._status_reader.get_flow(job.flow.task_id, job.flow.scheduled_at_ms)
        except Exception:
            self._leave_to_compensator(delivery, "could not read flow %s before its retry; left to the compensator")
            return False
        if stored is not None and stored.status.deliverable:
            return True
        self.cancelled += 1
        self._release(delivery)  # ended elsewhere: a fire of its task waiting behind it goes
        logger.info(
            "flow %s is %s; its next attempt is not sent",
            delivery.flow_id,
            "gone" if stored is None else stored.status.value,
            extra={"action": "retry_dropped", "flow_id": delivery.flow_id},
        )
        return False

    def _settle(
        self, delivery: Delivery, results: Sequence[AttemptResult], protocols: Sequence[str] | None = None
    ) -> None:
        attempt = delivery.attempt
        remaining: list[str] = []
        permanent = False
        retry_after_ms = 0
        backoff = False
        delivered_status: int | None = None
        multicast = len(results) > 1
        observer, app_id = self._observer, delivery.job.task.app_id
        scheduled_at_ms = delivery.job.flow.scheduled_at_ms
        delivery.log_attempts(results)
        for index, result in enumerate(results):
            try:
                observer.attempt(app_id, result, "http" if protocols is None else protocols[index])
                if result.attempt == 1:
                    sent_ms = result.started_ms if result.sent_ms is None else result.sent_ms
                    observer.first_attempt(
                        app_id,
                        max(sent_ms - scheduled_at_ms, 0) / 1000,
                        max(result.answered_ms - scheduled_at_ms, 0) / 1000,
                    )
            except Exception:
                logger.exception("observer failed", extra={"action": "hook_failed", "flow_id": result.flow_id})
            if result.outcome is Outcome.DELIVERED:
                delivered_status = result.status
                continue
            remaining.append(result.url)
            delivery.last_status = result.status
            delivery.last_error = f"{result.url}: {result.error}" if multicast else result.error
            if result.outcome is Outcome.PERMANENT:
                permanent = True
            elif result.retry_after_ms is not None:
                retry_after_ms = max(retry_after_ms, result.retry_after_ms)
            else:
                backoff = True
        delivery.targets = remaining
        if not remaining:
            delivery.last_status, delivery.last_error = delivered_status, None
            protocol = None if protocols is None else protocols[0]
            if len(results) == 1 and starts_run(results[0], delivery.job.task.callback, protocol):
                self._start_run(delivery, results[0])
                return
            self._finish(delivery, FlowStatus.DELIVERED, attempt, None)
            return
        if permanent:
            self._finish(delivery, FlowStatus.DEAD, attempt, "permanent failure")
            return
        if attempt >= delivery.max_attempts:
            self._finish(delivery, FlowStatus.DEAD, attempt, f"gave up after {attempt} attempts")
            return
        delay_ms = retry_after_ms
        if backoff:
            backoff_ms = compute_backoff_ms(attempt, delivery.backoff_base_ms, delivery.backoff_max_ms, self._rng)
            delay_ms = max(delay_ms, backoff_ms)
        if not self._retry_later(delivery, attempt, delay_ms):
            return
        delivery.attempt = attempt + 1
        logger.debug(
            "flow %s attempt %d failed (%s); next in %d ms",
            delivery.flow_id,
            attempt,
            delivery.last_error,
            delay_ms,
            extra={"action": "callback_retry_scheduled", "flow_id": delivery.flow_id},
        )

    def _leave_to_compensator(self, delivery: Delivery, message: str, action: str = "delivery_deferred") -> None:
        """Let go of ``delivery`` after a failure that is not its receiver's, logged with its traceback
        (``message`` takes the flow id): the flow stays open in the store and the compensator re-drives it."""
        self._active.pop(delivery.flow_id, None)
        logger.exception(message, delivery.flow_id, extra={"action": action, "flow_id": delivery.flow_id})

    def _start_run(self, delivery: Delivery, result: AttemptResult) -> None:
        """The target accepted the attempt as a run: the flow is ``running`` until its executor reports
        the end, or until the run's deadline, when the owner's compensator times it out. A task that must
        not overlap itself stays blocked meanwhile (:mod:`tjobs.delivery.run_watch`)."""
        timeout_ms = delivery.job.task.callback.run_timeout_ms or self._run_timeout_ms
        started_ms = result.answered_ms
        run = FlowRun(RunStatus.RUNNING, result.attempt, started_ms, started_ms + timeout_ms)
        if self._runs is not None and delivery.pool is not None and delivery.pool.route.overlap is not Overlap.ALLOW:
            self._active.pop(delivery.flow_id, None)
            flow = delivery.job.flow
            self._runs.add(delivery.flow_id, flow.task_id, flow.scheduled_at_ms, started_ms + timeout_ms)
        else:
            self._release(delivery)
        update = delivery.update(FlowStatus.RUNNING, result.attempt, run.deadline_ms)
        logger.debug(
            "flow %s attempt %d accepted as a run",
            delivery.flow_id,
            result.attempt,
            extra={"action": "run_started", "flow_id": delivery.flow_id},
        )
        self._record(delivery, replace(update, run=run))

    def _release(self, delivery: Delivery) -> None:
        """Delivery of the flow is over on this node: a fire of its task that waited for it may go."""
        self._active.pop(delivery.flow_id, None)
        if delivery.pool is not None and delivery.pool.route.overlap is not Overlap.ALLOW:
            self._resume(delivery.job.task.id, delivery.flow_id)

    def _resume(self, task_id: int, flow_id: str) -> None:
        """``flow_id`` no longer runs: the fire of its task that waited for it, if any, goes."""
        waiting = self._overlap.finished(task_id, flow_id)
        if waiting is not None and self._running and waiting.flow_id in self._active:
            self.lanes.add(waiting)  # the task's next fire waited for this one

    def _finish(self, delivery: Delivery, status: FlowStatus, attempts: int, reason: str | None) -> None:
        self._release(delivery)
        if status is FlowStatus.DEAD:
            if reason is not None:
                delivery.last_error = f"{delivery.last_error} ({reason})" if delivery.last_error else reason
            logger.warning(
                "flow %s is dead after %d attempts: %s",
                delivery.flow_id,
                attempts,
                delivery.last_error,
                extra={"action": "flow_dead", "flow_id": delivery.flow_id},
            )
        update = delivery.update(status, attempts, None)
        task = delivery.job.task
        if type(task.schedule) is FixedDelaySpec:
            update = rescheduled(task, task.schedule, delivery.job.flow, update, self._clock.now_ms())
        if task.children is not None:
            update = with_children(task, update, self._clock.now_ms())
        self._record(delivery, update)

    def _record(self, delivery: Delivery, update: FlowUpdate) -> None:
        self._outcomes.put(delivery.flow_id, update, at_once=update.status is FlowStatus.RUNNING)  # a run's start
        try:
            self._observer.flow_update(delivery.job.task.app_id, update)
        except Exception:
            logger.exception("observer failed", extra={"action": "hook_failed", "flow_id": delivery.flow_id})
