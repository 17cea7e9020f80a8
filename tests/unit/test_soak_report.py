"""The nemesis soak's arithmetic (tests/chaos/soak/report.py): exact percentiles from the histogram,
each instant's lateness under the fault it was due in, the counts summed over rounds, the resources'
trend against its tolerance, and the verdict."""

from __future__ import annotations

import pytest

from tests.chaos.accounting import Callback, Promise, StoredFlow, account, percentile
from tests.chaos.soak.report import (
    OVERALL,
    QUIET,
    FaultRecord,
    LatenessHistogram,
    Sample,
    Tally,
    Tolerance,
    failures,
    fault_of,
    text_report,
    trends,
)

T1, T2, T3 = 101, 202, 303
KILL = FaultRecord("kill", 10_000, 18_000, victim_node=2)
LOCK = FaultRecord("row_lock", 70_000, 83_000, victim_server=1)


@pytest.mark.parametrize("fraction", [0.01, 0.07, 0.5, 0.9, 0.99, 1.0])
def test_the_histogram_gives_the_same_nearest_rank_percentile_as_the_fault_suite(fraction: float) -> None:
    values = [(i * 37) % 101 - 3 for i in range(1, 300)]
    histogram = LatenessHistogram()
    for value in values:
        histogram.add(value)
    assert histogram.percentile(fraction) == percentile(values, fraction)
    assert histogram.n == len(values) and histogram.early == sum(v < 0 for v in values)


def test_an_empty_histogram_reads_zero() -> None:
    assert LatenessHistogram().summary() == {"n": 0, "p50_ms": 0, "p99_ms": 0, "max_ms": 0, "early": 0}


def test_an_instant_belongs_to_the_fault_it_was_due_in_or_within_five_seconds_after() -> None:
    faults = [KILL, LOCK]
    assert fault_of(9_999, faults) == QUIET
    assert fault_of(10_000, faults) == "kill"
    assert fault_of(23_000, faults) == "kill"  # 5 s after its end: the recovery
    assert fault_of(23_001, faults) == QUIET
    assert fault_of(80_000, faults) == "row_lock"
    assert fault_of(80_000, faults, after_ms=0) == "row_lock"
    assert fault_of(83_001, faults, after_ms=0) == QUIET
    assert fault_of(5_000, []) == QUIET


def promise(task_id: int, *instants: int, acked_ms: int = 0, server: int = 0) -> Promise:
    return Promise(task_id, server, frozenset(instants), frozenset(instants), create_acked_ms=acked_ms)


def sent(task_id: int, instant: int, received_ms: int, flow_id: str = "") -> Callback:
    return Callback(task_id, instant, flow_id or f"{task_id}-{instant}", 1, "n1", received_ms, True)


def test_rounds_add_their_counts_and_their_lateness_under_each_fault() -> None:
    tally = Tally()
    owed = {T1: promise(T1, 5_000, 12_000, 40_000), T2: promise(T2, 75_000, server=1)}
    calls = [sent(T1, 5_000, 5_020), sent(T1, 12_000, 16_500), sent(T1, 40_000, 40_030), sent(T2, 75_000, 75_900)]
    flows = [StoredFlow(t, i, "delivered", 1, 0) for t, i in ((T1, 5_000), (T1, 12_000), (T1, 40_000), (T2, 75_000))]
    tally.add_round(account(owed, calls, flows, deadline_ms=99_000), owed, [LOCK, KILL], creates={"acknowledged": 2})
    # a second round: one instant lost, one sent twice with two flow ids, one off its schedule
    owed2 = {T3: promise(T3, 200_000, 201_000)}
    calls2 = [sent(T3, 200_000, 200_010, "a"), sent(T3, 200_000, 200_400, "b"), sent(T3, 202_000, 202_005)]
    tally.add_round(account(owed2, calls2, [], deadline_ms=250_000), owed2, [], creates={"acknowledged": 1})
    assert (tally.rounds, tally.expected, tally.delivered) == (2, 6, 5)
    assert dict(tally.counts) == {"lost": 1, "duplicate_flows": 1, "phantom": 1, "attempt_reuse": 0}
    assert tally.examples["lost"] == [(T3, 201_000)] and tally.examples["phantom"] == [(T3, 202_000)]
    assert tally.creates["acknowledged"] == 3
    lateness = tally.lateness_summary()
    assert lateness["kill"] == {"n": 1, "p50_ms": 4500, "p99_ms": 4500, "max_ms": 4500, "early": 0}
    assert lateness["row_lock"]["max_ms"] == 900
    assert lateness["row_lock (its server)"]["n"] == 1 and "row_lock (other servers)" not in lateness
    assert "kill (its server)" not in lateness  # a node fault has no server
    assert lateness[QUIET]["n"] == 3 and lateness[OVERALL]["n"] == 5 and lateness[OVERALL]["max_ms"] == 4500
    assert failures(tally, []) == ["lost=1", "duplicate_flows=1", "phantom=1"]


