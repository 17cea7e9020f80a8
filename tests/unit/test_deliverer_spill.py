"""A backlog past what its app's queue keeps in a node's memory waits in the store (:mod:`tjobs.delivery.spill`): each
spilled flow stays the node's, goes out once as a first attempt when the compensator takes it back, and is handed back
when the node lets its shard go. Deliverer and compensator on the memory store, as the node wires them, the clock a
ManualClock the test moves (:mod:`tests.unit.test_deliverer_hand_back`'s ``Node``)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from sharding import shard_of_task_id
from tests.delivery_fakes import APP, attempts_of, delivered_all, settle, stored, stored_flow
from tests.unit.test_deliverer_hand_back import Node, running
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob
from tjobs.model import App, Flow, FlowStatus, Task
from tjobs.stores.base import TaskStore
from tjobs.stores.memory import MemoryTaskStore

ONE_AT_A_TIME = replace(APP, max_concurrency=1)


def in_memory(node: Node) -> int:
    """Deliveries waiting in the node's queues, not spilled ones."""
    return node.deliverer.backlog - len(node.deliverer.spill)


async def answer(node: Node) -> None:
    """The receiver answers the attempt under way (the next one waits for the next answer)."""
    assert node.transport.hold is not None
    answered, node.transport.hold = node.transport.hold, asyncio.Event()
    answered.set()
    await settle(50)


async def fired_at_once(
    store: TaskStore, node: Node, clock: ManualClock, count: int, app: App = ONE_AT_A_TIME
) -> list[tuple[Task, Flow]]:
    """``count`` flows of ``app`` fired at once on ``node``, whose receiver holds each attempt until answered: the
    first under way, the others queued or spilled."""
    node.transport.hold = asyncio.Event()
    flows = [await stored_flow(store, clock=clock) for _ in range(count)]
    for task, flow in flows:
        node.deliverer.submit(CallbackJob(task, flow, app))
    await node.transport.wait_for(1)
    return flows


async def test_a_backlog_past_its_apps_queue_waits_in_the_store_and_each_flow_goes_out_once_as_attempt_1() -> None:
    # Given a node whose queues keep 50 deliveries of an app in memory while they know no pace, sending one callback at
    # a time for an app whose receiver answers one a second, and 400 flows fired at once (a daily batch)
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    node = Node(store, clock, keep_in_memory=50, app=ONE_AT_A_TIME)
    async with running(node):
        backlog = await fired_at_once(store, node, clock, 400)

        # Then 49 wait in its memory behind the one under way, and 350 in the store, still the node's: in flight for
        # its compensator, and counted in the app's queue on /metrics
        assert (in_memory(node), len(node.deliverer.spill)) == (49, 350)
        assert all(node.deliverer.is_in_flight(flow.id) for _, flow in backlog)
        assert [(app_id, queued) for app_id, queued, _ in node.deliverer.lanes.queues()] == [(APP.id, 399)]

        # When the receiver answers one a second for 7.5 minutes, the compensator passing every 5 s
        sent_at: dict[str, int] = {}
        most_in_memory = 0
        for second in range(1, 451):
            clock.advance(1_000)
            await answer(node)
            if second % 5 == 0:
                await node.compensator.run_once()
                await settle(50)
            most_in_memory = max(most_in_memory, in_memory(node))
            for request in node.transport.requests:
                sent_at.setdefault(request.flow_id, second)

        # Then every flow went out once, as its first attempt: the leases of a spilled flow count no attempt
        assert sorted(sent_at) == sorted(flow.id for _, flow in backlog)
        assert len(node.transport.requests) == 400 and set(attempts_of(node.transport)) == {1}
        assert {(await stored(store, flow.id)).status for _, flow in backlog} == {FlowStatus.DELIVERED}
        assert len(node.deliverer.spill) == 0 and node.deliverer.in_flight_count() == 0
        # (taken back, not re-driven as after a crash: not counted, nor logged, as recoveries)
        assert node.compensator.redriven == 0
        # And its memory held no more than what the app drains in 2 minutes once it knew the pace: 120 at one a second,
        # the pace measured over 30-s windows whose edges may count a take more
        assert most_in_memory <= 120 * 1.1
        # And the receiver was kept busy: the last of the 400 went out by its 400th second, and a pass
        assert max(sent_at.values()) <= 400 + 5


@pytest.mark.parametrize("lets_go", ["stops", "hands its shards over"])
async def test_the_flows_a_node_spilled_go_out_at_the_next_owners_next_pass_when_it_lets_them_go(lets_go: str) -> None:
    # Given a node keeping 10 deliveries of an app in memory, with 30 flows fired at once: one under way, 9 queued and
    # 20 spilled
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    old, new = Node(store, clock, keep_in_memory=10, app=ONE_AT_A_TIME), Node(store, clock)
    async with running(old, new):
        flows = await fired_at_once(store, old, clock, 30)
        assert (in_memory(old), len(old.deliverer.spill)) == (9, 20)

        # When it lets them go (it stops; or another node joins and takes every shard), the attempt under way answered
        if lets_go == "stops":
            stopping = asyncio.create_task(old.deliverer.stop(5.0))
            await settle()
            await answer(old)
            await stopping
        else:
            old.deliverer.forget_runs(frozenset(shard_of_task_id(task.id) for task, _ in flows))
            await answer(old)
            await delivered_all(old.deliverer)

        # Then each unsent one, spilled or queued, is handed back due for the owner, who sends each once at its next
        # pass, 5 s later: as attempt 2 (its lease counts the attempt a node may have made)
        assert old.deliverer.handed_back == 29 and len(old.deliverer.spill) == 0
        clock.advance(5_000)
        assert await new.compensator.run_once() == 29
        await delivered_all(new.deliverer)
        assert sorted(r.flow_id for r in new.transport.requests) == sorted(flow.id for _, flow in flows[1:])
        assert set(attempts_of(new.transport)) == {2}
        assert [r.flow_id for r in old.transport.requests] == [flows[0][1].id]


