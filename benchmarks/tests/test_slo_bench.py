"""The SLO bench's arithmetic: the seeded minutes and the percentiles."""

from __future__ import annotations

import random

from benchmarks.slo import batched, fires_between, fold_costs_us, node_ids, p50_p99, seeded_minutes


def test_seeded_minutes_cover_every_app_and_minute_with_consistent_counts() -> None:
    minutes = list(seeded_minutes(3, 1_000, 10, random.Random(1)))
    assert len(minutes) == 30
    assert {(m.app_id, m.minute) for m in minutes} == {(f"app-{a}", t) for a in range(3) for t in range(990, 1_000)}
    for minute in minutes:
        counts = minute.counts
        assert sum(counts.lateness) == counts.fires > 0
        assert counts.delivered + counts.dead == counts.fires


def test_batches_keep_every_minute_in_order() -> None:
    minutes = list(seeded_minutes(2, 100, 7, random.Random(2)))
    batches = list(batched(iter(minutes), 4))
    assert [len(b) for b in batches] == [4, 4, 4, 2]
    assert [m for b in batches for m in b] == minutes


def test_node_ids_are_distinct() -> None:
    assert len(set(node_ids(3))) == 3


def test_nearest_rank_percentiles() -> None:
    assert p50_p99([float(v) for v in range(1, 101)]) == (50.0, 99.0)
    assert p50_p99([5.0]) == (5.0, 5.0)
    assert p50_p99([3.0, 1.0, 2.0]) == (2.0, 3.0)


def test_fold_costs_are_reported_per_fire() -> None:
    costs = fold_costs_us(2_000, 4, 2_000.0)
    assert set(costs) >= {"fire_fold_us", "outcome_fold_us", "take_per_fire_us", "total_per_fire_us"}
    assert costs["take_per_fire_us"] == costs["take_per_minute_us"] / 120_000


def test_fires_between_counts_the_minutes_an_answer_covers() -> None:
    from tjobs.clock import iso_ms

    per_minute = {minute: 10 for minute in range(100, 110)}
    assert fires_between(per_minute, iso_ms(100 * 60_000), iso_ms(110 * 60_000)) == 100
    assert fires_between(per_minute, iso_ms(101 * 60_000), iso_ms(111 * 60_000)) == 90
