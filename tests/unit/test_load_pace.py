"""The cycle load's pacing (:mod:`tjobs.firing.load_pace`): its schedule on its own, then a runner's
cycle load paced on the in-memory store, its waits taken on a manual clock: it reads every task once,
spread over part of the lead, and has them all in the wheel before the cycle's first instant."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tests.unit.test_runner_cycle_load import CYCLE_LOAD_AT, SECOND, T0, TOPOLOGY, Harness, add_task
from tjobs.firing import load_pace
from tjobs.firing.load_pace import MAX_WAIT_MS, MIN_ROWS_PER_S, URGENT_MS, LoadPace, offer_in_chunks

START = 1_000_000


def test_a_cycle_load_is_spread_over_its_share_of_the_time_left_at_the_rate_of_the_last_load() -> None:
    pace = LoadPace.for_cycle(START, START + 30_000, 0.5, 300_000)
    assert pace is not None
    assert pace.finish_by_ms == START + 15_000
    assert pace.rows_per_s == 20_000  # 300,000 rows over 15 s
    # a small (or first) load is read at the floor rate, not stretched over the lead
    small = LoadPace.for_cycle(START, START + 30_000, 0.5, 100)
    assert small is not None and small.rows_per_s == MIN_ROWS_PER_S
    # unpaced: spread 0, or no time left before the cycle's first instant (a late wake-up)
    assert LoadPace.for_cycle(START, START + 30_000, 0, 120_000) is None
    assert LoadPace.for_cycle(START, START, 0.5, 120_000) is None


def _run(pace: LoadPace, pages: list[int], next_due_ms: int | None) -> tuple[int, list[int]]:
    """Read ``pages`` one after another, each read taking no time, waiting as told: the clock at the end
    and each wait."""
    now, waits = pace.start_ms, []
    for rows in pages:
        wait = pace.wait_ms(rows, next_due_ms, now)
        waits.append(wait)
        now += wait
    return now, waits


def test_the_reads_follow_the_schedule_and_end_by_the_finish() -> None:
    pace = LoadPace.for_cycle(START, START + 30_000, 0.5, 300_000)
    assert pace is not None
    end, waits = _run(pace, [1000] * 300, next_due_ms=START + 30_000)
    assert pace.read == 300_000
    assert end == START + 15_000  # 20,000 rows a second: after the last page, 15 s in
    assert max(waits) <= MAX_WAIT_MS


def test_a_load_larger_than_expected_is_paced_until_the_finish_then_read_at_once() -> None:
    pace = LoadPace.for_cycle(START, START + 30_000, 0.5, 300_000)
    assert pace is not None
    end, waits = _run(pace, [1000] * 1200, next_due_ms=START + 30_000)  # four times the rows expected
    assert end == pace.finish_by_ms  # never waits past it
    assert waits[-900:] == [0] * 900


def test_no_wait_before_a_page_whose_rows_may_be_due_soon() -> None:
    pace = LoadPace.for_cycle(START, START + 30_000, 0.5, 300_000)
    assert pace is not None
    assert pace.wait_ms(50_000, START + URGENT_MS - 1, START) == 0  # the shard's next rows: due in < 2 s
    assert pace.wait_ms(1_000, START + URGENT_MS, START) == MAX_WAIT_MS  # far enough: wait, at most 1 s
    assert pace.wait_ms(1_000, None, START) == MAX_WAIT_MS  # another shard's page next


async def test_offers_every_row_once_in_order_yielding_between_chunks() -> None:
    offered: list[int] = []
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    ticks = 0
    await offer_in_chunks(list(range(1_250)), offered.append, chunk=500)
    ticker.cancel()
    assert offered == list(range(1_250))
    assert ticks == 2  # the event loop ran between the three chunks


# ---- a runner's cycle load, paced ---------------------------------------------------------------


def _naps_on_the_clock(h: Harness) -> list[float]:
    """The runner's naps during a load move the manual clock instead of sleeping: the waits the pace asks
    for, taken (the cycle loop's own naps, between loads, still sleep)."""
    naps: list[float] = []
    original = h.runner._nap

    async def nap(seconds: float) -> None:
        if not h.runner._loading:
            await original(seconds)
            return
        naps.append(seconds)
        h.clock.advance(round(seconds * 1000))
        await asyncio.sleep(0)

    h.runner._nap = nap  # type: ignore[method-assign]
    return naps


@pytest.mark.parametrize("tasks", [20_000, 40_000])
async def test_a_paced_cycle_load_reads_every_task_once_and_is_done_before_the_cycle_starts(tasks: int) -> None:
    h = Harness()  # cycle 300 s, lead 30 s, load_spread 0.5 (the default)
    shards = list(TOPOLOGY.shards())
    next_cycle = [await add_task(h.store, shards[i % len(shards)], 300 * SECOND + i % 290_000) for i in range(tasks)]
    await h.start()
    try:
        assert h.store.read_ids() == []  # nothing due before the first horizon
        naps = _naps_on_the_clock(h)
        h.clock.set(T0 + CYCLE_LOAD_AT)
        target = T0 + 600 * SECOND
        for _ in range(3000):
            await asyncio.sleep(0.005)
            done = {c.shard for c in h.store.calls if c.before_ms == target}
            if h.runner.horizon_ms == target and done == h.runner.firing_jobs() and not h.runner._loading:
                break
        else:
            raise AssertionError("the cycle load did not end")
        finished_ms = h.clock.now_ms() - T0

        # every task read once, each in the wheel, nothing fired yet
        read = Counter(h.store.read_ids())
        assert set(read) == {t.id for t in next_cycle} and set(read.values()) == {1}
        assert all(h.runner.wheel.get(t.id) is not None for t in next_cycle)
        assert h.sent == []
        # spread (the first cycle load: at the floor rate) and done before the cycle's first instant,
        # within load_spread of the lead
        assert naps and max(naps) <= MAX_WAIT_MS / 1000
        expected_s = tasks / MIN_ROWS_PER_S
        assert CYCLE_LOAD_AT + min(expected_s, 15) * SECOND - 1_000 <= finished_ms <= CYCLE_LOAD_AT + 15 * SECOND
        assert finished_ms < 300 * SECOND
    finally:
        await h.runner.stop()


async def test_with_load_spread_0_the_cycle_load_is_not_paced(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.runner._settings = h.runner._settings.model_copy(update={"load_spread": 0.0})
    waits: list[int] = []
    original = load_pace.LoadPace.wait_ms

    def spy(self: LoadPace, rows: int, next_due_ms: int | None, now_ms: int) -> int:
        waits.append(original(self, rows, next_due_ms, now_ms))
        return waits[-1]

    monkeypatch.setattr(load_pace.LoadPace, "wait_ms", spy)
    for i in range(3_000):
        await add_task(h.store, i % TOPOLOGY.shard_count, 300 * SECOND + i)
    await h.start()
    try:
        await h.cycle_load(CYCLE_LOAD_AT)
        assert waits == []
        assert len(h.store.read_ids()) == 3_000
    finally:
        await h.runner.stop()
