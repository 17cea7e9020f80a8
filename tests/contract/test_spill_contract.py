"""A node's spilled flows (:mod:`tjobs.delivery.spill`) on every store: what the store does with them is the
compensator's lease (uncounted while the node holds them, their task and flow read back) and the hand-back's write, so
the unit tests' scenarios (``tests/unit/test_deliverer_spill.py``) run here, smaller, on memory, SQLite and MariaDB.
The clock is a ManualClock the test moves; the store's own work takes real time, waited for."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from tests.delivery_fakes import attempts_of, stored
from tests.unit.test_deliverer_hand_back import Node, running
from tests.unit.test_deliverer_spill import ONE_AT_A_TIME, answer, fired_at_once, in_memory
from tjobs.clock import ManualClock
from tjobs.model import FlowStatus
from tjobs.stores.base import TaskStore


async def until(done: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout_s} s")
        await asyncio.sleep(0.002)


async def spilled_backlog(store: TaskStore, node: Node, clock: ManualClock, flows: int) -> list[str]:
    """``flows`` flows of a one-at-a-time app fired at once on ``node`` (its first attempt held); their ids."""
    return [flow.id for _, flow in await fired_at_once(store, node, clock, flows)]


def next_sent(node: Node, sent: int) -> Callable[[], bool]:
    """Whether the node sent one more than ``sent``, or has nothing in memory to send."""
    return lambda: in_memory(node) == 0 or len(node.transport.requests) > sent


async def test_a_spilled_backlog_goes_out_once_as_first_attempts(store: TaskStore) -> None:
    # Given a node keeping 10 deliveries of an app in memory while it knows no pace, 40 flows fired at once: 9 queued
    # behind the one under way, 30 spilled
    clock = ManualClock(1_796_000_000_000)
    node = Node(store, clock, keep_in_memory=10, app=ONE_AT_A_TIME)
    async with running(node):
        flow_ids = await spilled_backlog(store, node, clock, 40)
        assert len(node.deliverer.spill) == 30

        # When the receiver answers one a second, the compensator passing every 5 s, until all are answered
        for second in range(1, 120):
            clock.advance(1_000)
            sent = len(node.transport.requests)
            await answer(node)
            if sent == len(flow_ids):
                break
            await until(next_sent(node, sent), "the next sent")
            if second % 5 == 0:
                await node.compensator.run_once()

        # Then each went out once, as its first attempt (the store's leases counted none), and is stored delivered
        await until(lambda: node.deliverer.in_flight_count() == 0, "settled")
        assert sorted(r.flow_id for r in node.transport.requests) == sorted(flow_ids)
        assert set(attempts_of(node.transport)) == {1}
        assert {(await stored(store, flow_id)).status for flow_id in flow_ids} == {FlowStatus.DELIVERED}


async def test_a_stopping_nodes_spilled_flows_are_handed_back_and_sent_by_the_next_owner(store: TaskStore) -> None:
    # Given a node keeping 10 deliveries of an app in memory, with 30 flows fired at once: 20 spilled
    clock = ManualClock(1_796_000_000_000)
    old, new = Node(store, clock, keep_in_memory=10, app=ONE_AT_A_TIME), Node(store, clock)
    async with running(old, new):
        flow_ids = await spilled_backlog(store, old, clock, 30)
        assert len(old.deliverer.spill) == 20

        # When it stops, its attempt under way answered
        stopping = asyncio.create_task(old.deliverer.stop(5.0))
        await asyncio.sleep(0.05)
        await answer(old)
        await stopping

        # Then the next owner's next pass, 5 s later, sends each unsent one once (attempt 2: its lease counts one)
        clock.advance(5_000)
        assert await new.compensator.run_once() == 29
        await until(lambda: new.deliverer.in_flight_count() == 0, "settled")
        assert sorted(r.flow_id for r in new.transport.requests) == sorted(flow_ids[1:])
        assert set(attempts_of(new.transport)) == {2}
