"""A node's clock against the database's (tjobs.cluster.clock_check), with injected clocks.

Given a database clock and a node clock shifted from it, the check measures the shift within half a
round trip, refuses (``ok`` false) past the bound, and takes jobs again only once back within half the
bound; a step of the node's wall clock between two reads is seen at once, without a read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from tjobs.cluster.clock_check import ClockCheck

START_MS = 1_800_000_000_000
READ_MS = 20  # the database read's round trip


class Clocks:
    """The database's clock, the node's monotonic clock and the node's wall clock (database + shift)."""

    def __init__(self, shift_ms: int) -> None:
        self.database_ms = START_MS
        self.monotonic = 1_000.0
        self.shift_ms = shift_ms

    def now_ms(self) -> int:  # the node's wall clock
        return self.database_ms + self.shift_ms

    def monotonic_ms(self) -> float:
        return self.monotonic

    def pass_ms(self, ms: int) -> None:
        self.database_ms += ms
        self.monotonic += ms


class Store:
    """Answers the database's clock halfway through a read that takes READ_MS."""

    def __init__(self, clocks: Clocks) -> None:
        self.clocks = clocks
        self.fail = False

    async def database_now_ms(self) -> int:
        if self.fail:
            raise ConnectionError("the database does not answer")
        self.clocks.pass_ms(READ_MS // 2)
        answer = self.clocks.database_ms
        self.clocks.pass_ms(READ_MS // 2)
        return answer


def checker(shift_ms: int, bound_ms: int = 1000) -> tuple[ClockCheck, Clocks, Store]:
    clocks = Clocks(shift_ms)
    store = Store(clocks)
    check = ClockCheck(store, clocks, bound_ms, monotonic_ms=clocks.monotonic_ms)  # type: ignore[arg-type]
    return check, clocks, store


def actions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(record, "action", "") for record in caplog.records if hasattr(record, "action")]


@pytest.mark.parametrize("shift_ms", [2_000, -2_000, 30_000, -30_000])
async def test_a_shifted_node_clock_is_measured_and_refused_past_the_bound(
    shift_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    check, _, _ = checker(shift_ms)
    caplog.set_level(logging.INFO, logger="tjobs.cluster.clock_check")
    await check.check()
    assert abs(check.offset_ms - (-shift_ms)) <= READ_MS // 2  # database minus node: ahead is negative
    assert check.round_trip_ms == READ_MS
    assert not check.ok
    assert actions(caplog) == ["clock_offset_exceeded"]
    assert check.describe()["clock_offset_exceeded"] is True


@pytest.mark.parametrize("shift_ms", [0, 300, -300, 990, -990])
async def test_a_node_within_the_bound_is_ok(shift_ms: int) -> None:
    check, _, _ = checker(shift_ms)
    await check.check()
    assert abs(check.offset_ms + shift_ms) <= READ_MS // 2
    assert check.ok


@pytest.mark.parametrize("shift_ms", [2_000, -2_000, 30_000, -30_000])
async def test_a_refused_node_resumes_only_back_within_half_the_bound(
    shift_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    check, clocks, _ = checker(shift_ms)
    caplog.set_level(logging.INFO, logger="tjobs.cluster.clock_check")
    await check.check()
    assert not check.ok
    sign = 1 if shift_ms > 0 else -1
    clocks.shift_ms = sign * 800  # corrected slowly (slewed): a read sees it
    await check.check()
    assert not check.ok  # within the bound but not within half of it: still refused
    clocks.shift_ms = sign * 400
    await check.check()
    assert check.ok
    assert actions(caplog) == ["clock_offset_exceeded", "clock_offset_recovered"]


@pytest.mark.parametrize("step_ms", [2_000, -2_000, 30_000, -30_000])
async def test_a_step_of_the_wall_clock_is_refused_at_once_without_a_read(step_ms: int) -> None:
    check, clocks, store = checker(0)
    await check.check()
    assert check.ok
    store.fail = True  # no read answers from here on: the step alone must be seen
    clocks.pass_ms(1_000)
    clocks.shift_ms = step_ms  # date -s, an NTP step: the wall clock moves, the monotonic one does not
    assert abs(check.offset_ms + step_ms) <= READ_MS // 2
    assert not check.ok
    clocks.shift_ms = 0  # stepped back
    assert check.ok


async def test_a_read_that_gets_no_answer_changes_nothing() -> None:
    check, clocks, store = checker(30_000)
    store.fail = True
    await check.check()
    assert not check.measured and check.ok and check.describe()["clock_offset_ms"] is None
    store.fail = False
    await check.check()
    assert not check.ok
    store.fail = True
    clocks.shift_ms = 0
    clocks.pass_ms(10_000)
    await check.check()  # unanswered: the last answer stands, moved by the step back the node made
    assert check.ok


async def test_a_bound_of_zero_never_refuses_but_still_measures() -> None:
    check, _, _ = checker(30_000, bound_ms=0)
    await check.check()
    assert check.ok
    assert abs(check.offset_ms + 30_000) <= READ_MS // 2


async def test_the_read_with_the_shortest_round_trip_counts() -> None:
    check, clocks, store = checker(2_000)
    slow_reads = [True]

    async def database_now_ms() -> int:  # the first read answers at once, then waits 400 ms to return
        if slow_reads and slow_reads.pop():
            answer = clocks.database_ms
            clocks.pass_ms(400)
            return answer
        return await Store.database_now_ms(store)

    store.database_now_ms = database_now_ms  # type: ignore[method-assign]
    await check.check()
    assert abs(check.offset_ms + 2_000) <= READ_MS // 2 and check.round_trip_ms == READ_MS


async def test_a_read_ends_at_its_deadline_even_when_a_wait_for_inside_lost_it() -> None:
    """A server that accepts the connection as the read's deadline passes, then never answers (asyncmy
    connects within ``wait_for``, which swallows the deadline's one cancellation, gh-86296): the check,
    which the coordinator's start awaits, must still end, measuring nothing."""

    class AcceptsThenHangs:
        async def database_now_ms(self) -> int:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
            await asyncio.sleep(3600)
            return 0

    check = ClockCheck(AcceptsThenHangs(), Clocks(0), 500, read_timeout_s=0.05)  # type: ignore[arg-type]
    checking = asyncio.ensure_future(check.check())
    await asyncio.wait({checking}, timeout=2.0)
    if not checking.done():
        checking.cancel()
        pytest.fail("the clock check did not end within 2 s: the read's deadline was lost")
    checking.result()
    assert not check.measured and check.ok
