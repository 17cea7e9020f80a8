"""The storage contract: where tasks, flows and apps live, and the one place fires are committed.

Every implementation (memory twin, SQLAlchemy on SQLite or MariaDB) passes the same contract suite in
``tests/contract/test_store_contract.py``. Routing is by shard: a task id carries its shard
(:func:`sharding.shard_of_task_id`), an idempotency key maps to one shard
(:func:`sharding.shard_for_key`), and a flow lives in its task's shard.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sharding import Topology
from sharding.shard_map import ShardMap
from tjobs.errors import StorageUnavailable
from tjobs.model import (
    App,
    DueTask,
    FireIntent,
    FireOutcome,
    FirePlan,
    Flow,
    FlowStatus,
    FlowUpdate,
    SloCounts,
    SloMinute,
    Task,
    TaskStatus,
)
from tjobs.stores.queries import FlowPosition, FlowQuery, TaskPosition, TaskQuery
from tjobs.targets.model import Target

if TYPE_CHECKING:
    from tjobs.stores.sql_move import MoveRow

DEAD_LETTERS = "dead_letters"
"""The key of an app's dead flows in :meth:`TaskStore.count_by_app` (beside the task statuses)."""

EDITABLE_FIELDS = frozenset({"name", "schedule", "callback", "payload", "misfire_policy", "delivery", "status"})
"""The task fields an owner's edit may set (:meth:`TaskStore.edit_task`)."""


@dataclass(frozen=True, slots=True)
class ServerSessions:
    """Sessions of one node on one database server, as recorded for :meth:`TaskStore.end_sessions`."""

    booted_at_s: int  # the server's start (epoch s): session ids are unique only within one run
    ids: list[int]


FirePlanner = Callable[[Task, FireIntent, int], FirePlan | None]
"""Pure: given the locked task row, the due intent and ``now_ms``, decide what the fire does.

Called by :meth:`TaskStore.commit_fires` inside the transaction, only for rows whose CAS matched.
Returning ``None`` leaves the task untouched and records nothing.
"""


