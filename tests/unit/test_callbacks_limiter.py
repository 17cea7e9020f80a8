"""Per-app limits: concurrency, rate, a global cap, and no tenant slowing another."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tjobs.delivery.limiter import AppLimiter, Gate

UNLIMITED = 0.0  # a rate of 0 means "no rate limit"


async def _hold(
    limiter: AppLimiter,
    app: str,
    rate: float,
    concurrency: int,
    hold_s: float,
    peaks: dict[str, int],
    live: dict[str, int],
) -> float:
    async with limiter.slot(app, rate, concurrency):
        live[app] = live.get(app, 0) + 1
        peaks[app] = max(peaks.get(app, 0), live[app])
        entered = time.monotonic()
        await asyncio.sleep(hold_s)
        live[app] -= 1
    return entered


async def test_an_app_never_exceeds_its_concurrency() -> None:
    limiter = AppLimiter(global_max_in_flight=100)
    peaks: dict[str, int] = {}
    live: dict[str, int] = {}
    await asyncio.gather(*(_hold(limiter, "a", UNLIMITED, 3, 0.01, peaks, live) for _ in range(30)))
    assert peaks["a"] == 3
    assert limiter.in_flight("a") == 0 and limiter.in_flight() == 0


async def test_the_global_cap_bounds_all_apps_together() -> None:
    limiter = AppLimiter(global_max_in_flight=4)
    peaks: dict[str, int] = {}
    live: dict[str, int] = {}
    global_peak = 0

    async def watch() -> None:
        nonlocal global_peak
        for _ in range(50):
            global_peak = max(global_peak, limiter.in_flight())
            await asyncio.sleep(0.002)

    await asyncio.gather(
        watch(), *(_hold(limiter, app, UNLIMITED, 10, 0.02, peaks, live) for app in "abc" for _ in range(10))
    )
    assert global_peak == 4


async def test_the_rate_limit_spaces_callbacks_after_the_burst() -> None:
    # 100/s with a 0.1 s burst: 10 go at once, the next 50 at 10 ms intervals (0.5 s).
    limiter = AppLimiter(global_max_in_flight=100, burst_s=0.1)
    started = time.monotonic()
    entered: list[float] = []

    async def one() -> None:
        async with limiter.slot("a", 100.0, 1000):
            entered.append(time.monotonic() - started)

    await asyncio.gather(*(one() for _ in range(60)))
    entered.sort()
    assert entered[9] < 0.05  # the burst
    assert 0.45 <= entered[-1] < 0.75
    gaps = [b - a for a, b in itertools.pairwise(entered[10:])]
    assert sum(gaps) / len(gaps) == pytest.approx(0.01, abs=0.003)


async def test_a_throttled_fire_waits_and_is_still_delivered() -> None:
    limiter = AppLimiter(global_max_in_flight=10, burst_s=1.0)
    done = 0

    async def one() -> None:
        nonlocal done
        async with limiter.slot("slow-rate", 20.0, 5):
            done += 1

    await asyncio.wait_for(asyncio.gather(*(one() for _ in range(30))), timeout=2.0)
    assert done == 30


async def test_a_slow_app_does_not_delay_another_app() -> None:
    # Given app A whose receiver holds every slot for 1 s, with a backlog far beyond its concurrency
    limiter = AppLimiter(global_max_in_flight=20)
    peaks: dict[str, int] = {}
    live: dict[str, int] = {}
    slow = [asyncio.create_task(_hold(limiter, "A", UNLIMITED, 2, 1.0, peaks, live)) for _ in range(30)]
    await asyncio.sleep(0.05)
    assert limiter.waiting("A") == 28
    # When app B sends 50 quick callbacks
    started = time.monotonic()
    await asyncio.gather(*(_hold(limiter, "B", UNLIMITED, 5, 0.001, peaks, live) for _ in range(50)))
    # Then they all go through at once, not after A's backlog
    assert time.monotonic() - started < 0.3
    assert limiter.in_flight("A") == 2
    for task in slow:
        task.cancel()
    await asyncio.gather(*slow, return_exceptions=True)
    assert limiter.in_flight() == 0 and limiter.in_flight("A") == 0


async def test_a_rate_limited_app_does_not_delay_another_app() -> None:
    limiter = AppLimiter(global_max_in_flight=50, burst_s=0.01)
    throttled = [asyncio.create_task(_enter(limiter, "A", 2.0)) for _ in range(10)]  # 2/s: ~5 s of backlog
    await asyncio.sleep(0.01)
    started = time.monotonic()
    await asyncio.gather(*(_enter(limiter, "B", 1000.0) for _ in range(5)))
    assert time.monotonic() - started < 0.1
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
    await asyncio.sleep(0.01)
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    release.set()
    await first
    assert limiter.in_flight() == 0 and limiter.in_flight("a") == 0 and limiter.in_flight("b") == 0
    await asyncio.wait_for(_enter(limiter, "b", UNLIMITED), 0.5)


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
    await asyncio.sleep(0.01)
    assert entered == 1
    tasks.append(asyncio.create_task(one(4)))  # the app's settings changed
    await asyncio.sleep(0.01)
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
