"""``python -m benchmarks run_reports`` at tiny size on an embedded node: every run accepted, reported and
ended once, and the figures are there."""

from __future__ import annotations

import pytest

from benchmarks.run_reports import bench, parser
from testkit.node_process import node_process


@pytest.mark.slow
async def test_a_tiny_run_ends_every_run_once_with_its_progress_and_final_reports() -> None:
    # Given an embedded node and 60 tasks due over a second, each accepted as a run by the receiver
    args = parser().parse_args(["--tasks", "60", "--window-s", "1", "--lead-s", "3", "--progress", "--reporters", "8"])
    with node_process() as node:
        # When they fire and the receiver reports progress, then success, for each
        summary = await bench(args, (node.base_url, node.admin_key, (node.pid,)), None)
    # Then every run ended once, none lost, and the store holds one delivered, succeeded flow per task
    assert summary["registered"] == 60 and summary["drained"] is True
    assert summary["runs"] == {
        "accepted": 60,
        "ended": 60,
        "lost": 0,
        "double_ended": 0,
        "retried_attempts": 0,
        "final_repeated": 0,
    }
    assert summary["answers"] == {"progress 200": 60, "final 200": 60}
    assert summary["store"]["by_status"] == {"delivered/succeeded": 60}
    # And the figures per run are given (no MariaDB: no database cost)
    assert summary["report_calls"] == 120 and summary["node_cpu_us_per_run"] is not None
    assert summary["report_latency_ms"]["p99"] is not None and summary["mariadb_per_run"] is None
    assert summary["warnings"] == []