class TaskStore(ABC):
    """Durable storage for one topology of shards.

    Errors: a database that cannot be reached raises :class:`tjobs.errors.StorageUnavailable`, and a
    failed call has written nothing.
    """

    topology: Topology

    @abstractmethod
    async def start(self) -> None:
        """Open connections. Schema creation is ``tjobs migrate``'s job, not this one's."""

    @abstractmethod
    async def close(self) -> None: ...

    async def check_layout(self) -> None:
        """Refuse to run on data written for another layout (topology, database prefix, servers):
        raise :class:`tjobs.stores.layout_record.StorageLayoutMismatch` naming each difference, or
        ``StorageNotMigrated`` without a layout record; record the layout if it is not yet (a first
        start). A node calls it once after :meth:`start`. Nothing persists in memory: no-op there."""
        return None

    @abstractmethod
    async def ping(self) -> None:
        """Raise :class:`StorageUnavailable` unless every instance answers."""

    # ---- database servers: per-server health and fencing ------------------------------------

    def database_servers(self) -> list[str]:
        """The names of the database servers this store spans, in topology order: ``host:port`` on
        MariaDB, the file on SQLite; never credentials. A store on one server names it once."""
        return ["local"]

    def server_of_shard(self, shard: int) -> str:
        """The name (one of :meth:`database_servers`) of the server holding ``shard``."""
        return self.database_servers()[0]

    async def ping_server(self, server: str) -> None:
        """Raise :class:`StorageUnavailable` unless ``server`` answers."""
        await self.ping()

    def fire_sessions(self) -> dict[str, ServerSessions]:
        """Per server name, the ids of this store's open connections that can hold task row locks
        (MariaDB ``CONNECTION_ID()``), for a successor to end (:meth:`end_sessions`); empty where
        sessions cannot be ended from outside (SQLite, memory)."""
        return {}

    async def end_sessions(self, server: str, sessions: ServerSessions) -> int:
        """End another node's sessions (its :meth:`fire_sessions`) on ``server``: their open
        transactions roll back and their row locks are released at once. Ids no longer open are
        skipped, and nothing is ended if the server restarted since they were recorded (ids start
        again at a restart, so they may name someone else's sessions). Returns how many were ended."""
        return 0

    # ---- the shard map: which server holds each logical database (sharding/shard_map.py) -------

    def configured_servers(self) -> list[str]:
        """The names of the configured servers (``storage.urls``), in the configured order."""
        return self.database_servers()

    def seed_shard_map(self) -> ShardMap:
        """The map the configured list gives at epoch 1: instance ``i`` on ``urls[i % len(urls)]``."""
        return ShardMap.seed(self.configured_servers(), self.topology)

    def use_shard_map(self, shard_map: ShardMap) -> None:
        """Route by ``shard_map`` from now on, and write under its epoch: a logical database whose
        fence admits only a later epoch refuses the write (:class:`tjobs.errors.StaleShardMap`,
        nothing written; :mod:`tjobs.stores.shard_fence`). A map no newer than the one in use is
        ignored. Before the first call the store routes by :meth:`seed_shard_map` under epoch 0."""
        if self._shard_map_in_use is None or shard_map.epoch > self._shard_map_in_use.epoch:
            self._shard_map_in_use = shard_map

    def shard_map(self) -> ShardMap | None:
        """The map in use (:meth:`use_shard_map`), ``None`` before the first."""
        return self._shard_map_in_use

    async def read_shard_map(self) -> ShardMap | None:
        """The embedded mode's recorded map (a cluster keeps its map in etcd); ``None`` before the first."""
        return self._recorded_shard_map

    async def read_shard_moves(self) -> list[MoveRow]:
        """The moves of logical databases recorded (``tjobs shards move``: in progress, or done and
        waiting for ``drop-old``), by database; read only. Only MariaDB databases move: other stores
        record none."""
        return []

    async def swap_shard_map(self, new: ShardMap, expected_epoch: int | None) -> bool:
        """Record ``new`` if the recorded map is at ``expected_epoch`` (``None``: if none is recorded);
        whether it was recorded. The embedded coordinator's storage of the map."""
        recorded = self._recorded_shard_map
        if (recorded.epoch if recorded is not None else None) != expected_epoch:
            return False
        self._recorded_shard_map = new
        return True

    _shard_map_in_use: ShardMap | None = None
    _recorded_shard_map: ShardMap | None = None  # memory: the record lives as long as the store

    @abstractmethod
    async def database_now_ms(self) -> int:
        """The database server's clock (instance 0), to detect skew with the node's clock."""

    # ---- apps -------------------------------------------------------------------------------

    @abstractmethod
    async def put_app(self, app: App) -> None:
        """Insert or replace the app with ``app.id``."""

    @abstractmethod
    async def get_app(self, app_id: str) -> App | None: ...

    @abstractmethod
    async def find_app_by_key_hash(self, api_key_hash: str) -> App | None: ...

    @abstractmethod
    async def list_apps(self) -> list[App]: ...

    @abstractmethod
    async def delete_app(self, app_id: str) -> bool:
        """Delete the app's row (its tasks are :meth:`delete_app_tasks`'s); ``False`` if it did not exist."""

    # ---- targets (named delivery targets, beside the apps) -------------------------------------

    @abstractmethod
    async def put_target(self, target: Target, expected_version: int | None) -> None:
        """Store ``target`` under ``(target.app_id, target.name)``.

        ``expected_version=None`` creates it: raise :class:`tjobs.errors.TargetExists` if the app
        already has a target of that name. Otherwise replace the stored target only if it is still at
        ``expected_version`` (its version becomes ``target.version``): raise
        :class:`tjobs.errors.TargetVersionConflict` carrying the stored version if it moved, or
        :class:`tjobs.errors.NotFound` if it is gone. Credentials are stored as given.
        """

    @abstractmethod
    async def get_target(self, app_id: str, name: str) -> Target | None: ...

    @abstractmethod
    async def list_targets(self, app_id: str, after_name: str | None, limit: int) -> list[Target]:
        """The app's targets by ascending name, strictly after ``after_name``."""

    @abstractmethod
    async def delete_target(self, app_id: str, name: str) -> bool:
        """Delete the target; ``False`` if it did not exist. Tasks naming it are not checked here
        (:meth:`count_target_references` is the caller's check)."""

    @abstractmethod
    async def count_target_references(self, app_id: str, name: str) -> int:
        """How many of the app's tasks that can still fire (``active`` or ``paused``) name the target.

        Bounded by the references, not by the tasks: every task naming targets has one reference row
        per target in its shard (``task_targets_TT``), written in the same transaction as the task
        (insert, callback edit, delete, retention purge), so the count reads that target's index range
        in each shard (one statement per logical database), never the tasks themselves.
        """

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

    # ---- loading (invariant 3 in docs/design.md: reads only) -----------------------------

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
    async def count_active(self, shard: int) -> int: ...

    # ---- the fire transaction (invariant 1 in docs/design.md) ----------------------------

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

    # ---- flows --------------------------------------------------------------------------------

    @abstractmethod
    async def insert_manual_flow(self, task_id: int, flow: Flow) -> Flow:
        """Record a manual ("trigger now") fire; raise :class:`tjobs.errors.Conflict` if it exists."""

    @abstractmethod
    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        """Write delivery outcomes, batched per database; terminal flows are never changed again.

        A non-terminal outcome with fewer ``attempts`` than stored is outdated (written by a node
        that lost the flow to a compensator claim, see :meth:`lease_stale_flows`) and is ignored, so
        a flow's attempt count never goes down while it is open. A terminal outcome always lands.
        """

    @abstractmethod
    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None: ...

    @abstractmethod
    async def list_flows(self, task_id: int, limit: int, before_scheduled_at_ms: int | None = None) -> list[Flow]:
        """A task's flows, newest ``scheduled_at_ms`` first."""

    @abstractmethod
    async def list_flows_by_status(
        self,
        shard: int,
        status: FlowStatus,
        app_id: str | None,
        limit: int,
        after: tuple[int, int] | None = None,
    ) -> list[Flow]:
        """Flows of ``shard`` in ``status`` (dead letters, for instance), ordered by (task, instant)."""

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
    async def redrive_flow(self, task_id: int, scheduled_at_ms: int, now_ms: int) -> Flow | None:
        """Put a ``dead`` flow back to ``pending`` (attempts kept, next attempt ``now_ms``).

        Returns the flow as stored afterwards, or ``None`` if it does not exist or is not dead
        (only a dead letter can be re-driven; nothing is changed then).
        """

    @abstractmethod
    async def count_tasks(self, app_id: str, shard: int, status: TaskStatus | None = None) -> int:
        """How many of the app's tasks live in ``shard`` (in ``status``, when given)."""

    @abstractmethod
    async def count_by_app(self, database_index: int) -> dict[str, dict[str, int]]:
        """Every app's tasks per status, and its dead letters (key :data:`DEAD_LETTERS`), over the
        shards of one logical database: one statement, no locks. Apps with nothing there are absent."""

    @abstractmethod
    async def count_rows(self, database_index: int) -> dict[str, int]:
        """How many tasks and flows (keys ``tasks``, ``flows``) one logical database holds, over all
        its shards: one statement, no locks (``tjobs shards status``, ``GET /v1/shards``)."""

    @abstractmethod
    async def shards_with_stale_flows(self, shards: Sequence[int], now_ms: int) -> set[int]:
        """Which of ``shards`` hold a non-terminal flow with ``next_attempt_at_ms <= now_ms``: a plain
        read (no locks, a few statements per database) so a compensation pass leases only where there
        is something to lease. A shard named here may be empty by the time it is leased (another caller
        leased it); a shard with stale flows when the read runs is always named."""

    @abstractmethod
    async def lease_stale_flows(
        self, shard: int, now_ms: int, lease_ms: int, limit: int
    ) -> list[tuple[Flow, Task | None]]:
        """Non-terminal flows of ``shard`` whose ``next_attempt_at_ms <= now_ms``, with their tasks.

        Atomically pushes each returned flow's ``next_attempt_at_ms`` to ``now_ms + lease_ms`` so a
        second caller does not take the same flows before the lease ends. The task is ``None`` if it
        was deleted.

        In the same statement, a returned ``pending`` flow whose task exists has its ``attempts``
        counted up by one (stored and returned): the attempt a crashed or frozen node may have made
        without recording its outcome. The re-drive that follows therefore carries a higher attempt
        number than any attempt sent before (a receiver can tell a re-drive from a first attempt).
        ``sending`` flows and flows of deleted tasks keep their ``attempts``: they are closed, not
        re-driven.
        """

    # ---- service levels: every node's per-minute counts, summed for the cluster ---------------

    @abstractmethod
    async def add_slo_minutes(self, node_id: str, minutes: Sequence[SloMinute]) -> None:
        """Add each minute's counts to ``node_id``'s row for that app and minute (created at zero), and
        to its row for that app and the minute's hour, in one transaction: a node writes only its own
        rows, so nodes never contend, counts a node adds twice for one minute (a pass within the
        minute, a restart) add up, and an hour row is always the sum of its minutes."""

    @abstractmethod
    async def sum_slo_minutes(self, app_id: str | None, from_minute: int, to_minute: int) -> SloCounts:
        """Every node's counts for the app (every app: ``None``) over minutes ``[from_minute,
        to_minute)``, summed, never the flow tables: the whole hours of the range from the hour rows,
        the minutes at its edges from the minute rows (:mod:`tjobs.stores.slo_hours`), the same counts
        as the minutes alone."""

    @abstractmethod
    async def purge_slo_minutes(self, before_minute: int, limit: int) -> int:
        """Delete what is stored of the hours wholly before ``before_minute``: up to ``limit`` hour rows
        and up to ``limit`` minute rows (retention drops whole hours, so no sum sees an hour whose
        minutes are partly gone); how many rows went."""

    # ---- retention ----------------------------------------------------------------------------

    @abstractmethod
    async def purge(self, shard: int, finished_before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` terminal flows scheduled before the cutoff and completed tasks
        last updated before it; return how many rows went. Small batches: never a long lock."""
