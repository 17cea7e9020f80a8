"""Per-app limits: concurrency, rate, a global cap, and no tenant slowing another.

Time is the limiter's injected clock (:class:`tests.delivery_fakes.ManualTime`); a slow receiver is a
holder waiting for an event. Nothing here depends on wall-clock time.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.delivery_fakes import ManualTime, settle
from tjobs.delivery.limiter import AppLimiter, Gate

UNLIMITED = 0.0  # a rate of 0 means "no rate limit"
HANG_GUARD_S = 10.0  # fails a test that would hang; not a time window


def timed_limiter(global_max_in_flight: int, burst_s: float = 1.0) -> tuple[AppLimiter, ManualTime]:
    time = ManualTime()
    return AppLimiter(global_max_in_flight, burst_s, monotonic=time.monotonic, sleep=time.sleep), time


async def _hold(
    limiter: AppLimiter,
    app: str,
    rate: float,
    concurrency: int,
    release: asyncio.Event | None,
    peaks: dict[str, int],
    live: dict[str, int],
) -> None:
    """Hold one slot of ``app`` until ``release`` is set (or for a few loop turns without one),
    counting how many of the app's (and all apps', under ``"*"``) slots are held at once."""
    async with limiter.slot(app, rate, concurrency):
        for key in (app, "*"):
            live[key] = live.get(key, 0) + 1
            peaks[key] = max(peaks.get(key, 0), live[key])
        if release is not None:
            await release.wait()
        else:
            await settle(3)
        for key in (app, "*"):
            live[key] -= 1


async def test_an_app_never_exceeds_its_concurrency() -> None:
    limiter = AppLimiter(global_max_in_flight=100)
    peaks: dict[str, int] = {}
    live: dict[str, int] = {}
    await asyncio.gather(*(_hold(limiter, "a", UNLIMITED, 3, None, peaks, live) for _ in range(30)))
    assert peaks["a"] == 3
    assert limiter.in_flight("a") == 0 and limiter.in_flight() == 0


async def test_the_global_cap_bounds_all_apps_together() -> None:
    limiter = AppLimiter(global_max_in_flight=4)
    peaks: dict[str, int] = {}
    live: dict[str, int] = {}
    release = asyncio.Event()
    holders = [
        asyncio.create_task(_hold(limiter, app, UNLIMITED, 10, release, peaks, live))
        for app in "abc"
        for _ in range(10)
    ]
    await settle()
    assert limiter.in_flight() == 4
    release.set()
    async with asyncio.timeout(HANG_GUARD_S):
        await asyncio.gather(*holders)
    assert peaks["*"] == 4
    assert limiter.in_flight() == 0


async def test_the_rate_limit_spaces_callbacks_after_the_burst() -> None:
    # 100/s with a 0.1 s burst: 10 go at once, the next 50 at 10 ms intervals (0.5 s).
    limiter, time = timed_limiter(100, burst_s=0.1)
    entered: list[float] = []

    async def one() -> None:
        async with limiter.slot("a", 100.0, 1000):
            entered.append(time.now_s)

    callers = [asyncio.create_task(one()) for _ in range(60)]
    await time.run()
    await asyncio.gather(*callers)
    entered.sort()
    assert entered[:10] == [0.0] * 10  # the burst
    assert entered[10:] == pytest.approx([0.01 * k for k in range(1, 51)])


async def test_a_throttled_fire_waits_and_is_still_delivered() -> None:
    # 20/s with a 1 s burst: 20 go at once, the other 10 within the next half second.
    limiter, time = timed_limiter(10, burst_s=1.0)
    done = 0

    async def one() -> None:
        nonlocal done
        async with limiter.slot("slow-rate", 20.0, 5):
            done += 1

    callers = [asyncio.create_task(one()) for _ in range(30)]
    await time.run()
    await asyncio.gather(*callers)
    assert done == 30
    assert time.now_s == pytest.approx(0.5)


async def test_a_slow_app_does_not_delay_another_app() -> None:
    # Given app A whose receiver holds every slot until released, with a backlog far beyond its concurrency
    limiter = AppLimiter(global_max_in_flight=20)
    peaks: dict[str, int] = {}
    live: dict[str, int] = {}
    never = asyncio.Event()
    slow = [asyncio.create_task(_hold(limiter, "A", UNLIMITED, 2, never, peaks, live)) for _ in range(30)]
    await settle()
    assert limiter.waiting("A") == 28
    # When app B sends 50 quick callbacks
    async with asyncio.timeout(HANG_GUARD_S):
        await asyncio.gather(*(_hold(limiter, "B", UNLIMITED, 5, None, peaks, live) for _ in range(50)))
    # Then they all go through while A's receiver still holds its 2 slots and A's backlog waits
    assert peaks["B"] == 5
    assert limiter.in_flight("A") == 2 and limiter.waiting("A") == 28
    for task in slow:
        task.cancel()
    await asyncio.gather(*slow, return_exceptions=True)
    assert limiter.in_flight() == 0 and limiter.in_flight("A") == 0


async def test_a_rate_limited_app_does_not_delay_another_app() -> None:
    limiter, time = timed_limiter(50, burst_s=0.01)
    throttled = [asyncio.create_task(_enter(limiter, "A", 2.0)) for _ in range(10)]  # 2/s: ~5 s of backlog
    await settle()
    assert time.sleeping == 9
    await asyncio.gather(*(_enter(limiter, "B", 1000.0) for _ in range(5)))
    # B went through without the clock moving and without waiting on it
    assert time.now_s == 0.0 and time.sleeping == 9 and len(time.slept) == 9
    for task in throttled:
        task.cancel()
    await asyncio.gather(*throttled, return_exceptions=True)
    assert limiter.in_flight() == 0


async def _enter(limiter: AppLimiter, app: str, rate: float) -> None:
    async with limiter.slot(app, rate, 100):
        pass


async def test_cancelled_waiters_give_their_slot_back() -> None:
    limiter = AppLimiter(global_max_in_flight=1)
    holder_entered = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with limiter.slot("a", UNLIMITED, 1):
            holder_entered.set()
            await release.wait()

    first = asyncio.create_task(holder())
    await holder_entered.wait()
    waiters = [asyncio.create_task(_enter(limiter, app, UNLIMITED)) for app in ("a", "b", "b")]
    await settle()
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    release.set()
    await first
    assert limiter.in_flight() == 0 and limiter.in_flight("a") == 0 and limiter.in_flight("b") == 0
    async with asyncio.timeout(HANG_GUARD_S):
        await _enter(limiter, "b", UNLIMITED)


async def test_a_raised_concurrency_admits_waiters_at_once() -> None:
    limiter = AppLimiter(global_max_in_flight=100)
    release = asyncio.Event()
    entered = 0

    async def one(concurrency: int) -> None:
        nonlocal entered
        async with limiter.slot("a", UNLIMITED, concurrency):
            entered += 1
            await release.wait()

    tasks = [asyncio.create_task(one(1)) for _ in range(5)]
    await settle()
    assert entered == 1
    tasks.append(asyncio.create_task(one(4)))  # the app's settings changed
    await settle()
    assert entered == 4
    release.set()
    await asyncio.gather(*tasks)
    assert limiter.in_flight("a") == 0


async def test_gate_serves_waiters_in_arrival_order() -> None:
    gate = Gate(1)
    await gate.acquire()
    order: list[int] = []

    async def waiter(n: int) -> None:
        await gate.acquire()
        order.append(n)
        gate.release()

    tasks = [asyncio.create_task(waiter(n)) for n in range(5)]
    await asyncio.sleep(0)
    gate.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert gate.active == 0


async def test_a_free_slot_is_taken_without_a_coroutine_and_a_full_gate_refuses_one() -> None:
    gate = Gate(1)
    assert gate.try_acquire() and gate.active == 1
    assert not gate.try_acquire() and gate.active == 1  # full
    queued = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    assert gate.waiting == 1
    gate.set_limit(2)  # the queued caller is admitted first
    assert await queued is True and gate.active == 2
