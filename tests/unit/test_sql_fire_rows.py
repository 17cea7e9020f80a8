"""The fire transaction reads each locked task row as values: the same task as the row's mapping gives."""

from __future__ import annotations

import pytest

from tjobs.model import DeliveryMode, MisfirePolicy, Task, TaskStatus
from tjobs.specs import AtSpec, CallbackSpec, IntervalSpec
from tjobs.stores.schema import TASK_COLUMNS, task_from_row, task_to_row
from tjobs.stores.sql_fire import _task_of_values

NOW = 1_795_930_346_000


def _tasks() -> list[Task]:
    one_shot = Task(
        (7 << 20) + 3, "app", "one", None, AtSpec(NOW), CallbackSpec(("https://x.example/h",)), {"i": 1},
        MisfirePolicy.FIRE_NOW, DeliveryMode.AT_LEAST_ONCE, TaskStatus.ACTIVE, NOW, 1, 0, NOW - 5, NOW - 5,
    )  # fmt: skip
    keyed = Task(
        9, "app", "every", "key-1", IntervalSpec(60_000, NOW - 60_000),
        CallbackSpec(("https://x.example/h",), max_attempts=3), None,
        MisfirePolicy.SKIP, DeliveryMode.AT_MOST_ONCE, TaskStatus.PAUSED, None, 4, 12, NOW - 9, NOW, 3,
    )  # fmt: skip
    return [one_shot, keyed]


@pytest.mark.parametrize("task", _tasks(), ids=["one-shot", "keyed-paused"])
def test_a_row_read_as_values_is_the_task_its_mapping_gives(task: Task) -> None:
    stored = task_to_row(task)
    values = tuple(stored[column] for column in TASK_COLUMNS)
    assert _task_of_values(values) == task_from_row(stored) == task


def test_a_row_of_another_width_is_refused() -> None:
    stored = task_to_row(_tasks()[0])
    with pytest.raises(ValueError):
        _task_of_values(tuple(stored[column] for column in TASK_COLUMNS[:-1]))
