"""The index cost bench's pure parts (no server): the outcome it writes, a phase's brief figures and the
summary of each variant's rounds."""

from __future__ import annotations

import pytest

from benchmarks import index_cost
from tjobs.model import FireIntent, FlowStatus, TaskStatus


def test_the_outcome_ends_the_flow_with_one_send() -> None:
    update = index_cost._outcome(42)
    assert (update.task_id, update.scheduled_at_ms, update.status) == (42, index_cost.NOW_MS, FlowStatus.DELIVERED)
    assert update.attempt_log is not None and update.attempt_log.total == 1


@pytest.mark.parametrize(("kind", "status"), [("at", TaskStatus.COMPLETED), ("interval", TaskStatus.ACTIVE)])
def test_a_fire_of_each_kind_records_one_flow(kind: str, status: TaskStatus) -> None:
    task = index_cost._task(7, kind)
    intent = FireIntent(task.id, index_cost.NOW_MS, task.version)
    plan = index_cost.planner(task, intent, index_cost.NOW_MS + 10)
    assert plan is not None and len(plan.flows) == 1 and plan.status is status


def test_brief_takes_the_net_figures_and_none_without_them() -> None:
    phase = {
        "seconds": 4.5,
        "net": {
            "mariadb_cpu_us": 250.0,
            "statements": 2.47,
            "counters": {"Innodb_os_log_written": 1000.0, "Opened_tables": 0.01},
        },
    }
    assert index_cost._brief(phase) == {
        "cpu_us": 250.0,
        "statements": 2.47,
        "log_bytes": 1000.0,
        "opened_tables": 0.01,
        "seconds": 4.5,
    }
    assert index_cost._brief(None) == {}
    assert index_cost._brief({"net": None}) == {}


def test_the_summary_gives_each_variant_its_rounds_and_mean(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"without": "all", "fire": {"cpu_us": 200.0}, "outcome": {"cpu_us": 100.0}},
        {"without": "flows:at", "fire": {"cpu_us": 190.0}, "outcome": {"cpu_us": 90.0}},
        {"without": "all", "fire": {"cpu_us": 220.0}, "outcome": {"cpu_us": 120.0}},
    ]
    index_cost._summary(rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "without all: fire 200.0/220.0 (mean 210.0) us, outcome 100.0/120.0 (mean 110.0) us, "
        "fire+outcome 300.0/340.0 (mean 320.0) us"
    )
    assert lines[1].startswith("without flows:at: fire 190.0 (mean 190.0) us")
