"""A background loop's ``stop()`` returns even when the loop's cancellation is lost (CPython gh-86296).

Python 3.11's ``asyncio.wait_for`` returns its inner call's result when the task awaiting it is
cancelled just as that call finishes. asyncmy connects within ``wait_for`` (under every SQL store
call that opens a connection), so do nats-py, aiormq and redis-py with a socket timeout: a loop whose
body awaits such a call can lose the one cancellation its ``stop()`` sends, go on looping, and a
``stop()`` that then awaits it never returns (a node whose shutdown hangs). Each case places the
cancellation in that window on purpose: the store call, modelled on asyncmy's connect, answers in the
same loop turn as ``stop()`` cancels the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, cast

import pytest

from sharding import Topology
from sharding.shard_map import ShardMap
from tjobs.clock import SystemClock
from tjobs.cluster.db_health import DatabaseHealth
from tjobs.cluster.local import LocalCoordinator
from tjobs.cluster.shard_maps import MemoryShardMapHome
from tjobs.delivery.outcomes import OutcomeWriter
from tjobs.model import FlowUpdate
from tjobs.service.shard_moves import MoveWatch
from tjobs.service.task_count_reconciler import TaskCountReconciler
from tjobs.service.task_counts import TaskCounts
from tjobs.stores.memory import MemoryTaskStore

STOP_WITHIN_S = 2.0


class WaitForCall:
    """A store call that, once :attr:`armed`, awaits its answer within ``asyncio.wait_for`` (as asyncmy's
    connect does) and waits for the test to give that answer; unarmed, it answers at once."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.armed = False
        self.waiting: asyncio.Future[object] | None = None

    async def __call__(self) -> Any:
        if not self.armed or self.waiting is not None:
            return self.answer
        self.waiting = asyncio.get_running_loop().create_future()
        return await asyncio.wait_for(self.waiting, 60)


async def stop_as_the_call_answers(call: WaitForCall, stop: Callable[[], Awaitable[None]]) -> None:
    """Arm ``call``; once the loop waits in it, answer it and start ``stop()`` in the same loop turn (the
    loop's ``wait_for`` wakes with its call done and the cancellation pending: it returns the answer);
    fail unless ``stop()`` returns within :data:`STOP_WITHIN_S`."""
    call.armed = True
    async with asyncio.timeout(5):
        while call.waiting is None:  # noqa: ASYNC110 (a fake's state)
            await asyncio.sleep(0.005)
    call.waiting.set_result(call.answer)
    stopping = asyncio.ensure_future(stop())
    await asyncio.wait({stopping}, timeout=STOP_WITHIN_S)
    if not stopping.done():
        stopping.cancel()
        pytest.fail(f"stop() did not return within {STOP_WITHIN_S} s: the loop's cancellation was lost")
    stopping.result()


class StoreWithAWaitForCall(MemoryTaskStore):
    def __init__(self, call: WaitForCall) -> None:
        super().__init__(Topology(1, 1, 4))
        self.call = call

    async def read_task_counts(self, database_index: int, app_ids: Collection[str] | None = None) -> Any:
        return await self.call()

    async def reconcile_task_counts(self, shard: int) -> Any:
        return await self.call()

    async def read_shard_moves(self) -> Any:
        return await self.call()

    async def ping_server(self, server: str) -> None:
        await self.call()


async def test_the_outcome_writer_stops_when_its_flushers_cancellation_is_lost() -> None:
    call = WaitForCall(None)

    class Recorder:
        async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
            await call()

    writer = OutcomeWriter(Recorder(), SystemClock(), flush_interval_s=0.01, flush_batch=500)
    writer.start()
    writer.put("flow-1", cast(FlowUpdate, object()))
    await stop_as_the_call_answers(call, lambda: writer.stop(asyncio.get_running_loop().time() + 1))


async def test_task_counts_stop_when_the_reading_loops_cancellation_is_lost() -> None:
    call = WaitForCall({})
    counts = TaskCounts(StoreWithAWaitForCall(call), SystemClock(), refresh_s=0.01)
    await counts.start()
    await stop_as_the_call_answers(call, counts.stop)


async def test_the_task_count_reconciler_stops_when_its_loops_cancellation_is_lost() -> None:
    call = WaitForCall([])
    reconciler = TaskCountReconciler(StoreWithAWaitForCall(call), step_s=0.01)
    await reconciler.start()
    await stop_as_the_call_answers(call, reconciler.stop)


async def test_the_move_watch_stops_when_its_loops_cancellation_is_lost() -> None:
    call = WaitForCall([])
    watch = MoveWatch(StoreWithAWaitForCall(call), interval_s=0.01)
    await watch.start()
    await stop_as_the_call_answers(call, watch.stop)


async def test_database_health_stops_when_its_ping_loops_cancellation_is_lost() -> None:
    call = WaitForCall(None)
    health = DatabaseHealth(StoreWithAWaitForCall(call), 4, interval_s=0.01)
    await health.start()
    await stop_as_the_call_answers(call, health.stop)


async def test_the_local_coordinator_stops_when_its_map_polls_cancellation_is_lost() -> None:
    call = WaitForCall(None)

    class Home(MemoryShardMapHome):
        async def read_shard_map(self) -> ShardMap | None:
            return cast(ShardMap | None, await call())

    async def took(owned: frozenset[int]) -> None:
        return None

    async def map_changed(shard_map: ShardMap) -> None:
        return None

    coordinator = LocalCoordinator(4, map_home=Home(), map_poll_interval_ms=10)
    coordinator.watch_shard_map(map_changed)
    await coordinator.start(took)
    await stop_as_the_call_answers(call, coordinator.stop)


# ---- a deadline lost inside the call: the rest of the call must still be bounded -------------------


async def test_a_ping_ends_at_its_deadline_even_when_a_wait_for_inside_lost_it() -> None:
    """A server that accepts the connection just as the ping's deadline passes, then never answers:
    asyncmy's connect (within ``wait_for``) swallows the deadline's one cancellation, and the ping's
    ``SELECT 1`` would wait for good; the health check must still end, the server unreachable."""

    class AcceptsThenHangs(MemoryTaskStore):
        async def ping_server(self, server: str) -> None:
            # swallowed: the connect (within wait_for) finished as the deadline's cancellation came (gh-86296)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
            await asyncio.sleep(3600)  # SELECT 1 on a server that stopped answering

    # a deadline of 1 s: a ping timed out while the loop stalled half of it is not held against the server, and
    # beside a loaded run (load 15, 2026-12-07) this test's loop stalled 0.19 s under a deadline of 0.05 s
    health = DatabaseHealth(AcceptsThenHangs(Topology(1, 1, 4)), 4, ping_timeout_s=1.0)
    checking = asyncio.ensure_future(health.check_once())
    await asyncio.wait({checking}, timeout=STOP_WITHIN_S)
    if not checking.done():
        checking.cancel()
        pytest.fail(f"the health check did not end within {STOP_WITHIN_S} s: the ping's deadline was lost")
    checking.result()
    assert health.paused_shards() == frozenset(range(4))
