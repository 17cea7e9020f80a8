"""A flow committed by a node that does not own its shard (docs/design.md invariant 4): a manual trigger taken
by node 3's API for a shard node 1 owns is delivered by node 3, and node 1's compensator knows nothing of it.
Node 3 retries it only while node 1 cannot have leased it (:mod:`tjobs.delivery.foreign_flows`), so no retry
of node 3's carries the attempt number node 1's re-drive sent, and a flow node 3 stops retrying is node 1's
to re-drive (none lost); an at-most-once trigger is sent by one of them only.

Time is the test's (ManualClock; retries due at once, on the event loop); outcome writes that fail are
retried by the writer on the loop's own (short) time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from sharding import shard_of_task_id
from tests import delivery_fakes
from tests.delivery_fakes import (
    APP,
    GRACE,
    FailingRecorder,
    attempts_of,
    owners_compensator,
    queue_one_pair,
    scripted,
    stored,
    stored_flow,
)
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.foreign_flows import ForeignFlows
from tjobs.delivery.pool_dispatcher import PoolDispatcher
from tjobs.delivery.recording import RecordingTransport
from tjobs.hot_tier.local import LocalHotTier
from tjobs.model import DeliveryMode, Flow, FlowKind, FlowStatus, FlowUpdate, Task
from tjobs.service.tasks import TaskService
from tjobs.settings import Settings
from tjobs.stores.memory import MemoryTaskStore

SKEW_MS = 500
PAST_GRACE_MS = int(GRACE.grace_s * 1000) + 1

store, clock, deliverers = delivery_fakes.store, delivery_fakes.clock, delivery_fakes.deliverers  # the fixtures


async def node(
    built: list[Deliverer],
    store: MemoryTaskStore,
    transport: RecordingTransport,
    clock: ManualClock,
    owned: frozenset[int],
    **kwargs: object,
) -> Deliverer:
    """One node's deliverer as the node wires it (:func:`tests.delivery_fakes.node`), with the shards it owns
    (the runner's), the compensators' grace and the clock fence's bound."""
    foreign = ForeignFlows(lambda: owned, GRACE.grace_s, SKEW_MS)
    return await delivery_fakes.node(built, store, transport, clock, foreign=foreign, **kwargs)


def every_shard(store: MemoryTaskStore) -> frozenset[int]:
    return frozenset(store.topology.shards())


async def manual_trigger(store: MemoryTaskStore, clock: ManualClock, node3: Deliverer) -> Flow:
    """``POST /v1/tasks/{id}:trigger`` on node 3's API: the service's flow sink is node 3's deliverer."""
    task, fired = await stored_flow(store, clock=clock)
    delivered = FlowUpdate(task.id, fired.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 200, None)
    await store.record_flow_updates([delivered], clock.now_ms())  # its own fire, delivered: nothing to re-drive
    clock.advance(1)  # the trigger's instant is now: not the task's own flow's
    service = TaskService(
        store,
        LocalHotTier(),
        Settings(storage={"urls": ["memory://"]}),
        clock,
        store.topology,
        flow_sink=lambda t, f: node3.submit(CallbackJob(t, f, APP)),
    )
    flow = await service.trigger(APP, task.id)
    assert flow.kind is FlowKind.MANUAL
    return flow


async def eventually(done: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    """Until ``done()``, on the loop's time (a failed outcome write is retried after a short real sleep)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not done():
        if loop.time() > deadline:
            raise AssertionError(f"after {timeout_s} s, still not {what}")
        await asyncio.sleep(0.001)


async def settled(deliverer: Deliverer) -> None:
    await eventually(lambda: not deliverer.in_flight_count(), f"settled: in flight {deliverer.in_flight()}")


async def test_a_non_owners_retry_whose_attempt_outcome_was_written_past_grace_is_left_to_the_owner(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 3 (owning no shard) delivering a manual trigger its API took: attempt 1 fails while node 3's
    # outcome writes fail (an overloaded database server: "writing N flow updates failed"), 0 attempts stored
    recorder = FailingRecorder(store)
    third = scripted(500, then=500, clock=clock)
    node3 = await node(deliverers, store, third, clock, frozenset(), recorder=recorder, flush_interval_s=0.001)
    flow = await manual_trigger(store, clock, node3)
    await third.wait_for(1)
    await asyncio.wait_for(recorder.failed.wait(), 5.0)
    # When, past grace, the owner's compensator leases it (0 + 1 attempts) and re-drives attempt 2 (under way
    # at the receiver), and then node 3's writes work again: its attempt 1's outcome lands (1 <= 1 stored)
    first = scripted(200, clock=clock)
    first.hold = asyncio.Event()
    node1 = await node(deliverers, store, first, clock, every_shard(store))
    clock.advance(PAST_GRACE_MS)
    assert await owners_compensator(store, node1, clock).run_once() == 1
    await first.wait_for(1)
    recorder.failing = False
    await settled(node3)
    # Then node 3 sends nothing more of it: no attempt number reaches the receiver twice
    assert attempts_of(third) == [1] and attempts_of(first) == [2]
    first.hold.set()
    await settled(node1)
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)


async def test_a_non_owners_retry_whose_attempt_was_under_way_past_grace_is_left_to_the_owner(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 3 delivering a manual trigger: attempt 1 fails and is recorded, and its retry, attempt 2, is
    # under way (a receiver slow to answer, a node slow to read the answer)
    third = scripted(500, then=500, clock=clock)
    third.hold = first_answer = asyncio.Event()
    node3 = await node(deliverers, store, third, clock, frozenset())
    flow = await manual_trigger(store, clock, node3)
    await third.wait_for(1)
    third.hold = asyncio.Event()
    first_answer.set()
    await third.wait_for(2)
    assert (await stored(store, flow.id)).attempts == 1
    # When, past grace, the owner's compensator leases it (1 + 1) and re-drives attempt 3, and then node 3's
    # attempt 2 answers 500: its outcome lands (2 <= 2 stored) and a retry would be due at once
    first = scripted(200, clock=clock)
    first.hold = asyncio.Event()
    node1 = await node(deliverers, store, first, clock, every_shard(store))
    clock.advance(PAST_GRACE_MS)
    assert await owners_compensator(store, node1, clock).run_once() == 1
    await first.wait_for(1)
    third.hold.set()
    await settled(node3)
    # Then node 3 sends no attempt 3 beside the owner's
    assert attempts_of(third) == [1, 2] and attempts_of(first) == [3]
    first.hold.set()
    await settled(node1)
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 3)


async def test_a_non_owners_failed_first_attempt_left_to_the_owner_is_delivered_by_it(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 3's manual trigger whose attempt 1 failed, its outcome written only past grace (node 3's
    # writes failing meanwhile), so node 3 does not retry it
    recorder = FailingRecorder(store)
    third = scripted(500, then=200, clock=clock)
    node3 = await node(deliverers, store, third, clock, frozenset(), recorder=recorder, flush_interval_s=0.001)
    flow = await manual_trigger(store, clock, node3)
    await third.wait_for(1)
    await asyncio.wait_for(recorder.failed.wait(), 5.0)
    clock.advance(PAST_GRACE_MS)
    recorder.failing = False
    await settled(node3)
    assert attempts_of(third) == [1]
    left = await stored(store, flow.id)
    assert (left.status, left.attempts) == (FlowStatus.PENDING, 1)
    # When the owner's compensator passes (the retry time written is grace past)
    first = scripted(200, clock=clock)
    node1 = await node(deliverers, store, first, clock, every_shard(store))
    assert await owners_compensator(store, node1, clock).run_once() == 1
    await settled(node1)
    # Then the owner delivers it (the lease counts the attempt a crash may have lost: 1 + 1, sent as 3)
    assert attempts_of(first) == [3]
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 3)


async def test_a_non_owner_retries_its_flow_while_the_owner_cannot_take_it(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 3 delivering a manual trigger whose attempt 1 fails, its outcome written at once
    third = scripted(500, then=200, clock=clock)
    node3 = await node(deliverers, store, third, clock, frozenset())
    flow = await manual_trigger(store, clock, node3)
    # Then node 3 retries it at once, as the owner would: attempt 2 delivers it
    await third.wait_for(2)
    await settled(node3)
    assert attempts_of(third) == [1, 2]
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)


async def test_only_a_flow_of_a_shard_this_node_does_not_own_has_a_window(
    store: MemoryTaskStore, clock: ManualClock
) -> None:
    task, flow = await stored_flow(store, clock=clock)
    shard = shard_of_task_id(task.id)
    assert ForeignFlows(lambda: frozenset({shard}), GRACE.grace_s, SKEW_MS).window(flow) is None
    window = ForeignFlows(lambda: every_shard(store) - {shard}, GRACE.grace_s, SKEW_MS).window(flow)
    assert window is not None
    # open until the flow's stored next attempt + grace - 2 x the clock bound; then it follows each retry's time
    stored_next = flow.next_attempt_at_ms
    assert stored_next is not None and window.closes_ms == stored_next + 30_000 - 2 * SKEW_MS
    window.retry_at(stored_next + 5_000)
    assert window.written(stored_next + 28_999)
    assert window.closes_ms == stored_next + 5_000 + 29_000
    window.retry_at(stored_next + 60_000)
    assert not window.written(stored_next + 34_000)  # written late: never again
    window.retry_at(stored_next + 90_000)
    assert not window.written(stored_next + 34_001)


async def test_a_grace_within_twice_the_clock_bound_leaves_every_retry_of_a_non_owner_to_the_owner(
    store: MemoryTaskStore, clock: ManualClock
) -> None:
    _, flow = await stored_flow(store, clock=clock)
    window = ForeignFlows(frozenset, 1.0, 500).window(flow)
    assert window is not None
    window.retry_at(clock.now_ms())
    assert not window.written(clock.now_ms())


class SlowSending:
    """The store's writes, an at-most-once attempt's ``sending`` held until ``go`` is set (a slow database)."""

    def __init__(self, store: MemoryTaskStore) -> None:
        self.store = store
        self.holding = asyncio.Event()
        self.go = asyncio.Event()

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        if any(update.status is FlowStatus.SENDING for update in updates):
            self.holding.set()
            await self.go.wait()
        await self.store.record_flow_updates(updates, now_ms)


async def at_most_once_trigger(store: MemoryTaskStore, clock: ManualClock, sink: Callable[[Task, Flow], None]) -> Flow:
    """``POST /v1/tasks/{id}:trigger`` of an at-most-once task on node 3's API: its flow is ``pending``, 0 attempts."""
    task, fired = await stored_flow(store, clock=clock, delivery=DeliveryMode.AT_MOST_ONCE)
    done = FlowUpdate(task.id, fired.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 200, None)
    await store.record_flow_updates([done], clock.now_ms())
    clock.advance(1)
    service = TaskService(
        store, LocalHotTier(), Settings(storage={"urls": ["memory://"]}), clock, store.topology, flow_sink=sink
    )
    flow = await service.trigger(APP, task.id)
    assert (flow.status, flow.attempts) == (FlowStatus.PENDING, 0)
    return flow


def sent_of(transport: RecordingTransport, flow: Flow) -> list[int]:
    return [int(r.headers["tjobs-attempt"]) for r in transport.requests if r.flow_id == flow.id]


async def test_a_non_owners_at_most_once_trigger_whose_sending_was_written_past_grace_is_not_sent_there(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 3 delivering an at-most-once manual trigger: its write of the attempt as ``sending``, made
    # before any send, is slow
    recorder = SlowSending(store)
    third = scripted(200, clock=clock)
    node3 = await node(deliverers, store, third, clock, frozenset(), recorder=recorder)
    flow = await at_most_once_trigger(store, clock, lambda t, f: node3.submit(CallbackJob(t, f, APP)))
    await asyncio.wait_for(recorder.holding.wait(), 5.0)
    # When, past grace, the owner's compensator leases it (0 + 1) and re-drives it: recorded ``sending`` as
    # attempt 2 and sent once, delivered; and then node 3's write goes through
    first = scripted(200, clock=clock)
    node1 = await node(deliverers, store, first, clock, every_shard(store))
    clock.advance(PAST_GRACE_MS)
    assert await owners_compensator(store, node1, clock).run_once() == 1
    await settled(node1)
    recorder.go.set()
    await settled(node3)
    # Then the receiver got it once: node 3 sends nothing of it
    assert sent_of(third, flow) == [] and sent_of(first, flow) == [2]
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)


@pytest.mark.parametrize(
    "after_the_redrive", [False, True], ids=["before-the-owners-redrive", "after-the-owners-redrive"]
)
async def test_a_non_owners_at_most_once_trigger_reaching_delivery_past_grace_is_sent_by_the_owner_only(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer], after_the_redrive: bool
) -> None:
    # Given an at-most-once manual trigger committed by node 3's API, which reaches node 3's deliverer only
    # past grace (a node too busy to run it sooner): before the owner's compensator passes, or after it leased
    # it (0 + 1) and re-drove it, sent once as attempt 2
    third = scripted(200, clock=clock)
    node3 = await node(deliverers, store, third, clock, frozenset())
    late: list[CallbackJob] = []
    flow = await at_most_once_trigger(store, clock, lambda t, f: late.append(CallbackJob(t, f, APP)))
    first = scripted(200, clock=clock)
    node1 = await node(deliverers, store, first, clock, every_shard(store))
    clock.advance(PAST_GRACE_MS)
    if after_the_redrive:
        assert await owners_compensator(store, node1, clock).run_once() == 1
        await settled(node1)
    # When node 3 takes it then
    node3.submit(late[0])
    await settled(node3)
    # Then node 3 sends nothing of it
    assert sent_of(third, flow) == []
    if not after_the_redrive:
        # nor records it: it is still pending, for the owner's compensator, which sends it once
        assert (await stored(store, flow.id)).status is FlowStatus.PENDING
        assert await owners_compensator(store, node1, clock).run_once() == 1
        await settled(node1)
    # the receiver got it once, from the owner
    assert sent_of(first, flow) == [2]
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)


