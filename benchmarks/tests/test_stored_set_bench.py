"""The stored set of the cycle-load-tail bench (issue 29: 10 M stored tasks and 10 M flows): its arguments,
the delivered flows' rows (the capacity bench's row of a flow after one delivered attempt), how the rows
spread over shards and instants, and the check that the parked tasks stay out of every cycle load."""

from __future__ import annotations

import pytest

from benchmarks._stored_set import FLOW_ROW_COLUMNS, flow_instants, flow_rows, shares
from benchmarks.capacity import delivered_flow
from benchmarks.cycle_load_tail import parked_clear_of_loads, parser, stored_figures
from benchmarks.shard_move import PARKED_DUE_IN_MS, mint_ids, one_shot
from sharding import shard_of_task_id
from tjobs.specs import CallbackSpec
from tjobs.stores.schema import FLOW_COLUMNS

T0_MS = 1_800_000_000_000
DAY_MS = 86_400_000
CALLBACK = CallbackSpec(("http://127.0.0.1:9/hook",), timeout_ms=3000)


def test_no_stored_set_by_default_and_counts_may_be_written_with_separators() -> None:
    defaults = parser().parse_args([])
    assert (defaults.stored_tasks, defaults.stored_flows, defaults.load_workers) == (0, 0, 2)
    args = parser().parse_args(["--stored-tasks", "10_000_000", "--stored-flows", "10,000,000", "--load-workers", "3"])
    assert (args.stored_tasks, args.stored_flows, args.load_workers) == (10_000_000, 10_000_000, 3)


def test_a_negative_count_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["--stored-tasks", "-1"])
    assert "not a count" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser().parse_args(["--stored-flows", "many"])


def test_a_stored_flow_is_the_delivered_flow_of_its_own_task() -> None:
    task = one_shot(0, "app1", T0_MS, CALLBACK, T0_MS)
    ids = mint_ids([7] * 5, T0_MS - 3 * DAY_MS)
    instants = flow_instants(5, T0_MS - 25 * DAY_MS, T0_MS - DAY_MS)
    values = flow_rows(task, ids, instants)
    width = len(FLOW_ROW_COLUMNS)
    assert len(values) == 5 * width
    for n in range(5):
        own = delivered_flow(one_shot(ids[n], "app1", instants[n], CALLBACK, T0_MS), instants[n])
        assert tuple(own) == FLOW_ROW_COLUMNS  # every column the capacity bench's delivered flow sets
        assert values[n * width : (n + 1) * width] == [own[c] for c in FLOW_ROW_COLUMNS]
        assert shard_of_task_id(ids[n]) == 7
    assert set(FLOW_COLUMNS) <= set(FLOW_ROW_COLUMNS)
    row = dict(zip(FLOW_ROW_COLUMNS, values[:width], strict=True))
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("delivered", 1, 200)
    assert str(instants[0] + 12) in row["attempt_log"]  # the attempt's start follows the flow's instant


def test_the_flows_instants_spread_over_the_span_ascending_and_the_rows_over_the_shards_evenly() -> None:
    instants = flow_instants(1000, T0_MS - 25 * DAY_MS, T0_MS - DAY_MS)
    assert instants == sorted(set(instants)) and len(instants) == 1000
    assert instants[0] == T0_MS - 25 * DAY_MS and instants[-1] < T0_MS - DAY_MS
    assert instants[-1] - instants[0] > 23 * DAY_MS
    assert shares(10_000_000, 512)[:2] == [19_532, 19_532] and shares(10_000_000, 512)[-1] == 19_531
    assert sum(shares(10_000_000, 512)) == 10_000_000 and sum(shares(3, 512)) == 3


def test_the_parked_tasks_lie_beyond_every_cycle_load_of_the_run() -> None:
    window_end = T0_MS + 3600_000
    assert parked_clear_of_loads(T0_MS + PARKED_DUE_IN_MS, window_end, 60, 30, 60.0)
    # a load reads the cycle after the one it precedes by lead_s; the drain goes on 60 s past the window
    assert not parked_clear_of_loads(window_end + 150_000, window_end, 60, 30, 60.0)
    assert parked_clear_of_loads(window_end + 150_001, window_end, 60, 30, 60.0)


def test_the_stored_figures_give_the_load_time_per_million() -> None:
    figures = stored_figures(10_000_000, 0, 250.04, 0.0)
    assert figures["load_s"] == {"tasks": 250.0, "flows": 0.0}
    assert figures["s_per_million"] == {"tasks": 25.0, "flows": None}
    assert (figures["parked_due_in_days"], figures["flows_days_ago"]) == (30, [25, 1])
