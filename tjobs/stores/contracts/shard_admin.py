"""Shard administration: the database servers behind the shards, the shard map that places logical
databases on them (:mod:`sharding.shard_map`), the layout record, the moves, and other nodes' sessions.

A move of a logical database (:mod:`tjobs.cluster.shard_move` runs its steps) asks storage for its
records and, per move, a :class:`DatabaseMove`: the copy with change capture and both copies' fences.

A store on one server (SQLite, the memory twin) answers with the defaults here: one server named
``local``, no sessions to end, no moves; the memory twin keeps its recorded map for as long as it lives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass

from sharding import Topology
from sharding.shard_map import ShardMap
from tjobs.errors import TjobsError
from tjobs.stores.contracts.lifecycle import StoreLifecycle
from tjobs.stores.copy_pace import CopyPace

RETIRED_EPOCH = 1 << 62
"""The fence of a copy that was moved away: no map ever reaches it."""


class StorageLayoutMismatch(TjobsError):
    """The configured storage layout is not the one the existing data was written with."""


class ShardMapMismatch(StorageLayoutMismatch):
    """The configured servers (``storage.urls``) are not the shard map's: refused (a configuration
    mistake is refused, never absorbed) until the list is corrected, or the operator re-seeds the
    map's server list (``tjobs shards reseed``)."""


def check_shard_map(stored: ShardMap, configured_servers: list[str], topology: Topology, where: str) -> None:
    """Raise :class:`ShardMapMismatch` naming each difference between the configured servers (in
    order) and the stored map's, or a map laid out for another number of logical databases."""
    if len(stored.placement) != topology.database_count:
        raise ShardMapMismatch(
            f"refusing to use {where}: the shard map places {len(stored.placement)} logical databases, "
            f"topology {topology} has {topology.database_count}"
        )
    problems = stored.differences(configured_servers)
    if problems:
        raise ShardMapMismatch(
            f"refusing to use {where}: {'; '.join(problems)} (shard map epoch {stored.epoch}). Correct "
            "storage.urls; if the server list really changed, run `tjobs shards reseed` with the new settings."
        )


@dataclass(frozen=True, slots=True)
class ServerSessions:
    """Sessions of one node on one database server, as recorded for :meth:`ShardAdmin.end_sessions`."""

    booted_at_s: int  # the server's start (epoch s): session ids are unique only within one run
    ids: list[int]


@dataclass(frozen=True, slots=True)
class MoveRow:
    """A move as recorded: where it goes, its step, the source's fence before it started, and its
    progress (what ``GET /v1/shards/moves``, the console and the move metrics show)."""

    database: int
    source: str
    target: str
    state: str
    source_fence: int
    epoch: int  # the map epoch that names the target (0 until the cut-over published it)
    rows_copied: int = 0  # by the bulk copy so far
    lag_rows: int = 0  # changed rows the target is behind the source (catch-up backlog), last measured
    started_at_ms: int = 0
    finished_at_ms: int | None = None  # when the map named the target
    cut_over_pause_ms: int | None = None  # writes to the database refused while cutting over
    tables_copied: tuple[tuple[str, int], ...] = ()
    """(table, rows) of each table the bulk copy finished, in copy order: a rerun skips them."""


class DatabaseMove(ABC):
    """The storage side of moving one logical database from its source server to a target: the copy,
    the capture of the changes written meanwhile, and both copies' fences. Each step is safe to repeat
    (a rerun after a crash picks up where the last run stopped)."""

    pace: CopyPace
    """How hard the copy and a paced catch-up may work the servers (:mod:`tjobs.stores.copy_pace`)."""

    @abstractmethod
    async def prepare(self) -> bool:
        """The target's database and tables, its fence retired (nobody may write there); on the source,
        every key written from now on is recorded. Creates only what is missing, so that a rerun asks
        the server for nothing it would answer with a warning. Returns whether everything was there
        already (the capture has run since an earlier run, which left every table on the target): only
        then may :meth:`copy` skip the tables that run copied."""

    @abstractmethod
    async def copy(
        self,
        progress: Callable[[str, int], Awaitable[None]] | None = None,
        *,
        done: Collection[str] = (),
        table_copied: Callable[[str, int], Awaitable[None]] | None = None,
    ) -> int:
        """Copy every row of every table but those in ``done`` to the target, batch by batch in
        primary-key order, resting after each as :attr:`pace` says; return how many rows this call
        copied. ``progress(table, rows_so_far)`` after each batch, ``table_copied(table, rows)`` once a
        table is copied whole (a changed row of it is in the capture from then on)."""

    @abstractmethod
    async def backlog(self) -> int:
        """How many recorded keys the target has not caught up with."""

    @abstractmethod
    async def catch_up(self, rounds: int | None = None, paced: bool = True) -> int:
        """Apply the recorded keys to the target, oldest first, until none is left (or ``rounds``
        batches), resting as :attr:`pace` says unless not ``paced``; return how many were applied."""

    @abstractmethod
    async def stop_capture(self) -> None:
        """Stop recording the source's writes (after the cut-over, or on an abort)."""

    @abstractmethod
    async def source_fence(self) -> int:
        """The source copy's fence epoch; :data:`RETIRED_EPOCH` for a copy with no table left (a drop of
        it that did not finish: nothing can write there)."""

    @abstractmethod
    async def fence_source(self, epoch: int) -> None:
        """Set the source copy's fence to ``epoch``; waits for the writers that passed it before, so with
        :data:`RETIRED_EPOCH` no write lands on the source afterwards."""

    @abstractmethod
    async def fence_target(self, epoch: int) -> None:
        """Set the target copy's fence to ``epoch`` (the epoch of the map that will name it)."""

    @abstractmethod
    async def drop(self, on_target: bool) -> None:
        """Drop the database's copy on the target (an aborted move) or on the source (``drop-old``)."""

    @abstractmethod
    async def exists(self, on_target: bool) -> bool:
        """Whether the database has a copy on the target (or on the source)."""


