"""A task's row as literals (:class:`tjobs.stores.sql_literals.TaskRows`) is its :func:`task_values` written one
value at a time: an integer by ``format(value, "d")``, a string quoted, ``None`` as ``NULL``. The row's fast
path (integers by type check, enum members looked up as themselves, a one-shot's schedule on its own path)
writes the same text as that reference, for awkward strings, absent keys, instants and children, and any
schedule kind; a value of the wrong type is still refused."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pymysql.converters import escape_string

from tests.contract.backends import make_task
from tests.integration.test_sql_literals import AWKWARD, awkward_task
from tjobs.model import Task, TaskChildren, TaskStatus
from tjobs.specs.schedule import AtSpec, CronSpec, DelaySpec, FixedDelaySpec, IntervalSpec, ScheduleSpec
from tjobs.stores.schema import TASK_COLUMNS, task_to_row
from tjobs.stores.sql_direct import task_values
from tjobs.stores.sql_literals import TaskRows

SCHEDULES: list[ScheduleSpec] = [
    AtSpec(at_ms=1_790_000_000_000),
    DelaySpec(delay_ms=5, at_ms=1_790_000_000_005),
    CronSpec("*/5 * * * *", "Europe/Paris", start_at_ms=1, max_fires=3, calendar="work"),
    IntervalSpec(60_000, 1_790_000_000_000, jitter_ms=500),
    FixedDelaySpec(1000, 1_790_000_000_000, max_fires=2),
]


def reference_row(rows: TaskRows, task: Task) -> str:
    def literal(value: Any) -> str:
        if value is None:
            return "NULL"
        return format(value, "d") if isinstance(value, int) else rows.quoted(value)

    return "(" + ",".join(literal(value) for value in task_values(task)) + ")"


def tasks() -> list[Task]:
    made = [awkward_task(index, text) for index, text in enumerate(AWKWARD)]
    made += [replace(task, key=None, next_run_at_ms=None, children=TaskChildren((), (5, 6))) for task in made]
    made += [replace(task, children=TaskChildren(), status=TaskStatus.PAUSED) for task in made[:5]]
    made += [replace(make_task(), schedule=schedule) for schedule in SCHEDULES]
    return made


def test_each_row_is_its_values_written_one_at_a_time() -> None:
    rows = TaskRows(escape_string)
    for task in tasks():
        assert rows.row(task) == reference_row(rows, task)


def test_the_values_are_the_task_columns_in_order() -> None:
    """Pins :meth:`TaskRows.row`'s order (the test above) to :data:`TASK_COLUMNS`."""
    for task in tasks():
        stored = task_to_row(task)
        assert task_values(task) == tuple(stored[column] for column in TASK_COLUMNS)


def test_an_int_subclass_is_written_and_another_type_refused() -> None:
    rows = TaskRows(escape_string)
    task = replace(make_task(), version=True)
    assert rows.row(task) == reference_row(rows, task)
    for wrong in ({"version": 1.5}, {"next_run_at_ms": 2.0}, {"id": "1"}):
        with pytest.raises(ValueError):
            rows.row(replace(make_task(), **wrong))