async def test_a_spilled_flow_whose_task_is_deleted_is_cancelled_when_taken_back_and_never_sent() -> None:
    # Given a node keeping two deliveries of an app in memory, with three flows fired at once: one under way, one
    # queued, one spilled
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    node = Node(store, clock, keep_in_memory=2, app=ONE_AT_A_TIME)
    async with running(node):
        flows = await fired_at_once(store, node, clock, 3)
        spilled_task, spilled = flows[2]
        assert list(node.deliverer.spill) == [spilled.id]

        # When the spilled flow's task is deleted as stored (nothing cancels it in memory here), the first two are
        # answered, and the compensator's pass past the grace leases the spilled flow with room for it
        assert await store.delete_task(spilled_task.id)
        await answer(node)
        await answer(node)
        clock.advance(31_000)
        assert await node.compensator.run_once() == 1
        await delivered_all(node.deliverer)

        # Then it is closed `cancelled` and never sent
        assert [r.flow_id for r in node.transport.requests] == [f.id for _, f in flows[:2]]
        assert (await stored(store, spilled.id)).status is FlowStatus.CANCELLED


async def test_a_spilled_flow_cancelled_in_the_store_is_forgotten_once_no_lease_finds_it() -> None:
    # Given a node keeping two deliveries of an app in memory, with three flows fired at once: one under way, one
    # queued, one spilled, whose task is then deleted with its open flows (the API's delete: the flow `cancelled`)
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    node = Node(store, clock, keep_in_memory=2, app=ONE_AT_A_TIME)
    async with running(node):
        flows = await fired_at_once(store, node, clock, 3)
        assert await store.delete_task_cancelling_flows(flows[2][0].id, clock.now_ms())
        await answer(node)
        await answer(node)

        # When the compensator passes every 5 s for a generation of the spill, two of its longest holds of a spilled
        # flow (16 leases and a grace each): not yet forgotten (a lease might have found it late in the generation);
        # and for another generation
        generation_ms = 2 * (16 * 16_000 + 30_000)
        for _ in range(generation_ms // 5_000 + 2):
            clock.advance(5_000)
            await node.compensator.run_once()
        assert len(node.deliverer.spill) == 1
        for _ in range(generation_ms // 5_000 + 2):
            clock.advance(5_000)
            await node.compensator.run_once()

        # Then the node no longer holds it, nor counts it in the app's queue, and never sent it
        assert len(node.deliverer.spill) == 0 and node.deliverer.lanes.queues() == []
        assert not node.deliverer.is_in_flight(flows[2][1].id)
        assert [r.flow_id for r in node.transport.requests] == [f.id for _, f in flows[:2]]


async def test_a_flow_spilled_for_longer_than_the_leases_hold_it_is_still_the_nodes_and_goes_out_as_attempt_1() -> None:
    # Given a node keeping two deliveries of an app in memory, sending one callback at a time to a receiver that
    # answers one a minute, and 30 flows fired at once: the last one's turn 30 minutes away, far past how long one
    # lease holds a spilled flow (16 leases: 4 min 16 s) and past two generations of the spill (9 min 32 s each)
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    node = Node(store, clock, keep_in_memory=2, app=ONE_AT_A_TIME)
    async with running(node):
        flows = await fired_at_once(store, node, clock, 30)
        assert len(node.deliverer.spill) == 28

        # When the receiver answers one a minute for 32 minutes, the compensator passing every 5 s
        for tick in range(1, 32 * 12 + 1):
            clock.advance(5_000)
            if tick % 12 == 0:
                await answer(node)
            await node.compensator.run_once()
            await settle(50)

        # Then each went out once, as its first attempt: every lease found it the node's, none counted an attempt
        assert sorted(r.flow_id for r in node.transport.requests) == sorted(flow.id for _, flow in flows)
        assert set(attempts_of(node.transport)) == {1}


async def test_an_apps_queue_keeps_what_its_rate_limit_lets_out_in_two_minutes_until_it_has_a_pace() -> None:
    # Given a node keeping at least 10 deliveries of an app in memory, and an app limited to 2 callbacks a second
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    limited = replace(APP, rate_limit_per_s=2.0, max_concurrency=1)
    node = Node(store, clock, keep_in_memory=10, app=limited)
    async with running(node):
        # When 300 of its flows are fired at once
        await fired_at_once(store, node, clock, 300, limited)

        # Then its queue keeps what the rate lets out in 2 minutes (240), not 10, and spills the other 60
        assert (in_memory(node), len(node.deliverer.spill)) == (239, 60)
