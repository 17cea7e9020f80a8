"""``python -m benchmarks held_backlog``'s pure parts: the receipts' account (delivered, missing, duplicates,
held past the grace, the drain), the ``/metrics`` figures it reads, and the per-flow ratios."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from benchmarks._db_cost import COUNTERS, DbReading
from benchmarks.held_backlog import (
    BACKLOG,
    LEASED,
    REDRIVEN,
    db_figures,
    metric_values,
    parser,
    ratio,
    readable,
    relative_series,
    summarise,
)
from testkit.sink import CallbackRecords

DUE_MS = 1_796_000_000_000
GRACE_US = 30_000_000


def receipts() -> tuple[dict[int, int], CallbackRecords]:
    """Five tasks due at one instant: 1 received at once, 2 at 31 s (its flow twice), 3 at 45 s, 4 at
    exactly the grace, 5 never; and one callback of a task the bench did not register."""
    registered = dict.fromkeys(range(1, 6), DUE_MS)
    records = CallbackRecords()
    base_us = DUE_MS * 1000
    records.append(base_us + 200_000, 1, DUE_MS, 0, 1)
    records.append(base_us + 31_000_000, 2, DUE_MS, 1, 1)
    records.append(base_us + 31_500_000, 2, DUE_MS, 1, 2)
    records.append(base_us + 45_000_000, 3, DUE_MS, 2, 1)
    records.append(base_us + GRACE_US, 4, DUE_MS, 3, 1)
    records.append(base_us + 1_000, 99, DUE_MS, 4, 1)
    return registered, records


def node_metrics(leased: float, redriven: float, backlog: float) -> str:
    """A ``/metrics`` text as the node writes it (prometheus_client), with a series of another metric."""
    registry = CollectorRegistry()
    Counter("tjobs_flows_leased", "leased", registry=registry).inc(leased)
    Counter("tjobs_flows_redriven", "re-driven", registry=registry).inc(redriven)
    Counter("tjobs_flows_handed_back", "handed back", registry=registry).inc(7)
    Gauge("tjobs_compensator_backlog", "backlog", registry=registry).set(backlog)
    return generate_latest(registry).decode()


def test_the_metrics_text_gives_the_leased_and_redriven_counters_and_the_backlog() -> None:
    assert metric_values(node_metrics(1200, 0, 350)) == {LEASED: 1200.0, REDRIVEN: 0.0, BACKLOG: 350.0}


def test_a_node_without_the_leased_counter_gives_none_for_it() -> None:
    # Given an older node's text: the re-drives and the backlog, no tjobs_flows_leased_total
    registry = CollectorRegistry()
    Counter("tjobs_flows_redriven", "re-driven", registry=registry).inc(2)
    Gauge("tjobs_compensator_backlog", "backlog", registry=registry, labelnames=["x"]).labels("a").set(3)
    values = metric_values(generate_latest(registry).decode())
    # Then the leased figure is None and the others are read
    assert values == {LEASED: None, REDRIVEN: 2.0, BACKLOG: 3.0}


def test_the_receipts_give_delivered_missing_duplicates_and_those_held_past_the_grace() -> None:
    registered, records = receipts()
    args = parser().parse_args(["--embedded", "--tasks", "5", "--rate", "2"])
    before, after = metric_values(node_metrics(10, 1, 0)), metric_values(node_metrics(13, 1, 0))
    summary = summarise(
        args, registered, records, [before, after], [], [None, None], [5.0, 6.5], True, [],
        load=((0.5, 0.4, 0.3), (0.9, 0.6, 0.4)), register_s=1.234,
    )  # fmt: skip
    # Then 4 of 5 arrived, task 2 twice; 2 and 3 past the grace (4 at exactly the grace is not)
    assert (summary["registered"], summary["delivered"], summary["missing"], summary["duplicates"]) == (5, 4, 1, 1)
    assert summary["held_past_grace"] == 2
    # And the drain runs from the first receipt to the last, relative to the due instant
    assert summary["drain"] == {"first_s": 0.2, "last_s": 45.0, "rate_per_s": round(3 / 44.8, 1)}
    # And 3 leases for the 2 held flows, none re-driven, the node's CPU per flow, no MariaDB figures
    assert (summary["flows_leased"], summary["flows_leased_per_held_flow"], summary["flows_redriven"]) == (3, 1.5, 0)
    assert (summary["node_cpu_s"], summary["node_cpu_us_per_flow"], summary["mariadb"]) == (1.5, 375_000.0, None)
    assert summary["load"] == {"start": [0.5, 0.4, 0.3], "end": [0.9, 0.6, 0.4]}
    assert summary["warnings"] == []


def test_a_node_without_the_leased_counter_reports_null_leases_and_says_so() -> None:
    registered, records = receipts()
    args = parser().parse_args(["--embedded"])
    older = {LEASED: None, REDRIVEN: 0.0, BACKLOG: 0.0}
    series = [{"t_s": 5.0, LEASED: None, REDRIVEN: 0.0, BACKLOG: 40.0}]
    summary = summarise(
        args, registered, records, [older, older], series, [None, None], [None, None], False, [],
        load=((0.0,), (0.0,)), register_s=1.0,
    )  # fmt: skip
    assert (summary["flows_leased"], summary["flows_leased_per_held_flow"]) == (None, None)
    assert (summary["compensator_backlog_peak"], summary["node_cpu_us_per_flow"]) == (40.0, None)
    assert any("tjobs_flows_leased_total" in warning for warning in summary["warnings"])
    assert any("drain timed out" in warning for warning in summary["warnings"])


def test_the_series_counts_leases_and_redrives_from_the_first_reading_and_keeps_the_backlog() -> None:
    start = {LEASED: 100.0, REDRIVEN: 2.0, BACKLOG: 0.0}
    series = [
        {"t_s": 5.0, LEASED: 100.0, REDRIVEN: 2.0, BACKLOG: 0.0},
        {"t_s": 35.1, LEASED: 460.0, REDRIVEN: 2.0, BACKLOG: 360.0},
    ]
    assert relative_series(start, series) == [
        {"t_s": 5.0, "backlog": 0.0, "leased": 0, "redriven": 0},
        {"t_s": 35.1, "backlog": 360.0, "leased": 360, "redriven": 0},
    ]


def test_the_mariadb_counters_change_over_the_run_each_per_delivered_flow() -> None:
    before = DbReading(None, dict.fromkeys(COUNTERS, 1000))
    after = DbReading(None, {**before.counters, "Handler_update": 7000, "Com_update": 1600, "Com_insert": 1100})
    after.counters["Questions"] = 5001  # the later reading's own SHOW GLOBAL STATUS is taken off
    assert db_figures(before, after, 2000) == {
        "Handler_update": {"total": 6000, "per_flow": 3.0},
        "Com_update": {"total": 600, "per_flow": 0.3},
        "Com_insert": {"total": 100, "per_flow": 0.05},
        "Questions": {"total": 4000, "per_flow": 2.0},
    }
    assert db_figures(None, after, 2000) is None


def test_a_ratio_needs_a_value_and_something_to_divide_by() -> None:
    assert ratio(6000, 5950) == 1.008
    assert (ratio(None, 10), ratio(5, 0)) == (None, None)


def test_the_readable_summary_names_the_figures_and_the_warnings() -> None:
    registered, records = receipts()
    args = parser().parse_args(["--embedded", "--tasks", "5"])
    before = DbReading(None, dict.fromkeys(COUNTERS, 0))
    summary = summarise(
        args, registered, records, [metric_values(node_metrics(0, 0, 0))] * 2, [], [before, before], [None, None],
        False, [], load=((0.0,), (0.0,)), register_s=1.0,
    )  # fmt: skip
    text = "\n".join(readable(summary))
    assert "4 of 5 delivered" in text and "1 missing, 1 duplicates, 2 past the 30.0 s grace" in text
    assert "flows leased 0 (0.0 a held flow), re-driven 0" in text and "MariaDB Handler_update: 0" in text
    assert "drain timed out" in text
