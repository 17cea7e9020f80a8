"""The store's service-level minutes: each node adds to its own rows, any node sums every node's."""

from __future__ import annotations

import random

import pytest

from tests.contract.backends import measure_writes
from tjobs.model import SLO_LATENESS_SLOTS, SloCounts, SloMinute
from tjobs.stores.base import TaskStore

pytestmark = pytest.mark.asyncio

MINUTE = 29_000_000


def counts(
    fires: int, slot: int = 0, delivered: int = 0, dead: int = 0, misses: int = 0, throttled: int = 0
) -> SloCounts:
    lateness = tuple(fires if index == slot else 0 for index in range(SLO_LATENESS_SLOTS))
    return SloCounts(fires, delivered, dead, misses, throttled, lateness)


async def test_nodes_add_to_their_own_rows_and_sums_cover_every_node(store: TaskStore) -> None:
    await store.add_slo_minutes(
        "n1", [SloMinute("a", MINUTE, counts(2, delivered=2)), SloMinute("b", MINUTE, counts(1))]
    )
    await store.add_slo_minutes("n2", [SloMinute("a", MINUTE, counts(3, slot=4, dead=1, misses=2, throttled=5))])
    await store.add_slo_minutes("n1", [SloMinute("a", MINUTE, counts(1, delivered=1))])  # the same row again: added
    await store.add_slo_minutes("n1", [SloMinute("a", MINUTE + 1, counts(7))])

    a = await store.sum_slo_minutes("a", MINUTE, MINUTE + 1)
    assert (a.fires, a.delivered, a.dead, a.misses, a.throttled) == (6, 3, 1, 2, 5)
    assert a.lateness[0] == 3 and a.lateness[4] == 3 and sum(a.lateness) == 6
    assert (await store.sum_slo_minutes("a", MINUTE, MINUTE + 2)).fires == 13
    assert (await store.sum_slo_minutes(None, MINUTE, MINUTE + 1)).fires == 7
    assert await store.sum_slo_minutes("nobody", MINUTE, MINUTE + 2) == SloCounts()


async def test_purge_drops_whole_hours_before_the_cutoff_minutes_and_hour_rows_alike(store: TaskStore) -> None:
    hour = MINUTE // 60 + 1  # minutes hour * 60 - 2 .. hour * 60 + 2: two in the hour before, three in it
    first = hour * 60
    await store.add_slo_minutes("n1", [SloMinute("a", first + k, counts(1)) for k in range(-2, 3)])
    assert await store.purge_slo_minutes(first + 1, 1) == 2  # the hour row before, one of its minutes
    assert await store.purge_slo_minutes(first + 1, 100) == 1  # its other minute; the cutoff's hour stays
    assert await store.purge_slo_minutes(first + 1, 100) == 0
    assert (await store.sum_slo_minutes("a", first - 60, first)).fires == 0
    assert (await store.sum_slo_minutes("a", first, first + 60)).fires == 3  # its hour row
    assert (await store.sum_slo_minutes("a", first + 1, first + 2)).fires == 1  # its minute rows
    assert (await store.sum_slo_minutes("a", 0, first + 100)).fires == 3


def _added(a: SloCounts, b: SloCounts) -> SloCounts:
    return SloCounts(
        a.fires + b.fires,
        a.delivered + b.delivered,
        a.dead + b.dead,
        a.misses + b.misses,
        a.throttled + b.throttled,
        tuple(x + y for x, y in zip(a.lateness, b.lateness, strict=True)),
        tuple(x + y for x, y in zip(a.first_send_lateness, b.first_send_lateness, strict=True)),
        tuple(x + y for x, y in zip(a.first_answer_lateness, b.first_answer_lateness, strict=True)),
    )


def _numbers(counts: SloCounts) -> tuple[int, ...]:
    scalars = (counts.fires, counts.delivered, counts.dead, counts.misses, counts.throttled)
    return (*scalars, *counts.lateness, *counts.first_send_lateness, *counts.first_answer_lateness)


def _counts_of(numbers: list[int]) -> SloCounts:
    """The :class:`SloCounts` whose :func:`_numbers` are ``numbers``."""
    slots = SLO_LATENESS_SLOTS
    histograms = [tuple(numbers[5 + k * slots : 5 + (k + 1) * slots]) for k in range(3)]
    assert len(numbers) == 5 + 3 * slots
    return SloCounts(numbers[0], numbers[1], numbers[2], numbers[3], numbers[4], *histograms)


