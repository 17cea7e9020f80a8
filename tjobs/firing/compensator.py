"""Re-drive flows that committed but never reached a terminal state (invariant 5, docs/design.md).

A node that crashed after the fire transaction, or lost a callback's response, leaves flows
``pending`` (or ``sending`` for at-most-once). Every ``interval_s`` the compensator asks which owned
shards hold non-terminal flows whose next attempt is more than ``grace_s`` overdue (one read per
database), leases those flows in each such shard, and hands the ones this node is not delivering back
to the deliverer (read again first if this node wrote outcomes while the lease ran: :meth:`Compensator._handle`).
At-most-once flows found ``sending`` are never resent: they become ``unknown``. Flows of deleted tasks become
``cancelled``. A job run (README "Job runs") whose deadline passed is leased the same way (its next attempt is
its deadline): it ends ``timed_out`` and is retried by its task's policy, or, a cancel having been asked, ends
``cancelled`` (:func:`tjobs.delivery.run_reports.expire`, written under the flow's compare-and-set, so a report
that came first wins). Its state is in the store:
whichever node owns the shard when the deadline passes ends it. A ``delivered`` or ``dead`` flow whose
children are still due (README "Child tasks": its ending's node died before triggering them) is leased the
same way and its children triggered from the stored ending (:mod:`tjobs.delivery.child_triggers`).

The lease counts one attempt on each pending flow it claims but those this node's deliverer holds (see
``TaskStore.lease_stale_flows``): the last attempt may have been sent and answered with its outcome lost in
the crashed node's write buffer, so a re-drive is always a higher ``tjobs-attempt`` than anything sent
before it. A flow this node holds past the grace (queued behind a slow app) is leased, out of the next
pass's way, uncounted: it is still being delivered here, and counted on every pass it would spend its
attempts unsent. It is leased until about when its queue will have reached it (:func:`held_lease_ms`), so a
flow queued for minutes is written about once, not at every lease's end (a lease and the grace, 46 s with
the defaults: ~2,200 writes a second for a 100,000-flow backlog), and a node taking its shard after a crash
re-drives it about when it would have gone. A first attempt its deliverer spilled (held in the store, past what its
app's queue keeps in memory: :mod:`tjobs.delivery.spill`) is leased the same way, and re-driven, still uncounted, by
the first lease that finds room for it in that queue. That holds
because the store is never more than that one attempt behind: a deliverer sends a retry only once the
outcome of the attempt before it is written, a node that lost the shard (fenced, or handing it over
while healthy) sends nothing more of its flows (:meth:`tjobs.delivery.deliverer.Deliverer.forget_runs`),
and a node that commits a flow of a shard it does not own (its API's trigger, redrive or backfill) retries
it only while this lease cannot have come (:mod:`tjobs.delivery.foreign_flows`).
A node whose fence is closed (its lease expired) claims nothing: the new owner's compensator does.
A flow a node let go unsent (its fence closed, its shard handed over, or the node stopping) is written
back due long ago, or due at its retry time less the grace (:mod:`tjobs.delivery.hand_back`), so the
pass after that, or the first once the retry is due, leases it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

from tjobs.clock import Clock
from tjobs.delivery.child_triggers import ending_of, with_children
from tjobs.delivery.run_reports import expire
from tjobs.delivery.run_writes import write_transition
from tjobs.hot_tier.base import TaskChange
from tjobs.model import Flow, FlowStatus, FlowUpdate, RunStatus, Task
from tjobs.observability.observer import NO_OBSERVER, FireObserver
from tjobs.periodic import PeriodicPass
from tjobs.settings import CompensatorSettings
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

HELD_LEASES_MAX = 16
"""A flow this node holds is leased for at most this many leases (4 min 16 s with the defaults: 16 s a lease)."""


def held_lease_ms(lease_ms: int, wait_ms: float) -> int:
    """How long a lease holds a flow this node is delivering, taken for its attempt in ``wait_ms`` as its app's
    queue drains now (:meth:`tjobs.delivery.lanes.Lanes.wait_ms`): whole leases up to the wait, at least one and at
    most :data:`HELD_LEASES_MAX`, so it is not leased again before its turn, is re-driven after a crash no later
    than its turn and a grace, and a lease's instants are few (the SQL store writes one ``CASE`` branch each). An
    unknown wait (a queue nothing was taken from lately) holds it one lease."""
    if math.isinf(wait_ms) or math.isnan(wait_ms):
        return lease_ms
    return lease_ms * min(max(int(wait_ms // lease_ms), 1), HELD_LEASES_MAX)


class SpilledFlows(Protocol):
    """The first attempts a node's deliverer holds in the store (:class:`tjobs.delivery.spill.Spill`)."""

    def take_back(self, flow_id: str) -> bool:
        """Whether the deliverer takes ``flow_id`` back, leased, to re-drive it now (room in its app's queue)."""
        ...

    def forget_unseen(self, now_ms: int, generation_ms: int) -> int:
        """Forget those no lease found for a generation of ``generation_ms`` or more; returns how many."""
        ...


