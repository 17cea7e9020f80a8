"""The online-migration bench's pure parts: parked rows built from one template are the rows the store
would write for those tasks, the statement it sends, and its figures of the statements' times."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from benchmarks._stored_set import parked_rows
from benchmarks.online_migration import alter_figures, alter_statement, change_statements
from benchmarks.shard_move import mint_ids, one_shot
from tjobs.specs import CallbackSpec
from tjobs.stores.schema import TASK_COLUMNS, task_to_row

T0_MS = 1_800_000_000_000
CALLBACK = CallbackSpec(("http://127.0.0.1:9/hook",), timeout_ms=3000)


def test_a_parked_row_is_the_row_of_its_own_task() -> None:
    far_ms = T0_MS + 30 * 86_400_000
    template = [task_to_row(one_shot(0, "app1", far_ms, CALLBACK, T0_MS))[c] for c in TASK_COLUMNS]
    ids = mint_ids([3] * 5000, T0_MS - 86_400_000)
    values = parked_rows(template, ids, far_ms)
    width = len(TASK_COLUMNS)
    assert len(values) == 5000 * width
    for n in (0, 1, 3601, 4999):
        at_ms = far_ms + (n % 3600) * 1000
        task = one_shot(ids[n], "app1", at_ms, CALLBACK, T0_MS)
        expected = {**task_to_row(task), "name": f"parked-{ids[n]}"}
        assert values[n * width : (n + 1) * width] == [expected[c] for c in TASK_COLUMNS]


def test_the_migration_adds_a_nullable_column_with_the_algorithm_named() -> None:
    assert alter_statement("`db_00`.`tasks_03`", "INSTANT") == (
        "ALTER TABLE `db_00`.`tasks_03` ADD COLUMN `bench_probe` TEXT NULL, ALGORITHM=INSTANT"
    )
    assert alter_statement("`db_00`.`tasks_03`", "INPLACE").endswith("ALGORITHM=INPLACE, LOCK=NONE")
    assert alter_statement("`db_00`.`tasks_03`", "INPLACE_SHARED").endswith("ALGORITHM=INPLACE, LOCK=SHARED")
    assert alter_statement("`db_00`.`tasks_03`", "INSTANT", "table_options") == (
        "ALTER TABLE `db_00`.`tasks_03` STATS_AUTO_RECALC=0, ALGORITHM=INSTANT"
    )


def test_the_default_change_is_migration_0026_undone_before_the_load_and_sent_again_during_the_window() -> None:
    home = cast(Any, SimpleNamespace(tasks=SimpleNamespace(name="tasks_03"), tasks_sql="`db_00`.`tasks_03`"))
    assert change_statements(home, "COPY", "task_purge_index") == [
        "ALTER TABLE `db_00`.`tasks_03` ADD COLUMN `completed_at` BIGINT AS "
        "(CASE WHEN status = 'completed' THEN updated_at END) VIRTUAL, ALGORITHM=INSTANT",
        "ALTER TABLE `db_00`.`tasks_03` ADD INDEX `tasks_03_done` (`completed_at`), ALGORITHM=INPLACE, LOCK=NONE",
    ]
    assert change_statements(home, "INPLACE", "add_column") == [alter_statement("`db_00`.`tasks_03`", "INPLACE")]


def test_the_migration_figures_name_the_slowest_table() -> None:
    figures = alter_figures([("t0", 0.002), ("t1", 0.250), ("t2", 0.004)])
    assert figures == {
        "tables": 3,
        "total_s": 0.256,
        "per_table_p50_ms": 4.0,
        "per_table_max_ms": 250.0,
        "slowest_table": "t1",
    }
