"""The deliverer's outcome writes (:class:`OutcomeWriter`): coalesced per flow, written in batches.

Outcomes are coalesced per flow and written by one background flusher at most every
``flush_interval_s`` (or as soon as ``flush_batch`` are pending). A failed write keeps its updates
and is retried; meanwhile those flows count as in flight, so the compensator leaves them alone. If
the node dies first, the database still says ``pending`` (or ``sending``) and the compensator
re-drives (or closes) the flow: at least once, never lost.

A retry waits for the outcome of the attempt before it (:meth:`OutcomeWriter.when_written`): the store
then counts every attempt this node made but the one it is about to send, so a new owner's compensator,
whose lease counts one attempt up from what is stored, re-drives with a number never sent (docs/design.md
invariant 4).

An ending that triggers child tasks (:attr:`~tjobs.model.FlowUpdate.children`) is told to ``ended`` once
written (:mod:`tjobs.service.child_flows`).

An outcome that sets a fixed_delay task's next run (:class:`~tjobs.model.Reschedule`, written by the
store in the outcome's own transaction) is told to the task's owner once written, as a
:class:`~tjobs.hot_tier.base.TaskChange` at the version the fire left (so a pause or an edit, at a
higher version, outranks it; where the store's guard refused it, the wheel's fire finds the task moved
and fires nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Protocol

from tjobs.cancellation import cancel_until_done
from tjobs.clock import Clock
from tjobs.hot_tier.base import TaskChange
from tjobs.model import Flow, FlowKind, FlowUpdate, Reschedule, Task, TaskStatus
from tjobs.specs import FixedDelaySpec

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.1
FLUSH_BATCH = 500
FLUSH_RETRY_MAX_S = 5.0


class FlowRecorder(Protocol):
    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        """Write delivery outcomes; terminal flows are never changed again (see ``TaskStore``)."""
        ...


class FlowReader(Protocol):
    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None:
        """The flow as stored now (see ``TaskStore``)."""
        ...


class OutcomeWriter:
    def __init__(
        self,
        recorder: FlowRecorder,
        clock: Clock,
        flush_interval_s: float,
        flush_batch: int,
        task_changes: Callable[[TaskChange], Awaitable[None]] | None = None,
        ended: Callable[[FlowUpdate], Awaitable[None]] | None = None,
    ) -> None:
        self._recorder = recorder
        self._task_changes = task_changes
        self._ended = ended
        self._clock = clock
        self.flush_interval_s = flush_interval_s
        self.flush_batch = flush_batch
        self.pending: dict[str, FlowUpdate] = {}  # flow id -> its newest update, not written yet
        self.flushing: dict[str, FlowUpdate] = {}  # the updates being written now
        self._dirty = asyncio.Event()
        self._full = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._waiters: dict[str, Callable[[], object]] = {}  # flow id -> told once its update is written
        self.flush_calls = 0
        self.flush_failures = 0

    def start(self) -> None:
        self._flusher = asyncio.create_task(self._flush_loop(), name="tjobs-flow-flusher")

    def put(self, flow_id: str, update: FlowUpdate, *, at_once: bool = False) -> None:
        """Write ``update`` with the next flush (replacing an update of the flow not written yet); ``at_once``:
        that flush starts now, not after the interval (with whatever else is pending)."""
        self.pending[flow_id] = update
        if at_once or len(self.pending) >= self.flush_batch:
            self._full.set()
        self._dirty.set()

    def unwritten(self, flow_id: str) -> bool:
        """Whether an update of the flow waits for a flush (or is being written now)."""
        return flow_id in self.pending or flow_id in self.flushing

    def when_written(self, flow_id: str, then: Callable[[], object]) -> None:
        """Call ``then`` once the flow's unwritten update is written (never, if the writer stops first: the
        flow stays open in the store for the compensator)."""
        self._waiters[flow_id] = then

    async def stop(self, deadline: float) -> None:
        """Stop the flusher, then write everything pending, retrying until ``deadline`` (the event
        loop's time); what is still unwritten then is dropped, for the compensator to re-drive."""
        loop = asyncio.get_running_loop()
        if self._flusher is not None:
            # cancelled again if the driver's wait_for lost it (gh-86296): the loop would run on
            failure = await cancel_until_done(self._flusher)
            if failure is not None:
                logger.warning("the outcome flusher ended with %r", failure)
            self._flusher = None
        while self.pending:
            if not await self._flush() and loop.time() >= deadline:
                logger.error(
                    "stopping with %d flow updates unwritten; the compensator will re-drive them",
                    len(self.pending),
                    extra={"action": "flow_updates_abandoned"},
                )
                self.pending.clear()
                break
            if self.pending:
                await asyncio.sleep(min(0.1, max(deadline - loop.time(), 0.0)))
        self._waiters.clear()

    async def _flush_loop(self) -> None:
        retry_s = self.flush_interval_s
        while True:
            await self._dirty.wait()
            if len(self.pending) < self.flush_batch:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.flush_interval_s):
                        await self._full.wait()
            if await self._flush():
                retry_s = self.flush_interval_s
            else:
                await asyncio.sleep(retry_s)
                retry_s = min(retry_s * 2, FLUSH_RETRY_MAX_S)

    async def _flush(self) -> bool:
        """Write everything pending, in chunks; on failure keep what was not written and say so."""
        self._full.clear()
        self.flushing, self.pending = self.pending, {}
        items = list(self.flushing.items())
        try:
            for start in range(0, len(items), self.flush_batch):
                chunk = items[start : start + self.flush_batch]
                try:
                    await self._recorder.record_flow_updates([u for _, u in chunk], self._clock.now_ms())
                except Exception:
                    self.flush_failures += 1
                    logger.exception(
                        "writing %d flow updates failed; keeping them for the next flush",
                        len(items) - start,
                        extra={"action": "flow_updates_failed"},
                    )
                    self._restore(items[start:])
                    return False
                except BaseException:
                    self._restore(items[start:])
                    raise
                self.flush_calls += 1
                for flow_id, _ in chunk:  # written: not unwritten while the chunks after it are
                    del self.flushing[flow_id]
                self._tell_written(chunk)
                await self._tell_reschedules(chunk)
                await self._tell_endings(chunk)
            return True
        finally:
            self.flushing = {}
            if not self.pending:
                self._dirty.clear()

    def _tell_written(self, written: list[tuple[str, FlowUpdate]]) -> None:
        if not self._waiters:
            return
        for flow_id, _ in written:
            then = None if flow_id in self.pending else self._waiters.pop(flow_id, None)
            if then is not None:
                then()

    async def _tell_reschedules(self, written: list[tuple[str, FlowUpdate]]) -> None:
        if self._task_changes is None:
            return
        for _, update in written:
            moved = update.reschedule
            if moved is None:
                continue
            try:
                await self._task_changes(TaskChange(update.task_id, moved.app_id, moved.next_run_at_ms, moved.version))
            except Exception:  # the store holds the truth: the cycle load or the park still fires it
                logger.exception("telling a fixed_delay task's next run failed", extra={"action": "hook_failed"})

    async def _tell_endings(self, written: list[tuple[str, FlowUpdate]]) -> None:
        if self._ended is None:
            return
        endings = [update for _, update in written if update.children is not None]
        if endings:  # concurrently: a chunk's endings must not hold the next flush one after another
            await asyncio.gather(*(self._ended(update) for update in endings))  # each logs its own failures

    def _restore(self, items: list[tuple[str, FlowUpdate]]) -> None:
        for flow_id, update in items:
            self.pending.setdefault(flow_id, update)  # an update made meanwhile is newer: keep it


def rescheduled(task: Task, spec: FixedDelaySpec, flow: Flow, update: FlowUpdate, now_ms: int) -> FlowUpdate:
    """A fixed_delay task's scheduled flow ended: its next run is a delay from now, written with the
    outcome where the task is still where ``task`` (as its fire left it; as read for a re-drive)
    has it (:class:`~tjobs.model.Reschedule`). A manual flow (trigger, backfill) moves nothing."""
    if flow.kind is FlowKind.MANUAL or task.status is not TaskStatus.ACTIVE or task.next_run_at_ms is None:
        return update
    return replace(
        update, reschedule=Reschedule(task.app_id, task.next_run_at_ms, task.version, now_ms + spec.delay_ms)
    )
