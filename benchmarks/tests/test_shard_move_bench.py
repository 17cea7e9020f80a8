"""The shard-move bench's arithmetic: minted ids, the split into the moved database and the others,
lateness per phase of the move and the largest gap between callbacks."""

from __future__ import annotations

import pytest

from benchmarks.report import account
from benchmarks.shard_move import (
    Phases,
    account_groups,
    database_of,
    largest_gap_ms,
    lateness_between,
    mint_ids,
    one_shot,
    split_registered,
)
from sharding import Topology, shard_of_task_id
from testkit.sink import CallbackRecords
from tjobs.specs import CallbackSpec
from tjobs.stores.schema import task_to_row

T0_MS = 1_800_000_000_000
TOPOLOGY = Topology.parse("8x4x16")


def test_minted_ids_are_distinct_and_carry_their_shards() -> None:
    shards = [16, 17, 16, 511, 16] * 3000  # 9,000 ids of shard 16: more than one id instant's 4,096
    ids = mint_ids(shards, T0_MS)
    assert len(set(ids)) == len(ids)
    assert [shard_of_task_id(task_id) for task_id in ids] == shards
    assert {database_of(task_id, TOPOLOGY) for task_id in ids} == {1, 31}
    assert not set(ids) & set(mint_ids(shards, T0_MS - 86_400_000))  # disjoint instants, disjoint ids


def test_a_seeded_task_is_a_due_one_shot_row() -> None:
    (task_id,) = mint_ids([16], T0_MS)
    row = task_to_row(one_shot(task_id, "app-1", T0_MS + 5000, CallbackSpec(("http://127.0.0.1:1/cb",)), T0_MS))
    assert row["next_run_at"] == T0_MS + 5000 and row["status"] == "active" and row["fire_count"] == 0
    assert row["app_id"] == "app-1"


def records_of(rows: list[tuple[int, int, int]]) -> CallbackRecords:
    """(task id, scheduled ms, received ms) rows; each callback its own flow, first attempt."""
    records = CallbackRecords()
    for flow, (task_id, scheduled_ms, received_ms) in enumerate(rows):
        records.append(received_ms * 1000, task_id, scheduled_ms, flow, 1)
    return records


def test_lateness_is_split_by_database_and_by_phase_of_the_move() -> None:
    moved_ids = mint_ids([16] * 6, T0_MS)
    other_ids = mint_ids([32] * 6, T0_MS)
    instants = [T0_MS + 1000 * n for n in range(6)]  # 0..5 s; the move from 2 s to 4 s
    registered = {**dict(zip(moved_ids, instants, strict=True)), **dict(zip(other_ids, instants, strict=True))}
    late_moved = [10, 10, 1500, 900, 20, 20]  # held back while the move cut over
    rows = [(i, at, at + late) for i, at, late in zip(moved_ids, instants, late_moved, strict=True)]
    rows += [(i, at, at + 5) for i, at in zip(other_ids, instants, strict=True)]
    rows.append((other_ids[0], instants[0], instants[0] + 50))  # the same flow again: a duplicate
    records = records_of(rows)
    records.flow[-1] = records.flow[len(moved_ids)]
    phases = Phases(T0_MS, T0_MS + 6000, T0_MS + 2000, T0_MS + 4000, T0_MS + 2100, T0_MS + 2600)

    groups = {"moved": lambda i: database_of(i, TOPOLOGY) == 1, "others": lambda i: database_of(i, TOPOLOGY) != 1}
    figures = account_groups(registered, records, groups, phases)

    assert (figures["due"], figures["missing"], figures["duplicates"], figures["unexpected"]) == (12, 0, 1, 0)
    moved, others = figures["moved"], figures["others"]
    assert (moved["due"], moved["missing"], moved["duplicates"]) == (6, 0, 0)
    assert (others["due"], others["duplicates"]) == (6, 1)
    assert moved["lateness_before_move_ms"] == {"n": 2, "p50": 10.0, "p99": 10.0, "max": 10.0}
    assert moved["lateness_during_move_ms"] == {"n": 2, "p50": 900.0, "p99": 1500.0, "max": 1500.0}
    assert moved["lateness_after_move_ms"] == {"n": 2, "p50": 20.0, "p99": 20.0, "max": 20.0}
    assert moved["lateness_around_cut_over_ms"]["n"] == 1  # due 2.1 s .. 3.6 s: the one at 3 s
    timeline = moved["around_cut_over_by_250ms"]  # from 0.1 s (2 s before the cut-over) for 6 s
    assert [(entry["from_s"], entry["max_ms"]) for entry in timeline] == [
        (0.75, 10.0),
        (1.75, 1500.0),
        (2.75, 900.0),
        (3.75, 20.0),
        (4.75, 20.0),
    ]
    assert others["lateness_during_move_ms"]["max"] == 5.0
    assert [(entry["from_s"], entry["n"]) for entry in moved["by_10s"]] == [(0.0, 6)]
    assert others["received_per_s_during_move"] == 1.0  # 2 first callbacks in the 2 s of the move
    # moved: receipts at 3.5 s and 3.9 s inside 2..4 s; none from 2 s to 3.5 s
    assert moved["largest_gap_during_move_ms"] == 1500.0


def test_split_and_lateness_between_take_the_scheduled_instant_half_open() -> None:
    registered = {1 << 22 | n: T0_MS + n for n in range(4)}
    inside, outside = split_registered(registered, lambda i: i & 1 == 1)
    assert sorted(inside.values()) == [T0_MS + 1, T0_MS + 3] and len(outside) == 2
    delivery = account(registered, records_of([(i, at, at + 7) for i, at in registered.items()]))
    assert lateness_between(delivery, T0_MS + 1, T0_MS + 3).count == 2
    assert lateness_between(delivery, T0_MS + 4, T0_MS + 9).count == 0


@pytest.mark.parametrize(
    ("receipts_ms", "window", "expected"),
    [
        ([], (0, 100), 100.0),  # nothing arrived: the whole interval
        ([10, 20, 90], (0, 100), 70.0),
        ([10, 20, 30], (0, 100), 70.0),  # the last receipt to the interval's end
        ([-50, 40, 200], (0, 100), 60.0),  # receipts outside do not count
        ([5], (10, 10), None),
    ],
)
def test_largest_gap_covers_the_edges_of_the_interval(
    receipts_ms: list[int], window: tuple[int, int], expected: float | None
) -> None:
    receipts_us = [T0_MS * 1000 + ms * 1000 for ms in receipts_ms]
    assert largest_gap_ms(receipts_us, T0_MS + window[0], T0_MS + window[1]) == expected