def test_an_instant_due_before_its_create_was_acknowledged_measures_the_create_and_is_left_out() -> None:
    tally = Tally()
    owed = {T1: promise(T1, 1_000, 2_000, acked_ms=1_500)}
    calls = [sent(T1, 1_000, 1_900), sent(T1, 2_000, 2_010)]
    tally.add_round(account(owed, calls, [], deadline_ms=9_000), owed, [])
    assert tally.lateness_summary()[OVERALL] == {"n": 1, "p50_ms": 10, "p99_ms": 10, "max_ms": 10, "early": 0}


def test_a_first_send_before_its_instant_fails_the_soak() -> None:
    tally = Tally()
    owed = {T1: promise(T1, 1_000)}
    tally.add_round(account(owed, [sent(T1, 1_000, 990)], [], deadline_ms=9_000), owed, [])
    assert failures(tally, []) == ["early_first_sends=1"]


def test_a_task_id_named_by_two_creates_answers_fails_the_soak() -> None:
    tally = Tally()
    owed = {T1: promise(T1, 1_000)}
    figures = account(owed, [sent(T1, 1_000, 1_010)], [], deadline_ms=9_000)
    tally.add_round(figures, owed, [], creates={"acknowledged": 2, "ids_named_twice": 0})
    assert failures(tally, []) == []
    tally.add_round(figures, owed, [], creates={"acknowledged": 2, "ids_named_twice": 1})
    assert failures(tally, []) == ["ids_named_twice=1"]


def test_a_soak_that_owed_nothing_did_not_pass() -> None:
    assert failures(Tally(), []) == ["nothing was owed: the workload did not run"]


def samples(node: int, values: list[int], *, every_ms: int = 10_000, state: str = "running") -> list[Sample]:
    return [
        Sample(i * every_ms, node, 1000 + node, state, rss_kb=v, fds=50, db_connections=20)
        for i, v in enumerate(values)
    ]


def test_the_trend_compares_the_medians_of_the_first_and_last_quarter() -> None:
    flat = samples(1, [100_000, 100_000, 90_000, 110_000, 105_000, 100_000, 98_000, 102_000])
    leaking = samples(2, [100_000, 100_000, 110_000, 130_000, 150_000, 170_000, 190_000, 210_000])
    found = {(t.node, t.metric): t for t in trends(flat + leaking, from_ms=0, until_ms=80_000)}
    assert (found[(1, "rss_kb")].first, found[(1, "rss_kb")].last) == (100_000, 100_000)
    assert not found[(1, "rss_kb")].grew and not found[(1, "fds")].grew
    assert (found[(2, "rss_kb")].first, found[(2, "rss_kb")].last) == (100_000, 200_000)
    assert found[(2, "rss_kb")].grew and found[(2, "rss_kb")].growth == 1.0
    tally = Tally(expected=1)
    assert failures(tally, found.values()) == ["node2 rss_kb grew 100000 -> 200000 (+100%)"]


