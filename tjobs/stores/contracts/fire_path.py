"""The fire path: what a node's runner, deliverer and compensator ask of storage, many times a second.

Loading due tasks (invariant 3 in docs/design.md: reads only), the one transaction that commits fires
(invariant 1), the delivery outcomes written back, and the leases on stale flows a compensator takes.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence

from tjobs.model import DueTask, FireIntent, FireOutcome, FirePlan, Flow, FlowUpdate, Task
from tjobs.stores.contracts.lifecycle import StoreLifecycle

FirePlanner = Callable[[Task, FireIntent, int], FirePlan | None]
"""Pure: given the locked task row, the due intent and ``now_ms``, decide what the fire does.

Called by :meth:`FirePath.commit_fires` inside the transaction, only for rows whose CAS matched.
Returning ``None`` leaves the task untouched and records nothing.
"""


class FirePath(StoreLifecycle):
    """Load, commit, record outcomes, lease stale flows."""

    @abstractmethod
    async def database_now_ms(self) -> int:
        """The database server's clock (instance 0), to detect skew with the node's clock."""

    @abstractmethod
    async def load_due(
        self,
        shard: int,
        before_ms: int,
        limit: int,
        after: tuple[int, int] | None = None,
        skip: tuple[int, int] | None = None,
    ) -> list[DueTask]:
        """Active tasks of ``shard`` with ``next_run_at_ms < before_ms``, overdue ones included; with
        ``skip = (from_ms, until_ms)``, without those with ``from_ms <= next_run_at_ms < until_ms``
        (the cycle load reads the overdue tasks and the new cycle in one statement, not the span it
        loaded before).

        At most ``limit``, ordered by ``(next_run_at_ms, task_id)``; ``after`` is the last
        ``(next_run_at_ms, task_id)`` of the previous page, and paging with it leaves out the
        skipped span too. SQL stores keep it a range scan of the ``(status, next_run_at)`` index
        (two ranges with ``skip``), without a sort. Changes nothing in the database.
        """

    @abstractmethod
    async def count_active(self, shard: int) -> int:
        """The shard's active tasks, every app's, as its task counts hold them
        (:meth:`tjobs.stores.contracts.TaskRecords.read_task_counts`): never a read of the tasks."""

    @abstractmethod
    async def commit_fires(
        self,
        intents: Sequence[FireIntent],
        now_ms: int,
        planner: FirePlanner,
        may_commit: Callable[[], bool] | None = None,
    ) -> list[FireOutcome]:
        """Commit a batch of due fires; one outcome per intent, in order.

        Intents are grouped so that one transaction covers each database server touched (never one
        per fire; MariaDB: one per server URL, SQLite: one per file, the memory twin: one per topology
        instance). In it, each task row is locked; if it is still ``active`` at
        ``(next_run_at_ms, version) == (intent.scheduled_at_ms, intent.version)`` the planner
        decides the plan, the plan's flows are inserted and the task advances (``version + 1``).
        Otherwise the outcome is *rejected*: ``task=None`` and no flow. A flow whose ``(task_id,
        scheduled_at_ms)`` already exists is never duplicated (invariant 2, docs/design.md).

        Transactions succeed or fail independently: a failed one (a lost connection, a lock wait
        timeout, the fence, a planner error) commits none of its intents, and each of them gets a
        *failed* outcome whose ``error`` is that transaction's error (:class:`tjobs.errors.
        StorageUnavailable` when its server could not be reached), while the outcomes of the
        transactions that committed are reported as usual, never discarded. Only when every
        transaction failed is an error raised (one of theirs): a call that raises wrote nothing.
        A failed intent may be committed again as it stands. One case is unknowable: a connection
        lost while the server was committing may have committed; such an intent, committed again,
        is then rejected, and its flows are already stored (pending, for the compensator).

        ``may_commit`` (the node's fence) is asked last, after every statement and just before each
        transaction commits: if it says no, that transaction rolls back and fails with
        :class:`tjobs.errors.Fenced`. A node stopped (GC, SIGSTOP, a stalled VM) inside the
        transaction while a backup took its shards over therefore commits nothing when it resumes.
        """

    @abstractmethod
    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        """Write delivery outcomes, batched per database; terminal flows are never changed again.

        A non-terminal outcome with fewer ``attempts`` than stored is outdated (written by a node
        that lost the flow to a compensator claim, see :meth:`lease_stale_flows`) and is ignored, so
        a flow's attempt count never goes down while it is open. A terminal outcome always lands.

        An outcome that starts a run (``running``, :mod:`tjobs.delivery.run_start`) lands only where its
        attempt is still being delivered (``pending`` with fewer attempts, or ``sending`` it): a report,
        a cancel or a retry that reached the flow first is kept. Where the flow is at that attempt all
        the same (its run overtaken, or already ended by a report), the outcome records its send (the
        status code, attempt history and answers) and nothing else.
        """

    @abstractmethod
    async def shards_with_stale_flows(self, shards: Sequence[int], now_ms: int) -> set[int]:
        """Which of ``shards`` hold a non-terminal flow with ``next_attempt_at_ms <= now_ms``, or a
        ``delivered`` / ``dead`` one whose children are due that long (README "Child tasks": an ending that
        triggers children is written with ``next_attempt_at_ms``, :mod:`tjobs.delivery.child_triggers`): a plain
        read (no locks, a few statements per database) so a compensation pass leases only where there
        is something to lease. A shard named here may be empty by the time it is leased (another caller
        leased it); a shard with stale flows when the read runs is always named."""

    @abstractmethod
    async def lease_stale_flows(
        self, shard: int, now_ms: int, lease_ms: int, limit: int, *, held: Callable[[str], int | None] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        """Non-terminal flows of ``shard`` whose ``next_attempt_at_ms <= now_ms``, and ``delivered`` /
        ``dead`` ones whose children are due since then (see :meth:`shards_with_stale_flows`), with their
        tasks.

        Atomically pushes each returned flow's ``next_attempt_at_ms`` to ``now_ms + lease_ms`` so a
        second caller does not take the same flows before the lease ends. The task is ``None`` if it
        was deleted.

        In the same statement, a returned ``pending`` flow whose task exists has its ``attempts``
        counted up by one (stored and returned): the attempt a crashed or frozen node may have made
        without recording its outcome. The re-drive that follows therefore carries a higher attempt
        number than any attempt sent before (a receiver can tell a re-drive from a first attempt).
        ``sending`` flows and flows of deleted tasks keep their ``attempts``: they are closed, not
        re-driven. Nor is an attempt counted on a flow the caller's own deliverer holds (queued behind a slow
        app, say), for which ``held(flow.id)`` gives an instant instead of ``None``: it lost no attempt, its
        lease only moves it out of the next pass's way. Counted on every pass it is stale in, a flow queued for
        minutes would be stored ahead of what was sent: its node's hand-back, written at the attempts it knows,
        ignored, and its attempts spent unsent (``tests/unit/test_deliverer_hand_back.py``). Such a flow's next
        attempt is pushed to that instant where it is later than ``now_ms + lease_ms``: the caller's estimate
        of when it sends it, so a flow queued for long is not leased (written) again at every lease's end, and
        a node taking the shard after a crash re-drives it about when it would have gone.
        """