class DatabaseMoves(ABC):
    """The moves recorded (``tjobs_shard_moves`` in logical database 0, which never moves) and the
    storage side of each; opened by :meth:`ShardAdmin.database_moves`, closed by its user."""

    @abstractmethod
    async def all(self) -> list[MoveRow]:
        """Every recorded move, by database."""

    @abstractmethod
    async def get(self, database: int) -> MoveRow | None: ...

    @abstractmethod
    async def put(self, row: MoveRow, now_ms: int) -> None:
        """Record ``row`` (in place of the database's recorded move, if any)."""

    @abstractmethod
    async def delete(self, database: int) -> None: ...

    @abstractmethod
    def move(self, row: MoveRow, placement: Sequence[str]) -> DatabaseMove:
        """The storage side of ``row``'s move, the other logical databases placed as ``placement`` says.
        Raise :class:`ValueError` if the source or the target is not a configured server."""

    @abstractmethod
    async def fence(self, placement: Sequence[str], database: int) -> int:
        """The fence epoch of ``database`` on its server under ``placement`` (:class:`ValueError` as
        :meth:`move`)."""

    @abstractmethod
    async def close(self) -> None: ...


class ShardAdmin(StoreLifecycle):
    """Servers, the shard map and its fence, moves, the layout record, sessions."""

    async def check_layout(self) -> None:
        """Refuse to run on data written for another layout (topology, database prefix, servers):
        raise :class:`StorageLayoutMismatch` naming each difference, or
        ``StorageNotMigrated`` without a layout record; record the layout if it is not yet (a first
        start). A node calls it once after :meth:`start`. Nothing persists in memory: no-op there."""
        return None

    # ---- database servers: per-server health and fencing ------------------------------------

    def database_servers(self) -> list[str]:
        """The names of the database servers this store spans, in topology order: ``host:port`` on
        MariaDB, the file on SQLite; never credentials. A store on one server names it once."""
        return ["local"]

    def server_of_shard(self, shard: int) -> str:
        """The name (one of :meth:`database_servers`) of the server holding ``shard``."""
        return self.database_servers()[0]

    async def ping_server(self, server: str) -> None:
        """Raise :class:`tjobs.errors.StorageUnavailable` unless ``server`` answers."""
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

    async def swap_shard_map(self, new: ShardMap, expected_epoch: int | None) -> bool:
        """Record ``new`` if the recorded map is at ``expected_epoch`` (``None``: if none is recorded);
        whether it was recorded. The embedded coordinator's storage of the map."""
        recorded = self._recorded_shard_map
        if (recorded.epoch if recorded is not None else None) != expected_epoch:
            return False
        self._recorded_shard_map = new
        return True

    def database_moves(
        self, batch_rows: int, pace: CopyPace, rest: Callable[[float], Awaitable[None]]
    ) -> DatabaseMoves:
        """The moves of logical databases (``tjobs shards move``): their records and, per move, the copy
        in batches of ``batch_rows``, paced by ``pace``, resting with ``rest``. Only SQL databases move:
        other stores raise :class:`ValueError`."""
        raise ValueError("only SQL databases move: storage.urls names no SQL server")

    async def read_shard_moves(self) -> list[MoveRow]:
        """The moves of logical databases recorded (``tjobs shards move``: in progress, or done and
        waiting for ``drop-old``), by database; read only. Only MariaDB databases move: other stores
        record none."""
        return []

    _shard_map_in_use: ShardMap | None = None
    _recorded_shard_map: ShardMap | None = None  # memory: the record lives as long as the store