async def test_first_attempt_lateness_at_the_send_and_at_the_answer_is_kept_apart_from_commit_lateness(
    store: TaskStore,
) -> None:
    def histogram(**slots: int) -> tuple[int, ...]:
        return tuple(slots.get(f"s{index}", 0) for index in range(SLO_LATENESS_SLOTS))

    one = SloCounts(
        fires=2,
        lateness=histogram(s0=2),
        first_send_lateness=histogram(s4=1, s6=1),
        first_answer_lateness=histogram(s6=1, s14=1),
    )
    await store.add_slo_minutes("n1", [SloMinute("a", MINUTE, one)])
    await store.add_slo_minutes("n2", [SloMinute("a", MINUTE, one), SloMinute("a", MINUTE + 90, one)])

    summed = await store.sum_slo_minutes("a", MINUTE, MINUTE + 1)
    assert summed.lateness == histogram(s0=4)
    assert summed.first_send_lateness == histogram(s4=2, s6=2)
    assert summed.first_answer_lateness == histogram(s6=2, s14=2)  # past the last bound too
    across_an_hour = await store.sum_slo_minutes(None, MINUTE - 60, MINUTE + 120)  # hour rows and edges
    assert across_an_hour.first_answer_lateness == histogram(s6=3, s14=3)


async def test_sums_over_whole_hours_are_the_sums_of_the_minutes_whatever_the_edges(store: TaskStore) -> None:
    """Ranges of a day and more read their whole hours from the hour rows, the edges from the minutes:
    compared with the minutes the test added, summed here, over ranges whose edges fall anywhere."""
    rng = random.Random(16)
    start = (MINUTE // 60) * 60 - 37  # 37 minutes before an hour begins
    minutes = 3 * 1440 + 100  # a little over three days
    added: dict[tuple[str, int], SloCounts] = {}
    for node in ("n1", "n2", "n3"):
        batch: list[SloMinute] = []
        for minute in range(start, start + minutes):
            for app in ("a", "b"):
                if rng.random() < 0.2:
                    continue  # an app and node with nothing in that minute
                lateness = tuple(rng.randrange(4) for _ in range(SLO_LATENESS_SLOTS))
                sent = tuple(rng.randrange(3) for _ in range(SLO_LATENESS_SLOTS))
                answered = tuple(rng.randrange(3) for _ in range(SLO_LATENESS_SLOTS))
                fold = SloCounts(
                    sum(lateness), rng.randrange(5), rng.randrange(2), rng.randrange(2), 0, lateness, sent, answered
                )
                batch.append(SloMinute(app, minute, fold))
                added[(app, minute)] = _added(added.get((app, minute), SloCounts()), fold)
        again = batch[:: rng.randrange(40, 60)]  # some minutes added twice, as after a refused pass
        for part in (batch[: len(batch) // 2], batch[len(batch) // 2 :], again):
            await store.add_slo_minutes(node, part)
        for twice in again:
            added[(twice.app_id, twice.minute)] = _added(added[(twice.app_id, twice.minute)], twice.counts)

    # each minute's counts as one row of numbers, summed column by column below: the same sums as folding them
    # with _added one by one, which took ~1.5 s of CPU per backend (30 ranges of ~7,000 minutes)
    rows = {key: _numbers(fold) for key, fold in added.items()}

    def expected(app_id: str | None, from_minute: int, to_minute: int) -> SloCounts:
        chosen = [
            row
            for (app, minute), row in rows.items()
            if (app_id is None or app == app_id) and from_minute <= minute < to_minute
        ]
        return _counts_of([sum(column) for column in zip(*chosen, strict=True)]) if chosen else SloCounts()

    ranges = [
        (start, start + minutes),  # everything: uneven at both ends
        (start + 37, start + 37 + 1440),  # a day of whole hours
        (start + 37 + 60, start + 37 + 2 * 60),  # one whole hour
        (start + 100, start + 100 + 1440),  # a day, uneven
        (start + 1, start + 1 + 2 * 1440 + 59),  # two days, 23 and 59 minutes at the edges
        (start + 37, start + 37 + 3 * 1440 + 1),  # aligned start, one minute past the last hour
        (start + 36, start + 37 + 1440),  # one minute before the first whole hour
        (start + 40, start + 40 + 59),  # no whole hour: minutes only
        (start + 90, start + 90 + 60),  # an hour across a boundary: minutes only
        (start - 500, start + 10),  # before anything was added, then a few minutes
    ]
    for from_minute, to_minute in ranges:
        for app_id in ("a", "b", None):
            assert await store.sum_slo_minutes(app_id, from_minute, to_minute) == expected(
                app_id, from_minute, to_minute
            ), (app_id, from_minute - start, to_minute - start)


@pytest.mark.mariadb
async def test_a_purge_of_one_old_minute_examines_its_rows_not_the_table(
    mariadb_store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady state of one app on one node: each pass finds one minute (and one hour) aged out. Its
    ``DELETE`` named the row by a one-element row list, which MariaDB 10.11 locates through no index in a
    single-table ``DELETE``: every pass read the whole table (tests/contract/test_flow_writes_by_key.py)."""
    hour = MINUTE // 60 + 1
    first = hour * 60
    kept = [SloMinute(f"app{n}", first + k, counts(1)) for n in range(20) for k in range(30)]
    await mariadb_store.add_slo_minutes("n1", [SloMinute("a", first - 1, counts(1)), *kept])
    reads = measure_writes(monkeypatch)
    assert await mariadb_store.purge_slo_minutes(first, 100) == 2  # the old minute and its hour's row
    [examined] = reads
    assert examined <= 12, examined  # a handful of index and row reads; the table holds 621 rows
