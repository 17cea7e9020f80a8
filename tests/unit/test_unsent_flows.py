"""The flows a fenced node dropped unsent (tjobs.delivery.unsent_flows): leased by name by its compensator's
next pass once it fires their shards again, at the attempt it dropped, not a grace later.

An etcd kill (docs/testing.md, 2026-12-06) left one first send 33.5 s late: a flow committed just before the
nodes' fences closed was dropped from the deliverer's queue unsent and waited for compensator.grace_s (30 s)
and a pass. The deliverer and the compensator run on the memory store; the clock is a ManualClock the test
moves, and the grace is never reached in these tests."""

from __future__ import annotations

from dataclasses import replace

from sharding import TaskIdGenerator, shard_of_task_id
from tests.delivery_fakes import (
    APP,
    NoJitter,
    attempts_of,
    delivered_all,
    scripted,
    stored,
    stored_flow,
    turns_until,
)
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.unsent_flows import UnsentFlows
from tjobs.firing.compensator import Compensator
from tjobs.model import DeliveryMode, FlowStatus, FlowUpdate, UnsentFlow
from tjobs.settings import CallbackSettings, CompensatorSettings
from tjobs.stores.memory import MemoryTaskStore

GRACE = CompensatorSettings(interval_s=5.0, grace_s=30.0, batch=100)
LEASE_MS = 16_000
START_MS = 1_796_000_000_000


async def test_a_node_fenced_with_flows_queued_sends_them_at_its_next_pass_once_it_fires_again() -> None:
    # Given a node whose fence closes (etcd gone: its lease ran out) with four flows on their way out:
    # a first attempt, a retry (attempt 1 failed and is recorded), one another node will answer meanwhile,
    # and an at-most-once flow the fire transaction stored `sending`
    clock = ManualClock(START_MS)
    store = MemoryTaskStore()
    fence_open = [False]
    unsent = UnsentFlows(clock, keep_ms=int(GRACE.grace_s * 1000))
    transport = scripted(clock=clock)
    deliverer = Deliverer(
        store,
        transport,
        AppLimiter(100),
        CallbackSettings(),
        clock,
        NoJitter(),
        flush_batch=1,
        status_reader=store,
        fence=lambda now_ms: fence_open[0],
        unsent=unsent,
    )
    every_shard = frozenset(store.topology.shards())
    compensator = Compensator(
        store,
        lambda: every_shard,
        deliverer.is_in_flight,
        lambda t, f: deliverer.submit(CallbackJob(t, f, APP)),
        GRACE,
        clock,
        LEASE_MS,
        fence=lambda now_ms: fence_open[0],
        unsent=unsent,
        outcomes_written=lambda: deliverer.flush_calls,
    )
    await deliverer.start()
    try:
        first = await stored_flow(store, clock=clock)
        retry = await stored_flow(store, clock=clock, attempts=1)
        answered = await stored_flow(store, clock=clock)
        at_most_once = await stored_flow(
            store, clock=clock, attempts=1, status=FlowStatus.SENDING, delivery=DeliveryMode.AT_MOST_ONCE
        )
        for task, flow in (first, retry, answered, at_most_once):
            deliverer.submit(CallbackJob(task, flow, APP))
        await delivered_all(deliverer)
        assert transport.requests == [] and len(unsent) == 3  # the `sending` one is not pending: not named
        assert await compensator.run_once() == 0  # fenced: nothing leased

        # When another node answers one of them, and 5 s later (well inside the grace) the fence opens again
        task, flow = answered
        update = FlowUpdate(task.id, flow.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 204, None)
        await store.record_flow_updates([update], clock.now_ms())
        clock.advance(5_000)
        fence_open[0] = True
        handled = await compensator.run_once()
        await turns_until(lambda: len(transport.requests) == 2, "the two re-drives")
        await delivered_all(deliverer)

        # Then its next pass sends the two still pending, each once, at the attempt it dropped
        assert handled == 2 and compensator.unsent_leased == 2 and len(unsent) == 0
        assert sorted(attempts_of(transport)) == [1, 2]
        for (_, flow), attempts in ((first, 1), (retry, 2)):
            now = await stored(store, flow.id)
            assert (now.status, now.attempts) == (FlowStatus.DELIVERED, attempts)
        untouched = await stored(store, at_most_once[1].id)
        assert (untouched.status, untouched.attempts) == (FlowStatus.SENDING, 1)  # the grace's, as before
        assert await compensator.run_once() == 0  # named once
    finally:
        await deliverer.stop(1.0)


def test_the_flows_of_shards_not_fired_here_are_kept_until_the_grace_and_each_is_taken_once() -> None:
    clock = ManualClock(START_MS)
    unsent = UnsentFlows(clock, keep_ms=30_000, limit=3)
    shards = [1, 2, 3, 4]
    task_ids = [TaskIdGenerator(512).mint(shard, START_MS) for shard in shards]
    unsent.add(task_ids[0], START_MS, 0)
    unsent.add(task_ids[1], START_MS, 2)
    clock.advance(10_000)
    unsent.add(task_ids[2], START_MS + 1, 0)
    unsent.add(task_ids[3], START_MS + 1, 0)  # over the limit: left to the grace
    assert (len(unsent), unsent.overflow) == (3, 1)

    assert unsent.waiting(frozenset({shards[1], 99})) and not unsent.waiting(frozenset({shards[3], 99}))
    assert unsent.take(frozenset({shards[1]})) == {shards[1]: [UnsentFlow(task_ids[1], START_MS, 2)]}
    assert not unsent.waiting(frozenset({shards[1]}))
    assert unsent.take(frozenset({shards[1]})) == {}
    clock.advance(20_000)  # the first two were dropped 30 s ago: the compensator's grace finds them now
    assert unsent.take(frozenset(shards)) == {shards[2]: [UnsentFlow(task_ids[2], START_MS + 1, 0)]}
    assert len(unsent) == 0


def test_a_flow_dropped_again_is_named_at_its_latest_attempts() -> None:
    clock = ManualClock(START_MS)
    unsent = UnsentFlows(clock, keep_ms=30_000)
    task_id = TaskIdGenerator(512).mint(7, START_MS)
    unsent.add(task_id, START_MS, 0)
    unsent.add(task_id, START_MS, 1)
    shard = shard_of_task_id(task_id)
    assert unsent.take(frozenset({shard})) == {shard: [replace(UnsentFlow(task_id, START_MS, 0), attempts=1)]}