async def test_a_fire_queued_behind_a_non_owners_flow_it_left_to_the_owner_goes_and_nothing_is_left_in_flight(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 3 delivering two flows of a pool task it does not own whose overlap is queue_one (two manual
    # triggers its API took): the first's attempt 1 fails while node 3's outcome writes fail, the second waits
    # behind it in the task's overlap gate
    registry, task, first, second = await queue_one_pair(store, clock)
    recorder = FailingRecorder(store)
    third = scripted(500, then=200, clock=clock)
    pools = PoolDispatcher(registry, third)
    node3 = await node(
        deliverers, store, third, clock, frozenset(), recorder=recorder, flush_interval_s=0.001, pools=pools
    )
    node3.submit(CallbackJob(task, first, APP))
    await third.wait_for(1)
    node3.submit(CallbackJob(task, second, APP))
    await asyncio.wait_for(recorder.failed.wait(), 5.0)
    # When the first's outcome is written only past grace: node 3 leaves it to the owner's compensator
    clock.advance(PAST_GRACE_MS)
    recorder.failing = False
    # Then it is not running here any more, and the fire waiting behind it, past its own window by then (the owner
    # could have leased it: pending since its commit), is left to the owner too: nothing of either stays in flight
    # on node 3
    await settled(node3)
    assert sent_of(third, first) == [1] and sent_of(third, second) == []
    for flow, attempts in ((first, 1), (second, 0)):
        left = await stored(store, flow.id)
        assert (left.status, left.attempts) == (FlowStatus.PENDING, attempts)  # for the owner's compensator
    # and the owner's compensator delivers each once (its lease counts the attempt a crash may have lost)
    owner = scripted(clock=clock)
    node1 = await node(deliverers, store, owner, clock, every_shard(store), pools=PoolDispatcher(registry, owner))
    assert await owners_compensator(store, node1, clock).run_once() == 2
    await settled(node1)
    assert sent_of(owner, first) == [3] and sent_of(owner, second) == [2]
    for flow in (first, second):
        assert (await stored(store, flow.id)).status is FlowStatus.DELIVERED


async def test_a_non_owners_first_attempt_queued_past_grace_is_left_to_the_owner_and_sent_once(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 3 (owning no shard) sending one callback at a time for an app whose receiver holds the attempt under
    # way, and a manual trigger its API took queued behind it past grace: a slow app's trigger, or a backfill's flow
    one_at_a_time = replace(APP, max_concurrency=1)
    third = scripted(clock=clock)
    third.hold = asyncio.Event()
    node3 = await node(deliverers, store, third, clock, frozenset())
    blocker_task, blocker = await stored_flow(store, clock=clock)
    node3.submit(CallbackJob(blocker_task, blocker, one_at_a_time))
    await third.wait_for(1)
    task, fired = await stored_flow(store, clock=clock)
    trigger = replace(fired, kind=FlowKind.MANUAL)
    node3.submit(CallbackJob(task, trigger, one_at_a_time))
    clock.advance(PAST_GRACE_MS)
    # When the owner's compensator passes (it leases the trigger, pending since its commit, and sends it) and then
    # node 3's receiver answers the attempt under way, so node 3's queue reaches the trigger
    first = scripted(200, clock=clock)
    node1 = await node(deliverers, store, first, clock, every_shard(store))
    assert await owners_compensator(store, node1, clock).run_once() == 2
    await settled(node1)
    third.hold.set()
    await settled(node3)
    # Then the receiver has the trigger once, from the owner: node 3 does not send what the owner may have leased
    assert sent_of(first, trigger) == [2]
    assert sent_of(third, trigger) == []
    final = await stored(store, trigger.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)
