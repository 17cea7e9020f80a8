"""The move metrics mirror the recorded moves (tjobs/observability/metrics.py, observe_shard_moves):
a move in progress shows its step, rows copied and lag; a finished one its cut-over pause; a move no
longer in progress leaves no step, rows or lag series behind."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tjobs.observability.metrics import Metrics
from tjobs.service.shard_moves import move_json, without_credentials
from tjobs.stores.contracts import MoveRow


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name.startswith("tjobs_shard_move")
    }


def test_a_move_catching_up_shows_its_step_rows_and_lag_and_a_finished_one_its_pause() -> None:
    metrics = Metrics()
    moving = MoveRow(3, "db-a:3306", "db-b:3306", "catching_up", 1, 0, rows_copied=1200, lag_rows=40)
    finished = MoveRow(5, "db-a:3306", "db-b:3306", "done", 1, 4, rows_copied=10, cut_over_pause_ms=850)

    metrics.observe_shard_moves([moving, finished])

    shown = samples(metrics)
    assert shown[("tjobs_shard_moves_in_progress", ())] == 1
    assert shown[("tjobs_shard_move_step", (("database", "3"), ("step", "catching_up")))] == 1
    assert shown[("tjobs_shard_move_step", (("database", "3"), ("step", "copying")))] == 0
    assert shown[("tjobs_shard_move_rows_copied", (("database", "3"),))] == 1200
    assert shown[("tjobs_shard_move_lag_rows", (("database", "3"),))] == 40
    assert shown[("tjobs_shard_move_last_cut_over_pause_seconds", (("database", "5"),))] == 0.85
    assert not any(
        labels == (("database", "5"),)
        for name, labels in shown
        if name != "tjobs_shard_move_last_cut_over_pause_seconds"
    )


def test_a_move_that_finished_leaves_only_its_pause() -> None:
    metrics = Metrics()
    metrics.observe_shard_moves([MoveRow(3, "a:1", "b:1", "cutting_over", 1, 0, rows_copied=5, lag_rows=2)])

    metrics.observe_shard_moves([MoveRow(3, "a:1", "b:1", "done", 1, 2, rows_copied=5, cut_over_pause_ms=120)])

    assert samples(metrics) == {
        ("tjobs_shard_moves_in_progress", ()): 0,
        ("tjobs_shard_move_last_cut_over_pause_seconds", (("database", "3"),)): 0.12,
    }


def test_servers_are_shown_without_credentials() -> None:
    assert (
        without_credentials("mysql+asyncmy://root:s3cret@db-1.internal:3307/x?charset=utf8mb4") == "db-1.internal:3307"
    )
    assert without_credentials("user:pw@db-2:3306") == "db-2:3306"
    assert without_credentials("db-3:3306") == "db-3:3306"
    shown = move_json(MoveRow(1, "mysql+asyncmy://root:s3cret@a:3306", "admin:pw@b:3306", "copying", 1, 0))
    assert (shown["from"], shown["to"]) == ("a:3306", "b:3306")
    assert "s3cret" not in str(shown) and "pw" not in str(shown)
