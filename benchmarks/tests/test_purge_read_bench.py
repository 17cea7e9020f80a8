"""The purge-read bench's rows: completed tasks, no next run, each updated after the cut-off."""

from __future__ import annotations

from benchmarks.purge_read import completed_tasks
from tjobs.model import TaskStatus


def test_the_tasks_are_completed_without_a_next_run_and_updated_one_ms_apart_from_the_given_instant() -> None:
    tasks = completed_tasks(5, 1_000)

    assert [t.status for t in tasks] == [TaskStatus.COMPLETED] * 5
    assert [t.next_run_at_ms for t in tasks] == [None] * 5
    assert [t.updated_at_ms for t in tasks] == [1_000, 1_001, 1_002, 1_003, 1_004]
    assert len({t.id for t in tasks}) == 5
