"""The capacity bench's arithmetic: bytes per task and flow from InnoDB's table and index sizes."""

from __future__ import annotations

import random

import pytest

from benchmarks.capacity import TableSize, capacity_figures, delivered_flow, typical_task
from tjobs.model import TaskStatus


def test_bytes_per_row_sum_every_table_of_a_kind_and_the_due_index_is_scaled_to_a_million_tasks() -> None:
    tables = [
        TableSize("tasks_00", 1_000, 500_000, 300_000, {"due": 40_000, "app": 260_000}),
        TableSize("tasks_01", 3_000, 1_500_000, 900_000, {"due": 120_000, "app": 780_000}),
        TableSize("flows_00", 2_000, 700_000, 100_000, {"retry": 100_000}),
    ]

    figures = capacity_figures(tables)

    assert figures["tasks"]["rows"] == 4_000
    assert figures["tasks"]["bytes_per_row"] == 800.0  # (2,000,000 + 1,200,000) / 4,000
    assert figures["tasks"]["data_bytes_per_row"] == 500.0
    assert figures["tasks"]["index_bytes_per_row_by_index"] == {"app": 260.0, "due": 40.0}
    assert figures["flows"]["bytes_per_row"] == 400.0
    assert figures["due_mib_per_million_tasks"] == round(40 * 1_000_000 / 2**20, 1)  # 38.1


def test_no_rows_of_a_kind_is_an_error_not_a_division_by_zero() -> None:
    with pytest.raises(ValueError, match="flows"):
        capacity_figures([TableSize("tasks_00", 10, 16_384, 0, {})])


def test_the_typical_task_is_active_with_a_future_run_and_its_flow_a_delivered_attempt() -> None:
    rng = random.Random(1)
    tasks = [typical_task(1_000 + n, n, 1_800_000_000_000, rng) for n in range(10)]

    assert all(t.status is TaskStatus.ACTIVE and (t.next_run_at_ms or 0) >= t.created_at_ms for t in tasks)
    assert [t.schedule.kind.value for t in tasks].count("delay") == 6
    flow = delivered_flow(tasks[0], 1_800_000_000_000)
    assert flow["status"] == "delivered" and flow["attempts"] == 1
    assert '\\"ok\\":true' in flow["answers"] and flow["attempt_log"].startswith('{"total":1')
