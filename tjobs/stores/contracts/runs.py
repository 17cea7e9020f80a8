"""Job runs (README "Job runs"): a run's transitions, written under a compare-and-set on the flow, and
its log, appended in place under a line cap.

Every report, cancel and timeout reads the flow, decides the transition (:mod:`tjobs.service.run_reports`)
and writes it only where the flow is still as read: the first of two racing writers wins, and the
second reads again (and, a run having ended, answers 409). So a run ends once, on every backend, whatever
node took the report.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from tjobs.model import Flow, FlowStatus, FlowUpdate, Task
from tjobs.stores.contracts.lifecycle import StoreLifecycle


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