class Compensator(PeriodicPass):
    name = "compensator"

    def __init__(
        self,
        store: TaskStore,
        owned: Callable[[], frozenset[int]],
        in_flight: Callable[[str], bool],
        redrive: Callable[[Task, Flow], None],
        settings: CompensatorSettings,
        clock: Clock,
        lease_ms: int,
        *,
        fence: Callable[[int], bool] | None = None,
        task_changes: Callable[[TaskChange], Awaitable[None]] | None = None,
        ended: Callable[[FlowUpdate], Awaitable[None]] | None = None,
        observer: FireObserver = NO_OBSERVER,
        outcomes_written: Callable[[], int] | None = None,
        wait_ms: Callable[[str], float] | None = None,
        spill: SpilledFlows | None = None,
    ) -> None:
        """``fence(now_ms)`` is ``False`` while this node may not work on its jobs (the coordinator's
        ``may_fire``; see ``Deliverer``). ``task_changes`` (the hot tier's publish) is told a fixed_delay
        task's next run that a timed-out run's end set; ``ended``, a run's end that triggers children;
        ``observer`` (the node's), a run's end at its deadline, for the service levels. ``in_flight(flow_id)``
        says whether this node's deliverer holds the flow (queued, being sent, waiting for a retry, or its
        outcome not written yet); ``outcomes_written()``, how many outcome writes it has made (see
        :meth:`_handle`); ``wait_ms(flow_id)``, how long until it takes a flow it holds for its attempt (without it,
        a held flow is leased one lease at a time); ``spill``, the first attempts it spilled (without it, none)."""
        super().__init__(settings.interval_s)
        self._store = store
        self._owned = owned
        self._in_flight = in_flight
        self._redrive = redrive
        self._settings = settings
        self._clock = clock
        self._lease_ms = lease_ms
        self._fence = fence
        self._task_changes = task_changes
        self._ended = ended
        self._observer = observer
        self._outcomes_written = outcomes_written
        self._wait_ms = wait_ms
        self._spill = spill
        self.redriven = 0
        self.leased = 0  # flows leased, over every pass (tjobs_flows_leased_total)
        self.runs_ended = 0
        self.backlog = 0

    async def run_once(self) -> int:
        """One pass over every owned shard; returns how many flows were re-driven or closed."""
        grace_ms = int(self._settings.grace_s * 1000)
        handled = 0
        owned = sorted(self._owned())
        # A cheap read first (a few statements per database): most passes find nothing to lease, and a
        # locking lease per owned shard would be one transaction per shard every interval on an idle node.
        stale = await self._store.shards_with_stale_flows(owned, self._clock.now_ms() - grace_ms)
        for shard in owned:
            if shard not in stale:
                continue
            if self._fence is not None and not self._fence(self._clock.now_ms()):
                break
            now_ms = self._clock.now_ms()
            written = self._written()
            leased = await self._store.lease_stale_flows(
                shard, now_ms - grace_ms, grace_ms + self._lease_ms, self._settings.batch, held=self._held(now_ms)
            )
            if leased:
                self.leased += len(leased)
                handled += await self._handle(leased, now_ms, written)
        else:  # a whole pass: a spilled flow it did not find for two of the longest holds is no longer open
            now_ms = self._clock.now_ms()
            if self._spill is not None and (self._fence is None or self._fence(now_ms)):
                self._spill.forget_unseen(now_ms, 2 * (HELD_LEASES_MAX * self._lease_ms + grace_ms))
        self.backlog = handled
        return handled

    def _held(self, now_ms: int) -> Callable[[str], int | None]:
        """The lease's ``held``: until when a flow this node's deliverer holds is leased (None: one it does not)."""

        def held(flow_id: str) -> int | None:
            if not self._in_flight(flow_id):
                return None
            wait_ms = 0.0 if self._wait_ms is None else self._wait_ms(flow_id)
            return now_ms + held_lease_ms(self._lease_ms, wait_ms)

        return held

    def _written(self) -> int | None:
        return None if self._outcomes_written is None else self._outcomes_written()

    async def _handle(self, leased: list[tuple[Flow, Task | None]], now_ms: int, written_before: int | None) -> int:
        """Re-drive or close what a lease returned, except the flows this node is delivering (but a spilled one its
        deliverer takes back: re-driven as leased, uncounted).

        An outcome this node was writing may have landed while the lease ran (on MariaDB its write waits for the
        lease's row lock), the flow then forgotten here as written: a re-drive would send a delivered flow again.
        So once outcomes have been written since the lease began (``outcomes_written`` moved past
        ``written_before``), a flow about to be re-driven is read first and re-driven only if it is still as
        leased: either its write has not returned yet (the flow is still in flight here) or the store holds it.
        Asked per flow, as it is decided: the awaits of this loop give a write time to return too."""
        closures: list[FlowUpdate] = []
        for flow, task in leased:
            taken_back = False  # a flow this node spilled, re-driven as leased: not lost, no attempt counted
            if self._in_flight(flow.id):
                if self._spill is None or not self._spill.take_back(flow.id):
                    continue
                taken_back = True
            if flow.status.terminal:  # an ending whose children are due
                await self._trigger_children(flow, task, now_ms)
            elif task is None:
                closures.append(_close(flow, FlowStatus.CANCELLED, "task deleted before delivery", now_ms))
            elif flow.status.running:
                await self._end_run(flow, task, now_ms)
            elif flow.status is FlowStatus.SENDING:
                closures.append(_close(flow, FlowStatus.UNKNOWN, "at-most-once attempt lost by a crash", now_ms))
            else:
                if self._written() != written_before and not await self._still_as_leased(flow):
                    continue
                self._redrive(task, flow)
                if taken_back:  # a backlog's way out of the store, not a recovery: no re-drive counted or logged
                    continue
                self.redriven += 1
                logger.info(
                    "re-driving flow %s (attempts so far %d)",
                    flow.id,
                    flow.attempts,
                    extra={"action": "flow_redriven", "flow_id": flow.id},
                )
        if closures:
            await self._store.record_flow_updates(closures, now_ms)
        return len(leased)

    async def _still_as_leased(self, flow: Flow) -> bool:
        stored = await self._store.get_flow(flow.task_id, flow.scheduled_at_ms)
        return stored is not None and stored.status is flow.status and stored.attempts == flow.attempts

    async def _trigger_children(self, flow: Flow, task: Task | None, now_ms: int) -> None:
        update = with_children(task, ending_of(flow), now_ms)
        if update.children is None:  # its task deleted, or naming no children now
            await self._store.clear_children_due(flow.task_id, flow.scheduled_at_ms)
            return
        if self._ended is None:
            return
        logger.info(
            "triggering the children of flow %s again",
            flow.id,
            extra={"action": "child_flows_redriven", "flow_id": flow.id},
        )
        await self._ended(update)

    async def _end_run(self, flow: Flow, task: Task, now_ms: int) -> None:
        """A live run past its deadline (or a cancel's grace): ended, unless a report came first."""
        transition = expire(flow, task, now_ms)
        if await write_transition(
            self._store,
            transition,
            task,
            flow,
            now_ms,
            self._redrive,
            self._task_changes,
            ended=self._ended,
            observer=self._observer,
        ):
            self.runs_ended += 1
            logger.info(
                "run of flow %s ended %s at its deadline",
                flow.id,
                transition.update.run.status.value if transition.update.run is not None else "?",
                extra={"action": "run_expired", "flow_id": flow.id},
            )


def _close(flow: Flow, status: FlowStatus, reason: str, now_ms: int) -> FlowUpdate:
    run = flow.run
    if run is not None and not run.status.ended:  # a live run of a deleted task ends with its flow
        run = replace(run, status=RunStatus.CANCELLED, ended_at_ms=now_ms)
        return FlowUpdate(flow.task_id, flow.scheduled_at_ms, status, flow.attempts, None, None, reason, run=run)
    return FlowUpdate(flow.task_id, flow.scheduled_at_ms, status, flow.attempts, None, None, reason)
