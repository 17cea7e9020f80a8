"""A rerun of an interrupted ``tjobs shards move`` resumes the copy from its recorded progress
(tjobs/cluster/shard_move.py, tjobs/stores/sql_move.py): the tables an earlier run copied whole are
not copied again, and the rerun's statements leave the server nothing to warn about (the driver logs
every note the server answers with; a rerun that re-issued each ``CREATE … IF NOT EXISTS`` printed
about 200 of them on the default topology).

The mover is interrupted in process, from its report hook, at the first batch of the third table that
holds rows: the crash point the kill -9 tests of test_shard_move.py reach by signal, but at a table
boundary the test chooses.
"""

from __future__ import annotations

import logging

import pytest

from tests.contract.backends import make_task
from tests.integration import test_shard_move as shard_move_tests
from tests.integration.test_shard_move import MOVED, mapped_store, server_of
from tjobs.cluster.shard_move import ShardMover
from tjobs.model import COPYING, DONE
from tjobs.settings import Settings

pytestmark = [pytest.mark.mariadb, pytest.mark.slow]

# the fixtures of test_shard_move.py: a second MariaDB of our own, and settings placing MOVED on the shared one
own_mariadb_url = shard_move_tests.own_mariadb_url
settings = shard_move_tests.settings


class Interrupted(Exception):
    """The mover 'died' here (raised from its report hook)."""


async def test_a_rerun_of_an_interrupted_move_copies_only_the_tables_not_yet_copied_and_warns_of_nothing(
    settings: Settings, own_mariadb: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = server_of(own_mariadb)
    async with mapped_store(settings) as (store, coordinator):
        # Given rows in every task table of the moved database (200 tasks over its shards)
        shards = store.topology.shards_of_database(MOVED)
        await store.insert_tasks([make_task(shard=shards[n % len(shards)]) for n in range(200)])

        # When a first run dies as it starts copying the third table that holds rows (the migrations'
        # one-row table, then the tasks tables, come first)
        tables_reported: list[str] = []

        def die_at_the_third_table(line: str) -> None:
            if line.startswith("copied ") and "(" in line:
                table = line.rsplit("(", 1)[1].rstrip(")")
                if table not in tables_reported:
                    tables_reported.append(table)
                if len(tables_reported) == 3:
                    raise Interrupted(line)

        first = ShardMover(coordinator, store, batch_rows=10, cut_over_below=1, report=die_at_the_third_table)
        try:
            with pytest.raises(Interrupted):
                await first.move(MOVED, target)
            interrupted = await first.moves.get(MOVED)
            assert interrupted is not None
            copy = first._copy(interrupted, await first._map())
            source_rows = await copy.row_counts(copy.source)  # type: ignore[attr-defined]
        finally:
            await first.close()
        assert interrupted.state == COPYING
        *done_first, cut_in = tables_reported
        for table in done_first:
            assert dict(interrupted.tables_copied).get(table) == source_rows[table] > 0
        assert cut_in not in dict(interrupted.tables_copied)

        # Then a rerun copies only the tables the first did not finish, and the server warns of nothing
        reports: list[str] = []
        rerun = ShardMover(coordinator, store, batch_rows=10, cut_over_below=1, report=reports.append)
        try:
            with caplog.at_level(logging.WARNING):
                row = await rerun.move(MOVED, target)
            moved = rerun._copy(row, await rerun._map())
            target_rows = await moved.row_counts(moved.target)  # type: ignore[attr-defined]
        finally:
            await rerun.close()

    copied_again = {
        line.rsplit("(", 1)[1].rstrip(")") for line in reports if line.startswith("copied ") and "(" in line
    }
    assert copied_again and not copied_again & set(dict(interrupted.tables_copied)), reports
    rerun_rows = sum(rows for table, rows in source_rows.items() if table not in dict(interrupted.tables_copied))
    assert any(f"copied {rerun_rows:,} rows this run" in line for line in reports), reports
    assert row.state == DONE and row.rows_copied == sum(source_rows.values()) >= 200
    assert target_rows == source_rows
    warned = [record.getMessage() for record in caplog.records if record.name == "asyncmy"]
    assert warned == [], f"{len(warned)} server warnings, e.g. {warned[:3]}"
