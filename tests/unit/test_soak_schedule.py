"""The nemesis soak's fault schedule (tests/chaos/soak/schedule.py): one fault per period, the kinds in
turn, every kind on every victim, nothing in the quiet tail."""

from __future__ import annotations

import pytest

from tests.chaos.soak.schedule import (
    DURATIONS_S,
    KINDS,
    NODE_FAULTS,
    ROW_LOCK,
    fault_schedule,
)


def test_faults_start_one_period_apart_and_cycle_through_the_kinds() -> None:
    plan = fault_schedule(3600, period_s=60, first_at_s=30)
    assert [f.at_s for f in plan[:4]] == [30, 90, 150, 210]
    assert [f.kind for f in plan[: 2 * len(KINDS)]] == [*KINDS, *KINDS]
    assert all(f.duration_s == DURATIONS_S[f.kind] for f in plan)


def test_two_hours_hit_every_kind_on_every_victim_node() -> None:
    plan = fault_schedule(2 * 3600)
    assert len(plan) == 119  # at 30, 90, ..., 7110 s: the last (a 20-s clock step) ends by 7140, the tail's start
    pairs = {(f.kind, f.victim_node) for f in plan if f.kind in NODE_FAULTS}
    assert pairs == {(kind, node) for kind in KINDS if kind in NODE_FAULTS for node in (2, 3)}


def test_a_row_lock_has_no_victim_node_and_node_faults_never_hit_node_one() -> None:
    plan = fault_schedule(3600)
    assert {f.victim_node for f in plan if f.kind == ROW_LOCK} == {None}
    assert {f.victim_node for f in plan if f.kind != ROW_LOCK} == {2, 3}


def test_every_fault_ends_before_the_quiet_tail() -> None:
    plan = fault_schedule(300, period_s=40, first_at_s=30, quiet_tail_s=60)
    assert all(f.at_s + f.duration_s <= 240 for f in plan)
    # 30 kill, 70 stop, 110 partition, 150 row lock, 190 clock ahead (ends 210); 230 clock behind would end 250
    assert [f.kind for f in plan] == list(KINDS[:5])


def test_a_period_too_short_for_a_fault_and_its_gap_is_refused() -> None:
    with pytest.raises(ValueError, match="partition"):
        fault_schedule(3600, period_s=30)
    with pytest.raises(ValueError):
        fault_schedule(3600, kinds=())
