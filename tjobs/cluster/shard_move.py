"""Moving one logical database to another MariaDB server while the cluster fires and registers
(``tjobs shards move``, ``--abort``, ``drop-old``). Storage does its part through the shard-administration
contract (:class:`tjobs.stores.contracts.DatabaseMoves`); on SQL, :mod:`tjobs.stores.sql_move` holds the
statements and says why it is a chunked copy with change capture rather than MariaDB replication.

A move goes through recorded states (``tjobs_shard_moves`` in the first logical database, which
never moves; the map itself is the coordinator's, etcd or the record), so a rerun after the mover
died at any step picks up where it stopped, and every step is safe to repeat:

``copying``
    The target gets the database's tables with its fence retired (nobody may write there), the source
    records every written key (triggers), and every row is copied in primary-key batches. Each table
    copied whole is recorded (``MoveRow.tables_copied``): a rerun copies only the others, unless the
    capture or a table on the target went missing meanwhile (then it copies every table again).
``catching_up``
    The recorded keys are applied to the target until fewer than ``cut_over_below`` are left.
``cutting_over``
    The source's fence goes to ``RETIRED`` (it waits for the writers that passed it; every later
    writer is refused: fires are retried, an API write answers 503 with ``Retry-After``), the last
    keys are applied, the target's fence goes to the next epoch, and the map naming the target is
    published by compare-and-set (and written to the map record too, so a cluster re-seeding from it
    gets the new map). The nodes reload it and write to the target; a node still on the old map is
    refused by the source, whatever its timing.
``done``
    The old copy stays, read-only (fence retired), until ``drop-old`` drops it.

The copy and the catch-up rest after each batch as the move's :class:`~tjobs.stores.copy_pace.CopyPace`
says (``--copy-duty``, ``--max-rows-per-s``), so that the servers keep time for the firing; a catch-up
that does not gain on the writes goes unpaced (:meth:`ShardMover._catch_up`).

At every moment at most one copy admits writers under the map that names it: before the cut-over
the source (the target's fence is retired); after it the target (the source's is). A mover killed
while cutting over leaves the database refusing writes (the source fenced, the map still naming
it) until it is rerun (finishing) or aborted (restoring the source's fence). ``--abort`` before the
map names the target puts the source back as it was and drops the target copy; after, there is
nothing to abort (the move is done). Logical database 0 never moves. One move at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from sharding.shard_map import PINNED_DATABASE, ShardMap
from tjobs.cluster.base import Coordinator
from tjobs.errors import Conflict
from tjobs.model import CATCHING_UP, COPYING, CUTTING_OVER, DONE
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts import RETIRED_EPOCH, DatabaseMove, MoveRow
from tjobs.stores.copy_pace import CopyPace

logger = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0  # how often a move's progress (rows copied, lag) is written to its record
CATCH_UP_ROUNDS_PER_CHECK = 10  # catch-up batches between two looks at the backlog (is it gaining?)

Report = Callable[[str], None]


class MoveRefused(Conflict):
    """The move cannot start, continue or be aborted as asked (the message says why)."""

    code = "move_refused"


class ShardMover:
    """Runs, resumes, aborts and finishes moves of logical databases (see the module)."""

    def __init__(
        self,
        coordinator: Coordinator,
        store: TaskStore,
        *,
        batch_rows: int = 1000,
        cut_over_below: int = 200,
        pace: CopyPace | None = None,
        report: Report | None = None,
        rest: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.coordinator = coordinator
        self.store = store
        self.batch_rows = batch_rows
        self.cut_over_below = cut_over_below
        self.pace = pace or CopyPace()
        self.report: Report = report or (lambda _: None)
        self._progress_recorded_at = float("-inf")
        # the records and each move's copy, resting with ``rest`` between batches (a test records it)
        self.moves = store.database_moves(batch_rows, self.pace, rest)

    async def close(self) -> None:
        await self.moves.close()

    def _copy(self, row: MoveRow, shard_map: ShardMap) -> DatabaseMove:
        try:
            return self.moves.move(row, shard_map.placement)
        except ValueError as error:  # a server storage.urls does not list
            raise _unlisted(error) from error

    async def _map(self) -> ShardMap:
        shard_map = await self.coordinator.read_shard_map()
        if shard_map is None:
            raise MoveRefused("no shard map is stored yet: start a node or run tjobs migrate first")
        return shard_map

    async def _record(self, row: MoveRow) -> None:
        """Record a move's progress (rows copied, lag) at most every :data:`PROGRESS_EVERY_S` (a
        write to the record per batch would slow the copy and the catch-up): no new step, nothing
        logged."""
        now = time.monotonic()
        if now - self._progress_recorded_at >= PROGRESS_EVERY_S:
            await self.moves.put(row, _now_ms())
            self._progress_recorded_at = now

    async def _save(self, row: MoveRow) -> MoveRow:
        await self.moves.put(row, _now_ms())
        logger.info(
            "move of logical database %d to %s: %s",
            row.database,
            row.target,
            row.state,
            extra={"action": "shard_move_state"},
        )
        self.report(f"logical database {row.database}: {row.state}")
        return row

    # ---- the move -----------------------------------------------------------------------------------

    async def move(self, database: int, target: str) -> MoveRow:
        """Move ``database`` to ``target`` (a server of the map), or carry on with the recorded move."""
        shard_map = await self._map()
        row = await self.moves.get(database)
        if row is None:
            row = await self._start(shard_map, database, target)
        elif row.state == DONE and row.target != target:
            raise MoveRefused(
                f"logical database {database} was moved to {row.target}: "
                f"tjobs shards drop-old --db {database} before moving it again"
            )
        elif row.target != target:
            raise MoveRefused(
                f"logical database {database} is being moved to {row.target}: rerun with --to {row.target}, or --abort"
            )
        copy = self._copy(row, shard_map)
        if row.state == COPYING:
            row = await self._copy_rows(row, copy)
        if row.state == CATCHING_UP:
            backlog = await self._catch_up(row, copy)
            row = await self._save(replace(row, state=CUTTING_OVER, lag_rows=backlog))
        if row.state == CUTTING_OVER:
            row = await self._cut_over(row, copy)
        return row

    async def _copy_rows(self, row: MoveRow, copy: DatabaseMove) -> MoveRow:
        """The bulk copy, resumed: the tables an earlier run recorded as copied whole are skipped if
        the capture has run since (:meth:`DatabaseMove.prepare`); each table is recorded as it ends."""
        resumable = await copy.prepare()
        if row.tables_copied and not resumable:
            self.report("the change capture or a table on the target is gone since the last run: copying every table")
            row = replace(row, tables_copied=(), rows_copied=0)
        elif row.tables_copied:
            self.report(
                f"resuming the copy: {len(row.tables_copied)} tables "
                f"({sum(rows for _, rows in row.tables_copied):,} rows) were copied by an earlier run"
            )
        copying = row
        before = sum(rows for _, rows in row.tables_copied)

        async def copied_so_far(table: str, rows: int) -> None:
            self.report(f"copied {rows:,} rows ({table})")
            await self._record(replace(copying, rows_copied=before + rows))

        async def table_copied(table: str, rows: int) -> None:
            nonlocal copying
            tables = (*copying.tables_copied, (table, rows))
            copying = replace(copying, tables_copied=tables, rows_copied=sum(n for _, n in tables))
            await self.moves.put(copying, _now_ms())  # not throttled: a rerun starts from here

        copied = await copy.copy(
            copied_so_far, done={table for table, _ in row.tables_copied}, table_copied=table_copied
        )
        total = sum(rows for _, rows in copying.tables_copied)
        self.report(f"copied {copied:,} rows this run ({total:,} in all); catching up")
        return await self._save(replace(copying, state=CATCHING_UP, rows_copied=total))

    async def _catch_up(self, row: MoveRow, copy: DatabaseMove) -> int:
        """Apply the changed rows until fewer than ``cut_over_below`` are behind; returns that backlog.

        Between two looks at the backlog it applies up to :data:`CATCH_UP_ROUNDS_PER_CHECK` batches,
        paced. If the backlog did not shrink meanwhile, the writes come at least as fast as the paced
        catch-up applies them: from then on it runs unpaced (the move must finish, and the cut-over
        cannot start while the backlog is above the threshold). If even that cannot keep up, it goes
        on reporting the growing backlog until the writes slow down or the operator stops it (the
        record keeps ``catching_up``: a rerun resumes, ``--abort`` rolls back)."""
        paced = not copy.pace.unpaced
        behind: int | None = None
        while (backlog := await copy.backlog()) >= self.cut_over_below:
            if paced and behind is not None and backlog >= behind:
                paced = False
                logger.warning(
                    "move of logical database %d: the paced catch-up is not gaining on the writes "
                    "(%d then %d changed rows behind); catching up unpaced",
                    row.database,
                    behind,
                    backlog,
                    extra={"action": "shard_move_unpaced"},
                )
                self.report(f"the paced catch-up is not gaining on the writes ({behind:,} → {backlog:,}): unpaced now")
            behind = backlog
            self.report(f"catching up: {backlog:,} changed rows behind")
            await self._record(replace(row, lag_rows=backlog))
            rounds = min(CATCH_UP_ROUNDS_PER_CHECK, max(1, backlog // self.batch_rows))
            await copy.catch_up(rounds=rounds, paced=paced)
        return backlog

    async def _start(self, shard_map: ShardMap, database: int, target: str) -> MoveRow:
        if database == PINNED_DATABASE:
            raise MoveRefused(f"logical database {PINNED_DATABASE} holds the apps and the map record; it does not move")
        if not 0 <= database < len(shard_map.placement):
            raise MoveRefused(f"no logical database {database} (0..{len(shard_map.placement) - 1})")
        if target not in shard_map.servers:
            raise MoveRefused(
                f"the shard map does not know {target}: add it to storage.urls and run tjobs shards reseed"
            )
        source = shard_map.server_of(database)
        if source == target:
            raise MoveRefused(f"logical database {database} is on {target} already")
        busy = [other for other in await self.moves.all() if other.state != DONE]
        if busy:
            raise MoveRefused(f"logical database {busy[0].database} is being moved: one move at a time")
        try:
            fence = await self.moves.fence(shard_map.placement, database)
        except ValueError as error:
            raise _unlisted(error) from error
        self.report(f"moving logical database {database} from {source} to {target} (map epoch {shard_map.epoch})")
        return await self._save(MoveRow(database, source, target, COPYING, fence, 0, started_at_ms=_now_ms()))

    async def _cut_over(self, row: MoveRow, copy: DatabaseMove) -> MoveRow:
        started = time.monotonic()
        await copy.fence_source(RETIRED_EPOCH)  # waits for the writers holding its share lock
        applied = await copy.catch_up(paced=False)  # writes are refused meanwhile: no rest
        while True:
            current = await self._map()
            if current.server_of(row.database) == row.target:
                published = current  # a run before this one published it
                break
            if await self.moves.get(row.database) != row:
                raise MoveRefused(f"the move of logical database {row.database} was aborted meanwhile")
            published = current.moved(row.database, row.target)
            await copy.fence_target(published.epoch)
            if await self.coordinator.replace_shard_map(published, current.epoch):
                break
        pause_s = time.monotonic() - started
        self.report(
            f"cut over: writes to logical database {row.database} paused {pause_s:.2f} s "
            f"({applied:,} last changes); map epoch {published.epoch} names {row.target}"
        )
        await self._record_map(published)
        await copy.stop_capture()
        done = replace(
            row,
            state=DONE,
            epoch=published.epoch,
            lag_rows=0,
            finished_at_ms=_now_ms(),
            cut_over_pause_ms=round(pause_s * 1000),
        )
        return await self._save(done)

    async def _record_map(self, published: ShardMap) -> None:
        """The map record as well as the coordinator's map (a cluster re-seeding from the record after
        losing etcd must get this map, not an older one)."""
        for _ in range(3):
            recorded = await self.store.read_shard_map()
            if recorded is not None and recorded.epoch >= published.epoch:
                return
            if await self.store.swap_shard_map(published, recorded.epoch if recorded is not None else None):
                return
        raise MoveRefused("the shard map record changed three times while being written; rerun the move")

    # ---- abort and drop-old -------------------------------------------------------------------------

    async def abort(self, database: int) -> MoveRow:
        """Undo a move the map does not yet name the target of: the source's fence back as it was, no
        capture, the target copy dropped, the record gone."""
        row = await self.moves.get(database)
        if row is None:
            raise MoveRefused(f"no move of logical database {database} is recorded")
        shard_map = await self._map()
        if row.state == DONE or shard_map.server_of(database) == row.target:
            raise MoveRefused(
                f"logical database {database} is on {row.target} already: the move is done "
                "(drop-old removes the old copy)"
            )
        copy = self._copy(row, shard_map)
        await copy.fence_source(row.source_fence)
        await copy.stop_capture()
        await copy.drop(on_target=True)
        await self.moves.delete(database)
        self.report(f"move of logical database {database} to {row.target} aborted; it stays on {row.source}")
        return row

    async def drop_old(self, database: int) -> MoveRow:
        """Drop the old copy of a finished move (it is retired: nothing writes it)."""
        row = await self.moves.get(database)
        if row is None or row.state != DONE:
            raise MoveRefused(f"no finished move of logical database {database} is recorded")
        shard_map = await self._map()
        if shard_map.server_of(database) != row.target:
            raise MoveRefused(f"the shard map places logical database {database} on {shard_map.server_of(database)}")
        copy = self._copy(row, shard_map)
        if await copy.source_fence() != RETIRED_EPOCH:
            raise MoveRefused(f"the copy of logical database {database} on {row.source} is not retired")
        await copy.drop(on_target=False)
        await self.moves.delete(database)
        self.report(f"dropped the old copy of logical database {database} on {row.source}")
        return row


def _unlisted(error: ValueError) -> MoveRefused:
    return MoveRefused(f"{error}: add it to storage.urls and run tjobs shards reseed first")


def _now_ms() -> int:
    return int(time.time() * 1000)
