"""Fencing by shard-map epoch, and the embedded mode's copy of the shard map.

Every logical database holds one ``tjobs_fence`` row: the lowest shard-map epoch a writer must hold
to write to this copy of it. ``tjobs migrate`` writes 0 (anyone); a move writes the new epoch into the
target copy before the map names it, and :data:`RETIRED_EPOCH` into the copy it leaves, so a node that
still routes by an older map can no longer commit there, whatever its timing.

On MariaDB the check rides inside the writing transaction, in a round trip it sends anyway (the fire
transaction's writes, a registration's ``INSERT``\\ s, the flow outcomes' multi-statement, and the first
statement of every other write: :mod:`tjobs.stores.sql_fenced`; inside a run's report's read, as
:func:`fence_derived_table`): :func:`fence_statement` reads each touched
database's fence row ``LOCK IN SHARE MODE`` and fails the statement (error 1242, a scalar subquery of
two rows) when the row's epoch is above the writer's. The shared lock is held to COMMIT, so the
mover's ``UPDATE`` of the fence waits for every transaction that passed the check, and no transaction
that starts after it passes. A fire transaction covers every database of its server, so one database's
fence refuses the whole share: the store reads the fences and commits the other databases' intents
again at once, without the refused ones (:meth:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore.commit_fires`),
and a cut-over delays only the moving database's fires. SQLite's "servers" are directories of one
host: nothing moves between them, so nothing is checked there.

In the embedded mode the map itself lives in ``tjobs_shard_map`` (one row) of the first logical
database, which never moves (:data:`sharding.shard_map.PINNED_DATABASE`); a cluster keeps it in etcd.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from sqlalchemy import MetaData, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from sharding.shard_map import ShardMap
from tjobs.errors import StaleShardMap
from tjobs.stores.contracts.shard_admin import RETIRED_EPOCH as RETIRED_EPOCH  # the contract's
from tjobs.stores.layout_record import StorageNotMigrated
from tjobs.stores.schema import SHARD_FENCE_TABLE, SHARD_MAP_TABLE, _table, shard_map_schema_items
from tjobs.stores.sql_layout import DatabaseHome, Layout, mysql_errno

FENCED_ERRNO = 1242  # "Subquery returns more than 1 row": what the fence statement raises when it fails

_MAP_ROW = 1
_SHARD_MAP = _table(MetaData(), SHARD_MAP_TABLE, None, shard_map_schema_items(), [])


def fence_table_sql(home: DatabaseHome) -> str:
    """The fence table of ``home``, quoted and qualified (MariaDB)."""
    return f"`{home.schema}`.`{SHARD_FENCE_TABLE}`"


# one database's check: its fence row share-locked, 1 where it admits the bound epoch, error 1242 where not (the
# subquery of two rows, evaluated only then). The subquery names no column of the row: a correlated one (it was
# `(SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE f.epoch > %s)`) gets MariaDB's subquery cache, an in-memory
# temporary table created at each execution (issue 30: one per run report, per flush, per create and fire of one
# database; measured: a fence over several databases, a UNION ALL of checks, made none)
_CHECK = (
    "SELECT CASE WHEN f.epoch > %s THEN (SELECT 1 UNION ALL SELECT 1) ELSE 1 END AS admitted "
    "FROM {} f LOCK IN SHARE MODE"
)


def fence_statement(homes: Sequence[DatabaseHome], epoch: int) -> tuple[str, list[int]]:
    """One statement that share-locks the fence row of each of ``homes`` and fails with error 1242
    unless every one admits ``epoch``; it returns one row per database when it passes."""
    ordered = sorted(homes, key=lambda home: home.index)
    sql = " UNION ALL ".join(f"({_CHECK.format(fence_table_sql(home))})" for home in ordered)
    return sql, [epoch] * len(ordered)


def fence_derived_table(home: DatabaseHome) -> str:
    """:func:`fence_statement`'s check of ``home`` inside another statement, as the derived table ``fence``
    of one row (column ``admitted``; the epoch is its one ``%s``): the statement must test
    ``fence.admitted = 1`` (a column nobody names is never computed) and read the table first
    (``fence STRAIGHT_JOIN …``), so the fence row is share-locked before the rows it guards, as when the
    fence is a statement of its own (a run's report: :mod:`tjobs.stores.sql_run_writes`). MariaDB's
    ``FOR UPDATE`` leaves a derived table's rows to its own lock clause, so the share lock stays shared."""
    return f"({_CHECK.format(fence_table_sql(home))}) fence"


def fence_union_part(home: DatabaseHome, width: int) -> str:
    """:func:`fence_statement`'s check of ``home`` as a part of a ``UNION ALL`` of ``width`` columns, ahead of
    the parts that read the rows it guards (a group of runs' reports: :func:`tjobs.stores.sql_run_writes.
    decide_runs`): the fence row share-locked, one row of ``NULL`` s where it admits the bound epoch (its one
    ``%s``), error 1242 where not. The check is in the ``WHERE`` and the row matches it: under ``READ
    COMMITTED`` InnoDB lets go of a row the ``WHERE`` rejects."""
    nulls = ", ".join(["NULL"] * width)
    return (
        f"SELECT {nulls} FROM {fence_table_sql(home)} f "
        "WHERE f.id = 1 AND CASE WHEN f.epoch > %s THEN (SELECT 1 UNION ALL SELECT 1) ELSE 1 END = 1 LOCK IN SHARE MODE"
    )


def is_fenced(error: BaseException) -> bool:
    return mysql_errno(error) == FENCED_ERRNO


def stale(where: str, epoch: int) -> StaleShardMap:
    return StaleShardMap(
        f"{where} refused a write under shard-map epoch {epoch}: it moved or is moving; retry after the map reloads"
    )


async def read_fence(conn: AsyncConnection, home: DatabaseHome) -> int:
    """The fence epoch of ``home`` (MariaDB)."""
    result = await conn.exec_driver_sql(f"SELECT epoch FROM {fence_table_sql(home)} WHERE id = 1")
    return int(result.scalar_one())


async def write_fence(conn: AsyncConnection, home: DatabaseHome, epoch: int) -> None:
    """Set the fence of ``home`` to ``epoch`` (MariaDB); waits for every transaction holding its share lock."""
    await conn.exec_driver_sql(f"UPDATE {fence_table_sql(home)} SET epoch = %s WHERE id = 1", (epoch,))


# ---- the embedded mode's map -------------------------------------------------------------------------


async def read_recorded_map(conn: AsyncConnection, layout: Layout) -> ShardMap | None:
    """The recorded map, ``None`` before the first is recorded; :class:`StorageNotMigrated` on a
    schema older than the shard map's migration."""
    statement = select(_SHARD_MAP.c.document).where(_SHARD_MAP.c.id == _MAP_ROW)
    try:
        document = (await conn.execute(statement, execution_options=layout.apps_options)).scalar_one_or_none()
    except (sa_exc.ProgrammingError, sa_exc.OperationalError) as error:
        if mysql_errno(error) == 1146 or "no such table" in str(error):
            raise StorageNotMigrated(
                f"{layout.apps_database.name} has no {SHARD_MAP_TABLE} table; run `tjobs migrate` first"
            ) from error
        raise
    return None if document is None else ShardMap.from_json(orjson.loads(document))


async def swap_recorded_map(conn: AsyncConnection, layout: Layout, new: ShardMap, expected_epoch: int | None) -> bool:
    """Record ``new`` if the recorded map is still at ``expected_epoch`` (``None``: if there is none)."""
    document = orjson.dumps(new.to_json()).decode()
    if expected_epoch is None:
        try:
            async with conn.begin_nested():
                await conn.execute(
                    insert(_SHARD_MAP),
                    [{"id": _MAP_ROW, "epoch": new.epoch, "document": document}],
                    execution_options=layout.apps_options,
                )
        except sa_exc.IntegrityError:
            return False
        return True
    result = await conn.execute(
        update(_SHARD_MAP)
        .where(_SHARD_MAP.c.id == _MAP_ROW, _SHARD_MAP.c.epoch == expected_epoch)
        .values(epoch=new.epoch, document=document),
        execution_options=layout.apps_options,
    )
    return bool(result.rowcount == 1)
