"""The live runs that hold their task's overlap gate (:mod:`tjobs.pools.overlap`; README "Job runs").

A pool flow whose task must not overlap itself, once its executor accepted it as a run, still counts as
running for the gate of the node that sent it, until the run ends: its executor's final report, its
cancel or its timeout. Any node may write that end (a report reaches whichever node the executor's
request reached; the shard's owner times a run out), so the sending node reads the stored status of
its watched runs every ``interval_s`` and tells ``ended`` of each flow that is final there (or gone).
A run that failed and is retried stays watched while its retry is on another node (its flow is
``pending`` or running again): the gate holds until the flow's final end. A retry that comes back to
this node's delivery is taken off the watch (:meth:`RunWatch.discard`): delivery tracks it again.
A fire queued behind a watched run is parked in the store until the run's deadline
(:meth:`RunWatch.deadline_of`): the compensator leaves it alone meanwhile (a lease would count an
attempt on it every pass), and should this node stop, the shard's next owner sends it then.

**A change of owner.** The runs are in the store, the gate is in the firing node's memory: a node that takes a
shard over (its owner killed, a planned move, or the shard's server back after a pause) learns the shard's
live runs before anything of the shard fires (:meth:`RunWatch.learn`: one probe per database names the shards
holding any, then pages of the store's :meth:`~tjobs.stores.contracts.runs.RunRecords.live_runs`, a range of
the ``(status, next_attempt_at)`` index per such shard, never a scan) and watches those of tasks that must not
overlap themselves as if it had started them: a fire of such a task is skipped or queued behind the run, and
the run's end, written by any node, releases the gate within a round. So are the runs that ended failed or
timed out and await their retry (flows ``pending`` with a run,
:meth:`~tjobs.stores.contracts.runs.RunRecords.retrying_runs`): the flow is its task's running one until its
final end, as on the node that sent it; a fire queued behind one waits until the retry's run could have ended
(the run's own length after the retry's time). A fire the previous owner queued behind a run is parked in the
store at the run's deadline: the new owner finds it there (:meth:`RunWatch.learn`) and holds it as the run's
queued fire; so it does an earlier fire of the task that is open but not parked (its node died between the
fire's commit and the park's write, which is written in the background): a later fire is skipped, and that one
waits behind the run once the compensator re-drives it. A node that loses a shard forgets its runs
(:meth:`RunWatch.forget`) and lets go of the fires queued behind them, left parked for the new owner. A queued
fire whose run ended while no node owned its shard (between a kill and the take-over) is not found so: it waits
parked until the run's deadline, when the owner's compensator sends it (as before the take-over learned runs).

One read per watched run a round, only while some run is watched; nothing on the fire path."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from tjobs.delivery.outcomes import FlowReader
from tjobs.model import Flow, Task, parse_flow_id
from tjobs.specs.pool import Overlap

logger = logging.getLogger(__name__)

RUN_WATCH_S = 1.0
LEARN_PAGE = 1_000  # live runs read per page when a shard is taken over
OPEN_FLOWS_READ = 100  # a task's open flows read before a fire of it is judged (a handful: runs, a queued fire)


class RunReader(FlowReader, Protocol):
    """What a take-over reads (:class:`tjobs.stores.contracts.runs.RunRecords`)."""

    async def shards_with_live_runs(self, shards: Sequence[int]) -> set[int]: ...

    async def live_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]: ...

    async def shards_with_retrying_runs(self, shards: Sequence[int]) -> set[int]: ...

    async def retrying_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]: ...

    async def parked_behind(self, shard: int, runs: Sequence[tuple[int, int]]) -> list[Flow]: ...

    async def open_flows_of_task(self, app_id: str, task_id: int, limit: int) -> list[Flow]: ...


class RunWatch:
    def __init__(
        self,
        reader: FlowReader,
        interval_s: float,
        ended: Callable[[int, str], None],
        runs: RunReader | None = None,
    ) -> None:
        """``ended(task_id, flow_id)`` is told once for each watched run found final; ``runs`` reads a
        shard's live runs for :meth:`learn` (without it, nothing is learned)."""
        self._reader = reader
        self._live = runs
        self._interval_s = interval_s
        self._ended = ended
        self._runs: dict[str, tuple[int, int, int]] = {}  # flow id -> (task id, scheduled at, deadline)
        self._loop: asyncio.Task[None] | None = None
        self._judging: dict[int, asyncio.Event] = {}  # task id -> set once its latest judge call has answered

    def __contains__(self, flow_id: object) -> bool:
        return flow_id in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def add(self, flow_id: str, task_id: int, scheduled_at_ms: int, deadline_ms: int) -> None:
        self._runs[flow_id] = (task_id, scheduled_at_ms, deadline_ms)
        if self._loop is None or self._loop.done():
            self._loop = asyncio.get_running_loop().create_task(self._watch())

    def deadline_of(self, flow_id: str | None) -> int | None:
        """The deadline of the watched run ``flow_id`` as it started here (``None``: not watched)."""
        run = self._runs.get(flow_id) if flow_id is not None else None
        return None if run is None else run[2]

    def discard(self, flow_id: str) -> None:
        self._runs.pop(flow_id, None)

    async def learn(self, shards: Sequence[int]) -> tuple[list[tuple[int, str]], list[tuple[Task, Flow]]]:
        """Watch the runs of ``shards`` whose task must not overlap itself, read from the store: the live ones,
        and those that ended failed or timed out and await their retry (the flow is the task's running one
        until it ends, wherever the retry is sent from); returns them as (task id, flow id), for the gate,
        and the fires parked behind them (their next attempt is the run's deadline: queued there by the node
        that died or let go), with their tasks. Raises when the store cannot say (nothing of those shards
        may fire then)."""
        learned: list[tuple[int, str]] = []
        parked: list[tuple[Task, Flow]] = []
        if self._live is None:
            return learned, parked
        live, retrying = await asyncio.gather(
            self._live.shards_with_live_runs(shards), self._live.shards_with_retrying_runs(shards)
        )
        for shard in sorted(live | retrying):
            behind: dict[tuple[int, int], Task] = {}
            if shard in live:
                await self._learn_pages(self._live.live_runs, shard, learned, behind)
            if shard in retrying:
                await self._learn_pages(self._live.retrying_runs, shard, learned, behind)
            keys = list(behind)
            for start in range(0, len(keys), LEARN_PAGE):
                for flow in await self._live.parked_behind(shard, keys[start : start + LEARN_PAGE]):
                    parked.append((behind[(flow.task_id, flow.next_attempt_at_ms or 0)], flow))
        if learned:
            logger.info(
                "learned %d runs, live or awaiting their retry (%d fires queued behind them), of %d shards taken over",
                len(learned),
                len(parked),
                len(shards),
                extra={"action": "runs_learned"},
            )
        return learned, parked

    async def _learn_pages(
        self,
        read: Callable[[int, int, tuple[int, int, int] | None], Awaitable[list[tuple[Flow, Task | None]]]],
        shard: int,
        learned: list[tuple[int, str]],
        behind: dict[tuple[int, int], Task],
    ) -> None:
        """Watch the runs ``read`` pages out of ``shard`` (live, or awaiting their retry) whose task must not
        overlap itself; ``behind`` gets the (task id, deadline) pairs a queued fire may be parked at."""
        after: tuple[int, int, int] | None = None
        while True:
            page = await read(shard, LEARN_PAGE, after)
            for flow, task in page:
                pool = None if task is None else task.callback.pool
                if task is None or pool is None or pool.overlap is Overlap.ALLOW or flow.next_attempt_at_ms is None:
                    continue
                watch_ms = watch_deadline(flow)
                self.add(flow.id, flow.task_id, flow.scheduled_at_ms, watch_ms)
                learned.append((flow.task_id, flow.id))
                behind[(flow.task_id, watch_ms)] = task
                if flow.run is not None and flow.run.deadline_ms is not None:  # a retry's: queued at its run's deadline
                    behind[(flow.task_id, flow.run.deadline_ms)] = task
            if len(page) < LEARN_PAGE:
                return
            last = page[-1][0]
            assert last.next_attempt_at_ms is not None
            after = (last.next_attempt_at_ms, last.task_id, last.scheduled_at_ms)

    async def judge(self, task: Task, flow_id: str, here: Callable[[str], bool]) -> tuple[list[str], bool]:
        """Before a fire ``flow_id`` of ``task`` (that must not overlap itself) goes: the task's runs in the
        store, live or awaiting their retry, wherever they were sent from, watched here from now on (but those
        ``here`` delivers), for the gate to hold; and whether a fire of the task that ``here`` does not deliver
        is parked behind one of them (another node queued it: the task's one queued fire), or is an earlier fire
        still open (fired by a node that died before its park behind the run was written: the compensator sends it
        here, and it is the one that waits). One read of the
        task's open flows (:meth:`~tjobs.stores.contracts.runs.RunRecords.open_flows_of_task`). Calls for one
        task answer in the order they were made (a call waits for the task's previous one), so fires handed over
        together (a take-over's overdue instants) are judged in their order: under ``queue_one`` the earliest
        waits and the later ones are skipped, whichever read the store answered first."""
        if self._live is None:
            return [], False
        previous, done = self._judging.get(task.id), asyncio.Event()
        self._judging[task.id] = done
        try:
            if previous is not None:
                await previous.wait()
            flows = await self._live.open_flows_of_task(task.app_id, task.id, OPEN_FLOWS_READ)
        finally:  # the caller judges by this answer before the next call for the task resumes
            done.set()
            if self._judging.get(task.id) is done:
                del self._judging[task.id]
        runs = [f for f in flows if f.id != flow_id and f.next_attempt_at_ms is not None and _a_run(f)]
        parked_at: set[int | None] = set()
        for flow in runs:
            watch_ms = watch_deadline(flow)
            if flow.id not in self._runs and not here(flow.id):
                self.add(flow.id, flow.task_id, flow.scheduled_at_ms, watch_ms)
            parked_at |= {watch_ms, None if flow.run is None else flow.run.deadline_ms}
        _, scheduled_at_ms = parse_flow_id(flow_id)
        queued = any(
            f.id != flow_id
            and f.run is None
            and f.status.deliverable
            and (f.next_attempt_at_ms in parked_at or f.scheduled_at_ms < scheduled_at_ms)
            for f in flows
            if not here(f.id)
        )
        return [flow.id for flow in runs], queued

    def forget(self, lost: Callable[[int], bool]) -> None:
        """Stop watching the runs of the tasks for which ``lost(task_id)`` (their shard is another node's)."""
        for flow_id in [f for f, (task_id, _, _) in self._runs.items() if lost(task_id)]:
            del self._runs[flow_id]

    async def stop(self) -> None:
        """Forget every run (the gate they held is this node's memory, gone with it)."""
        self._runs.clear()
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None

    async def _watch(self) -> None:
        while self._runs:
            await asyncio.sleep(self._interval_s)
            for flow_id, (task_id, scheduled_at_ms, _) in list(self._runs.items()):
                try:
                    stored = await self._reader.get_flow(task_id, scheduled_at_ms)
                except Exception:  # the store is down: the run stays watched, read again next round
                    logger.warning(
                        "could not read watched run %s", flow_id, exc_info=True, extra={"action": "run_watch_failed"}
                    )
                    break
                if (stored is None or stored.status.terminal) and self._runs.get(flow_id) is not None:
                    del self._runs[flow_id]
                    self._ended(task_id, flow_id)


def _a_run(flow: Flow) -> bool:
    """A run live (``running``, ``cancelling``), or ended failed or timed out and awaiting its retry."""
    return flow.status.running or (flow.status.deliverable and flow.run is not None)


def watch_deadline(flow: Flow) -> int:
    """When a fire queued behind ``flow``'s run (live, or awaiting its retry: :func:`_a_run`) is parked until:
    the run's deadline; for a retry, when the retry's run could end (its run's own length after the retry's
    time), if later."""
    assert flow.next_attempt_at_ms is not None
    run = flow.run
    deadline_ms = None if run is None else run.deadline_ms
    if run is None or deadline_ms is None:
        return flow.next_attempt_at_ms
    if flow.status.deliverable:
        return max(deadline_ms, flow.next_attempt_at_ms + deadline_ms - run.started_at_ms)
    return deadline_ms
