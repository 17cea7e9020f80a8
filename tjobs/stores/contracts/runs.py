"""Job runs (README "Job runs"): a run's transitions, written under a compare-and-set on the flow, and
its log, appended in place under a line cap.

Every report, cancel and timeout reads the flow, decides the transition (:mod:`tjobs.service.run_reports`)
and writes it only where the flow is still as read: the first of two racing writers wins, and the
second reads again (and, a run having ended, answers 409). So a run ends once, on every backend, whatever
node took the report.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import NamedTuple

from tjobs.model import Flow, FlowStatus, FlowUpdate, Task
from tjobs.stores.contracts.lifecycle import StoreLifecycle


class RunWrite(NamedTuple):
    """What :meth:`RunRecords.decide_run`'s ``decide`` chose to write: ``update`` where the flow is still
    ``expected`` with ``expected_attempts``, at ``now_ms`` (:meth:`RunRecords.write_run`'s arguments)."""

    expected: FlowStatus
    update: FlowUpdate
    now_ms: int
    expected_attempts: int


class LogPurgePage(NamedTuple):
    """What one page of :meth:`RunRecords.purge_run_logs` read and cleared. Keys are ``(scheduled_at_ms,
    task_id)``: the walk's order."""

    cleared: int  # logs cleared
    read: int  # flows read: fewer than the page's limit when the walk reached the cut-off
    last: tuple[int, int] | None  # the last flow read (``None``: none): the next page starts after it
    unsettled: tuple[int, int] | None  # the first flow read not ended before the cut-off (its log may be due later)


class RunRecords(StoreLifecycle):
    @abstractmethod
    async def write_run(
        self, expected: FlowStatus, update: FlowUpdate, now_ms: int, *, expected_attempts: int | None = None
    ) -> bool:
        """Write ``update`` on its flow where the flow is still ``expected`` with ``expected_attempts``
        (``update.attempts`` when ``None``): its status, attempts, next attempt, last error, and its run
        where ``update.run`` is given (else the run is kept); the last status code, attempt history,
        answers and log are kept. A ``update.reschedule`` (a fixed_delay task's next run) is written in
        the same transaction, guarded as :meth:`FirePath.record_flow_updates` guards it. ``False`` (and
        nothing written) when the flow is gone or moved on since it was read."""

    @abstractmethod
    async def flow_with_task(self, task_id: int, scheduled_at_ms: int) -> tuple[Flow | None, Task | None]:
        """The flow (``None``: gone) and its task (``None``: gone, or the flow is) in one read: what a
        run's report decides from (:mod:`tjobs.service.runs`), one statement where a read of each was two."""

    async def decide_run(
        self, task_id: int, scheduled_at_ms: int, decide: Callable[[Flow | None, Task | None], RunWrite | None]
    ) -> bool:
        """Read the flow with its task (:meth:`flow_with_task`), call ``decide`` with them, and write what it
        returns (:meth:`write_run`): whether that was written. ``None`` from ``decide`` writes nothing; what
        it raises is raised, nothing written. ``False`` also when another writer changed the flow between
        the read and the write (the caller reads again). This plain sequence is every backend's; MariaDB
        reads under the row's lock in the write's own transaction (two round trips where it was three:
        :mod:`tjobs.stores.sql_run_writes`), so there no writer comes between."""
        flow, task = await self.flow_with_task(task_id, scheduled_at_ms)
        chosen = decide(flow, task)
        if chosen is None:
            return False
        return await self.write_run(
            chosen.expected, chosen.update, chosen.now_ms, expected_attempts=chosen.expected_attempts
        )

    @abstractmethod
    async def shards_with_live_runs(self, shards: Sequence[int]) -> set[int]:
        """Which of ``shards`` hold a live run: a plain read, one statement per database (an index probe of
        each shard's live statuses), so a take-over reads :meth:`live_runs` only where there are some."""

    @abstractmethod
    async def live_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        """The flows of ``shard`` whose run is live (``running`` or ``cancelling``), with their tasks (``None``:
        deleted), ordered by (next attempt: the run's deadline or its cancel's grace; task id; instant), at
        most ``limit`` of them, those after ``after`` in that order (the last one's key: the next page). Plain
        reads of the ``(status, next_attempt_at)`` index's ranges of the live statuses and of those tasks by
        id: what a node that takes the shard over learns its overlap gate from (:mod:`tjobs.delivery.run_watch`),
        never a scan of the shard's flows."""

    @abstractmethod
    async def shards_with_retrying_runs(self, shards: Sequence[int]) -> set[int]:
        """Which of ``shards`` hold a flow whose run ended failed or timed out and that awaits its retry
        (:meth:`retrying_runs`): a plain read, one statement per database (a probe of each shard's
        ``pending`` range of the ``(status, next_attempt_at)`` index for a flow with a run)."""

    @abstractmethod
    async def retrying_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        """The ``pending`` flows of ``shard`` that hold a run (it ended failed or timed out, and the flow
        awaits the retry its task's policy gave it: sent again by whichever node holds it, or re-driven
        by the shard owner's compensator), with their tasks (``None``: deleted), ordered and paged as
        :meth:`live_runs` (next attempt: the retry's time; task id; instant). A read of the ``pending``
        range of the ``(status, next_attempt_at)`` index, each entry's row checked for a run: its cost
        follows the shard's pending flows, runs or not (read once, when a node takes the shard over)."""

    @abstractmethod
    async def open_flows_of_task(self, app_id: str, task_id: int, limit: int) -> list[Flow]:
        """The open flows (``pending``, ``sending``, ``running``, ``cancelling``) of task ``task_id`` of app
        ``app_id``, at most ``limit`` of them, by instant: what a node judges a fire of a task that must not
        overlap itself against (its runs, live or awaiting their retry, and the fire queued behind one,
        wherever they were sent from; :mod:`tjobs.delivery.run_watch`). A read of the ``(app_id, status,
        task_id)`` index at the task, one range per open status, never of the task's history."""

    @abstractmethod
    async def parked_behind(self, shard: int, runs: Sequence[tuple[int, int]]) -> list[Flow]:
        """The ``pending`` flows of ``shard`` parked behind live runs: for each (task id, deadline) of
        ``runs``, the task's pending flows whose next attempt is that deadline (a fire queued behind the
        run waits so: :mod:`tjobs.delivery.run_watch`). A read of the ``(status, next_attempt_at)`` index at
        those deadlines."""

    @abstractmethod
    async def clear_children_due(self, task_id: int, scheduled_at_ms: int) -> None:
        """The children of flow (``task_id``, ``scheduled_at_ms``) have their flows: clear its marker
        (``next_attempt_at_ms``) where the flow is still ``delivered`` or ``dead``, so no compensation pass
        leases it again. A flow that is open again (a dead flow retried) or gone is left as it is."""

    @abstractmethod
    async def append_run_log(self, task_id: int, scheduled_at_ms: int, text: str, lines: int, max_lines: int) -> bool:
        """Append ``text`` (``lines`` log lines, each ending in a newline) to the flow's run log where
        the flow exists and holds at most ``max_lines - lines`` lines, counting them; ``False`` (nothing
        written) otherwise. The flow's status and ``updated_at`` are left as they are."""

    @abstractmethod
    async def purge_run_logs(
        self, shard: int, app_id: str, finished_before_ms: int, limit: int, after: tuple[int, int] | None = None
    ) -> LogPurgePage:
        """One page of an app's run log retention (``run_log_retention_days``; :mod:`tjobs.firing.retention`):
        read the flows of app ``app_id`` in ``shard`` scheduled before ``finished_before_ms``, in
        (instant, task id) order after ``after``, at most ``limit`` of them, and clear the log of those
        that ended (a terminal status) before ``finished_before_ms`` (``updated_at``) and hold one:
        ``run_log`` becomes NULL, ``run_log_lines``, the run, the status and ``updated_at`` stay, so the
        flow shows its log purged (:attr:`tjobs.model.Flow.run_log_purged`), not empty; a purged log
        takes no append. One short write transaction: a read of the ``(app_id, scheduled_at, task_id)``
        index's range (``flows_TT_app_at``, migration 0006) from ``after``, at most ``limit`` entries and
        their rows, then an ``UPDATE`` of those rows by key, never a read of the app's other flows."""
