"""Tasks and their flows as owners see them: create, read, edit, delete, search, count, re-drive, purge.

Routing is by shard: a task id carries its shard (:func:`sharding.shard_of_task_id`), an idempotency
key maps to one shard (:func:`sharding.shard_for_key`), and a flow lives in its task's shard.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from tjobs.errors import StorageUnavailable
from tjobs.model import Flow, Task, TaskHealth, TaskStatus
from tjobs.stores.contracts.lifecycle import StoreLifecycle
from tjobs.stores.queries import FlowPosition, FlowQuery, TaskPosition, TaskQuery


@dataclass(frozen=True, slots=True)
class CountCorrection:
    """What a reconciliation added to one (app, status) count of a shard table: ``by`` tasks (the count
    read ``by`` fewer than the table held)."""

    app_id: str
    status: str
    by: int


EDITABLE_FIELDS = frozenset(
    {"name", "schedule", "callback", "payload", "misfire_policy", "delivery", "children", "status"}
)
"""The task fields an owner's edit may set (:meth:`TaskRecords.edit_task`)."""


class TaskRecords(StoreLifecycle):
    """The task and flow rows behind the API, the console and retention."""

    # ---- tasks ------------------------------------------------------------------------------

    @abstractmethod
    async def insert_task(self, task: Task) -> Task:
        """Insert a new task into the shard its id names.

        If ``task.key`` is set and ``(app_id, key)`` already exists, raise
        :class:`tjobs.errors.DuplicateKey` carrying the existing task id; the unique index decides,
        so concurrent inserts of one key leave exactly one row. A server that cannot be reached, or
        does not answer within the store's create timeout, raises
        :class:`tjobs.errors.StorageUnavailable` if nothing was sent (nothing stored) and
        :class:`tjobs.errors.StorageOutcomeUnknown` if the write was sent and may have committed.
        """

    @abstractmethod
    async def insert_tasks(self, tasks: Sequence[Task]) -> list[Task | int | StorageUnavailable]:
        """Insert many; per item the stored task, the existing task id on a duplicate key, or the
        :class:`tjobs.errors.StorageUnavailable` of an item whose database server could not be reached or
        did not answer in time (:class:`tjobs.errors.StorageOutcomeUnknown` if its write may have
        committed): the items of servers that answered are stored all the same.

        Never fails part-way for a taken id: an item whose freshly minted id is already stored is
        stored under another id of the same shard (:meth:`sharding.TaskIdGenerator.remint`), and the
        returned task carries it. (A caller that re-minted and retried the whole batch instead would
        store the items already written twice.)
        """

    @abstractmethod
    async def get_task(self, task_id: int) -> Task | None: ...

    @abstractmethod
    async def find_task_by_key(self, app_id: str, key: str) -> Task | None: ...

    @abstractmethod
    async def update_task(self, task: Task, expected_version: int) -> Task:
        """Replace the mutable fields of ``task`` if the row is still at ``expected_version``.

        The stored version becomes ``expected_version + 1`` (returned); otherwise raise
        :class:`tjobs.errors.VersionConflict` (or :class:`tjobs.errors.NotFound` if gone). Any
        wheel entry holding the old version can then no longer fire (invariant 1, docs/design.md).
        """

    @abstractmethod
    async def edit_task(
        self,
        task: Task,
        fields: Collection[str],
        *,
        expected_revision: int | None = None,
        from_status: TaskStatus | None = None,
    ) -> Task:
        """Apply an owner's edit to the stored row in one atomic step; return the row afterwards.

        Only ``fields`` (names of :data:`EDITABLE_FIELDS`) are copied from ``task``, so a fire that
        committed since ``task`` was read keeps its progress. ``"schedule"`` also takes ``task``'s
        ``next_run_at_ms``, restarts ``fire_count`` at 0 and reopens a ``completed`` task as
        ``active``. ``updated_at_ms`` is always taken; ``version`` and ``revision`` grow by one.

        With ``expected_revision``, raise :class:`tjobs.errors.VersionConflict` (carrying the stored
        revision) unless the row is at that revision; fires never move it. With ``from_status``,
        a row in another status is returned unchanged. Raise :class:`tjobs.errors.NotFound` if the
        task is gone.
        """

    @abstractmethod
    async def delete_task(self, task_id: int) -> bool:
        """Delete the task row; its flows stay as history. ``False`` if it did not exist."""

    @abstractmethod
    async def delete_task_cancelling_flows(self, task_id: int, now_ms: int) -> bool:
        """Delete the task row and, in the same transaction, mark its ``pending`` flows ``cancelled``
        (``next_attempt_at_ms`` cleared, ``updated_at_ms = now_ms``), so no node sends them again.

        Every flow stays as history; a ``sending`` (at-most-once) flow keeps its status, since its
        single attempt is already under way and its outcome is still to be recorded. ``False``, and
        nothing changed, if the task did not exist.
        """

    @abstractmethod
    async def delete_app_tasks(self, app_id: str, shard: int, limit: int, now_ms: int) -> int:
        """Delete up to ``limit`` of the app's tasks in ``shard``, each as
        :meth:`delete_task_cancelling_flows` deletes one, in one transaction; return how many went
        (fewer than ``limit``: none of the app's tasks is left there)."""

    @abstractmethod
    async def list_tasks(self, app_id: str, shard: int, after_id: int | None, limit: int) -> list[Task]:
        """The app's tasks in one shard, ascending id, strictly after ``after_id``."""

    # ---- flows --------------------------------------------------------------------------------

    @abstractmethod
    async def insert_manual_flow(self, task_id: int, flow: Flow) -> Flow:
        """Record a manual ("trigger now") fire; raise :class:`tjobs.errors.Conflict` if it exists."""

    @abstractmethod
    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None: ...

    @abstractmethod
    async def list_flows(
        self,
        task_id: int,
        limit: int,
        before_scheduled_at_ms: int | None = None,
        after_scheduled_at_ms: int | None = None,
    ) -> list[Flow]:
        """A task's flows, newest ``scheduled_at_ms`` first: the newest ``limit`` scheduled strictly before
        ``before_scheduled_at_ms`` (an older page), or with ``after_scheduled_at_ms`` the ``limit`` scheduled
        just after it, the oldest of those strictly after (a newer page), still answered newest first.
        Each page is one range of the primary key ``(task_id, scheduled_at)``, never an offset."""

    @abstractmethod
    async def task_health(self, task_ids: Collection[int], since_ms: int, cap: int) -> dict[int, TaskHealth]:
        """For each of ``task_ids`` (a page's, in any shards): its newest flow, and of its flows scheduled at
        or after ``since_ms`` the newest ``cap`` at most, counted by status (:class:`TaskHealth`; a task
        with no flow, or of no shard, gets an empty one). Reads only, per task two ranges of the primary
        key from the newest end: at most ``cap + 1`` rows whatever the task's fire rate."""

    @abstractmethod
    async def redrive_flow(self, task_id: int, scheduled_at_ms: int, now_ms: int) -> Flow | None:
        """Put a ``dead`` flow back to ``pending`` (attempts kept, next attempt ``now_ms``). A run log its
        app's log retention purged (:attr:`tjobs.model.Flow.run_log_purged`) starts again empty, so the
        new runs' lines are kept; a log still held is kept.

        Returns the flow as stored afterwards, or ``None`` if it does not exist or is not dead
        (only a dead letter can be re-driven; nothing is changed then).
        """

    # ---- searches across shards (tjobs/stores/queries.py: the queries, the orders, the positions) ----

    @abstractmethod
    async def search_flows(
        self, query: FlowQuery, reads: Mapping[int, FlowPosition | None], limit: int
    ) -> dict[int, list[Flow]]:
        """For each shard of ``reads``: up to ``limit`` of its flows matching ``query``, newest first
        (``(scheduled_at_ms, task_id)`` descending), strictly after the shard's position (``None``:
        from the newest). A shard that returns fewer than ``limit`` has no more.

        Reads only, and never a scan: each shard is one ordered index range (the app and, when given,
        the status, scheduled_at; a task's own flows by the primary key), read up to ``limit`` rows.
        The shards of one logical database are read in one statement, a few statements at a time per
        server, so a search takes no more of a server than that however many shards it reads.
        """

    @abstractmethod
    async def search_tasks(
        self, query: TaskQuery, reads: Mapping[int, TaskPosition | None], limit: int
    ) -> dict[int, list[Task]]:
        """For each shard of ``reads``: up to ``limit`` of its tasks matching ``query`` in the query's
        order (newest first: ``id`` descending; with a name prefix: ``(name, id)`` ascending), strictly
        after the shard's position. A shard that returns fewer than ``limit`` has no more.

        Reads only, as :meth:`search_flows`: each shard is one ordered index range of the app's tasks
        (by name, status, schedule kind, or id; a key is one row of the unique key), other filters
        applied on that range.
        """

    @abstractmethod
    async def count_flows(self, query: FlowQuery, caps: Mapping[int, int]) -> dict[int, int]:
        """For each shard of ``caps``: how many of its flows match ``query``, counting at most the
        shard's cap (a count that reached it means "at least"). The same index range as
        :meth:`search_flows`, stopped after ``cap`` rows: a count never reads more than its caps."""

    @abstractmethod
    async def task_names(self, task_ids: Collection[int]) -> dict[int, str]:
        """The names of those of ``task_ids`` that exist (a deleted task is absent), one read per
        shard holding some; ids outside the topology are ignored."""

    # ---- counts -------------------------------------------------------------------------------

    @abstractmethod
    async def count_tasks(self, app_id: str, shard: int, status: TaskStatus | None = None) -> int:
        """How many of the app's tasks live in ``shard`` (in ``status``, when given)."""

    @abstractmethod
    async def read_task_counts(
        self, database_index: int, app_ids: Collection[str] | None = None
    ) -> dict[str, dict[str, int]]:
        """Each app's tasks per status (``active``, ``paused``, ``completed``) over the shards of one
        logical database, as its counts hold them now: never a read of the tasks. One statement, an
        index range per app of ``app_ids`` (every app's when ``None``); apps with no task there are
        absent, statuses with none may be absent or 0.

        The counts change by deltas in the transaction of every write that creates, deletes or changes
        the status of a task (creates single and batch, edits, pauses and resumes, deletes, an app's
        deletion, purges, and a fire that completes a task; a fire that only moves ``next_run_at``
        changes none), so a read sees exactly the writes committed before it, on every backend."""

    @abstractmethod
    async def reconcile_task_counts(self, shard: int) -> list[CountCorrection]:
        """Make the counts of ``shard``'s table equal to its tasks, reading that table only: its count
        rows and its tasks in one snapshot, then each difference added to the rows as they are now, so
        writers committing meanwhile are neither lost nor counted twice and none of them waits for the
        count. What was corrected (empty when the counts were right); of two reconciliations of one
        table at once, one applies its corrections and the other none."""

    @abstractmethod
    async def count_dead_letters(self, database_index: int, app_ids: Sequence[str]) -> dict[str, int]:
        """Each app's dead flows over the shards of one logical database, read now (what a page that
        says "now" shows): every app of ``app_ids`` a key, 0 when it has none. One statement, an index
        range per app and shard (``app_id, status``), no locks."""

    @abstractmethod
    async def count_rows(self, database_index: int) -> dict[str, int]:
        """How many tasks and flows (keys ``tasks``, ``flows``) one logical database holds, over all
        its shards: one statement, no locks (``tjobs shards status``, ``GET /v1/shards``)."""

    # ---- retention ----------------------------------------------------------------------------

    @abstractmethod
    async def purge(self, shard: int, finished_before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` terminal flows scheduled before the cutoff, oldest first, and then (room
        left) completed tasks last updated before it, oldest first; return how many rows went. An open flow
        (pending, sending, running, cancelling) is never deleted, however old. The flows' read costs the
        rows it deletes plus the open flows older than the cutoff, not the table: nothing old enough is one
        index probe (migration 0025); the completed tasks' read costs the tasks it deletes, nothing old
        enough one probe (0026). Small batches: never a long lock."""