def test_growth_within_ratio_plus_slack_passes_and_beyond_it_fails() -> None:
    tolerance = {"rss_kb": Tolerance(0.25, 1000), "fds": Tolerance(0.25, 0), "db_connections": Tolerance(0, 0)}
    within = samples(1, [10_000, 10_000, 13_500, 13_500])
    beyond = samples(2, [10_000, 10_000, 13_501, 13_501])
    found = {
        t.node: t
        for t in trends(within + beyond, from_ms=0, until_ms=40_000, tolerances=tolerance)
        if t.metric == "rss_kb"
    }
    assert not found[1].grew and found[2].grew


def test_stopped_and_down_samples_and_those_outside_the_span_are_left_out() -> None:
    taken = [
        *samples(1, [999_999], state="stopped"),
        *samples(1, [100, 100, 100, 100]),
        Sample(10_000, 1, 7, "down"),
        Sample(90_000, 1, 7, "running", rss_kb=999_999),
    ]
    found = [t for t in trends(taken, from_ms=0, until_ms=40_000) if t.metric == "rss_kb"]
    assert [(t.first, t.last) for t in found] == [(100, 100)]
    assert trends(samples(3, [100]), from_ms=0, until_ms=40_000) == []  # nothing in the last quarter


def test_the_text_report_states_the_counts_the_lateness_per_fault_the_trend_and_the_verdict() -> None:
    tally = Tally()
    owed = {T1: promise(T1, 12_000)}
    tally.add_round(account(owed, [sent(T1, 12_000, 12_700)], [], deadline_ms=99_000), owed, [KILL])
    found = trends(samples(1, [200_000, 200_000, 200_000, 210_000]), from_ms=0, until_ms=40_000)
    text = text_report(tally, found, [KILL, LOCK], failures(tally, found), {"minutes": 5})
    assert "nemesis soak: minutes=5" in text
    assert "lost=0 duplicate_flows=0 phantom=0" in text
    assert "faults run: kill=1 row_lock=1" in text
    assert "  kill                         n=1" in text and "p99=700" in text
    assert "node1 rss             195 MB -> 205 MB (+5%)" in text
    assert text.endswith("verdict: PASS\n")


def test_lateness_during_a_server_fault_is_split_by_the_tasks_server() -> None:
    tally = Tally()
    owed = {T1: promise(T1, 71_000, server=1), T2: promise(T2, 72_000, server=0), T3: promise(T3, 73_000, server=1)}
    calls = [sent(T1, 71_000, 83_500), sent(T2, 72_000, 72_040), sent(T3, 73_000, 83_400)]
    tally.add_round(account(owed, calls, [], deadline_ms=99_000), owed, [LOCK])
    lateness = tally.lateness_summary()
    assert lateness["row_lock"]["n"] == 3
    assert (lateness["row_lock (its server)"]["n"], lateness["row_lock (its server)"]["max_ms"]) == (2, 12_500)
    assert lateness["row_lock (other servers)"]["max_ms"] == 40
    assert tally.worst_fault([KILL, LOCK]) == (LOCK, lateness["row_lock"])
    assert tally.worst_fault([KILL]) is None  # no instant was due in it


def test_the_worst_single_fault_is_the_one_with_the_highest_p99() -> None:
    tally = Tally()
    owed = {T1: promise(T1, 12_000), T2: promise(T2, 72_000)}
    calls = [sent(T1, 12_000, 15_000), sent(T2, 72_000, 72_100)]
    tally.add_round(account(owed, calls, [], deadline_ms=99_000), owed, [KILL, LOCK])
    worst = tally.worst_fault([KILL, LOCK])
    assert worst is not None and worst[0] == KILL and worst[1]["p99_ms"] == 3000
    text = text_report(tally, [], [KILL, LOCK], [], {})
    assert "worst single fault: kill node2 8000 ms long, p99=3000 max=3000 (n=1)" in text
