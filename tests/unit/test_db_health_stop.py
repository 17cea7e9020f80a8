"""DatabaseHealth.stop() returns when its cancellation lands while a check waits for its StallWatch to end.

StallWatch.stop() cancelled its tick task and awaited it under ``suppress(CancelledError)``: a cancellation
of the *caller* that arrived during that await was passed on to the tick task, came back as the tick's
CancelledError and was swallowed with it. The health loop (``while True``) then went on checking, and
DatabaseHealth.stop() (cancel once, await the loop) never returned: the etcd coordinator's stop() awaits
it, so a node could not stop (a 300 s hang of tests/cluster/test_etcd_session_fence.py in CI: no etcd
traffic from the stopping node, then its lease revoke only when pytest-timeout's teardown cancelled again).
"""

from __future__ import annotations

import asyncio

import pytest

from sharding import Topology
from tjobs.cluster import db_health
from tjobs.cluster.db_health import DatabaseHealth, StallWatch
from tjobs.stores.memory import MemoryTaskStore

STOP_WITHIN_S = 2.0


async def test_a_cancellation_of_the_caller_while_a_stall_watch_stops_is_raised() -> None:
    watch = StallWatch()
    stopping = asyncio.create_task(watch.stop())
    await asyncio.sleep(0)  # stopping now waits for the tick task to end
    stopping.cancel()
    await asyncio.wait({stopping}, timeout=STOP_WITHIN_S)
    assert stopping.cancelled(), "the caller's cancellation was swallowed with the tick's"


async def test_the_health_loop_stops_when_cancelled_while_its_check_ends_its_stall_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    health = DatabaseHealth(MemoryTaskStore(Topology(1, 1, 4)), 4, interval_s=0.01)
    in_watch_stop = asyncio.Event()
    original = StallWatch.stop

    async def stop(watch: StallWatch) -> float:
        in_watch_stop.set()  # the test's stop() below runs while this check awaits the tick's end
        return await original(watch)

    await health.start()
    monkeypatch.setattr(db_health.StallWatch, "stop", stop)
    async with asyncio.timeout(5):  # not wait_for: its own task would let the check run past the await
        await in_watch_stop.wait()
    stopping = asyncio.ensure_future(health.stop())
    await asyncio.wait({stopping}, timeout=STOP_WITHIN_S)
    if not stopping.done():
        stopping.cancel()
        pytest.fail(f"DatabaseHealth.stop() did not return within {STOP_WITHIN_S} s: the loop's cancellation was lost")
    stopping.result()
