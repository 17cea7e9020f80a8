"""The Compensator on the memory store: what it re-drives, closes and leaves alone, and the attempt
numbers a re-drive carries. Its clock (and the deliverers') is a ManualClock the test moves."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from sharding import shard_of_task_id
from tests.delivery_fakes import APP, CLOCK, SETTINGS, attempts_of, scripted, stored_flow
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.firing.compensator import HELD_LEASES_MAX, Compensator, held_lease_ms
from tjobs.model import ChildTrigger, DeliveryMode, Flow, FlowStatus, FlowUpdate, Task, TaskChildren
from tjobs.settings import CompensatorSettings
from tjobs.stores.memory import MemoryTaskStore

GRACE = CompensatorSettings(interval_s=1.0, grace_s=30.0, batch=100)
LEASE_MS = 16_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK.now_ms())


def compensator(
    store: MemoryTaskStore,
    redrive: Callable[[Task, Flow], None],
    clock: ManualClock,
    *,
    busy: Callable[[str], bool] = lambda flow_id: False,
    outcomes_written: Callable[[], int] | None = None,
    fence: Callable[[int], bool] | None = None,
) -> Compensator:
    every_shard = frozenset(store.topology.shards())
    return Compensator(
        store,
        lambda: every_shard,
        busy,
        redrive,
        GRACE,
        clock,
        LEASE_MS,
        fence=fence,
        outcomes_written=outcomes_written,
    )


async def stale_flow(store: MemoryTaskStore, clock: ManualClock, **kwargs: Any) -> tuple[Task, Flow]:
    """A stored flow, on ``clock``'s time."""
    return await stored_flow(store, clock=clock, **kwargs)


async def test_a_redrive_of_an_attempt_whose_2xx_was_lost_is_attempt_2(clock: ManualClock) -> None:
    # Given a node that sent attempt 1, got 200, and died before its write buffer was flushed
    store = MemoryTaskStore()
    task, flow = await stale_flow(store, clock, overdue_ms=60_000)
    first = scripted(clock=clock)
    crashed = Deliverer(store, first, AppLimiter(100), SETTINGS, clock, flush_interval_s=3600, flush_batch=10_000)
    await crashed.start()
    crashed.submit(CallbackJob(task, flow, APP))
    await first.wait_for(1)
    assert (await store.get_flow(task.id, flow.scheduled_at_ms)).attempts == 0  # type: ignore[union-attr]
    # When the new owner's compensator re-drives the flow
    second = scripted(clock=clock)
    successor = Deliverer(store, second, AppLimiter(100), SETTINGS, clock, flush_batch=1)
    await successor.start()
    try:
        handled = await compensator(store, lambda t, f: successor.submit(CallbackJob(t, f, APP)), clock).run_once()
        await second.wait_for(1)
        await successor.stop(1.0)
    finally:
        await crashed.stop(0.0)
    # Then the receiver sees attempt 2, never attempt 1 twice
    assert handled == 1
    assert attempts_of(first) == [1] and attempts_of(second) == [2]
    stored = await store.get_flow(task.id, flow.scheduled_at_ms)
    assert stored is not None and (stored.status, stored.attempts) == (FlowStatus.DELIVERED, 2)


async def test_every_claim_of_a_flow_counts_one_more_attempt(clock: ManualClock) -> None:
    # Given a flow with 3 recorded attempts, re-driven once by the compensator
    store = MemoryTaskStore()
    _, flow = await stale_flow(store, clock, overdue_ms=60_000, attempts=3)
    redriven: list[Flow] = []
    await compensator(store, lambda t, f: redriven.append(f), clock).run_once()
    # When that re-drive's outcome is lost too, and the lease ends
    clock.advance(LEASE_MS)
    lapsed = await store.lease_stale_flows(shard_of_task_id(flow.task_id), clock.now_ms(), LEASE_MS, 10)
    # Then each claim is one more possible attempt
    assert [f.attempts for f in redriven] == [4]
    assert [f.attempts for f, _ in lapsed] == [5]


async def test_a_lost_at_most_once_attempt_is_closed_unknown_and_never_resent(clock: ManualClock) -> None:
    store = MemoryTaskStore()
    _, flow = await stale_flow(
        store, clock, overdue_ms=60_000, attempts=1, status=FlowStatus.SENDING, delivery=DeliveryMode.AT_MOST_ONCE
    )
    redriven: list[Flow] = []

    assert await compensator(store, lambda t, f: redriven.append(f), clock).run_once() == 1

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert redriven == []
    assert stored is not None and (stored.status, stored.attempts) == (FlowStatus.UNKNOWN, 1)


async def test_a_flow_of_a_deleted_task_is_cancelled_not_sent(clock: ManualClock) -> None:
    store = MemoryTaskStore()
    task, flow = await stale_flow(store, clock, overdue_ms=60_000, attempts=1)
    await store.delete_task(task.id)  # a delete that raced the fire: the flow was not cancelled
    redriven: list[Flow] = []

    await compensator(store, lambda t, f: redriven.append(f), clock).run_once()

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert redriven == []
    assert stored is not None and (stored.status, stored.attempts) == (FlowStatus.CANCELLED, 1)


async def test_flows_this_node_is_delivering_and_flows_not_yet_stale_are_left_alone(clock: ManualClock) -> None:
    store = MemoryTaskStore()
    _, busy = await stale_flow(store, clock, overdue_ms=60_000)
    _, fresh = await stale_flow(store, clock, overdue_ms=1_000)
    redriven: list[Flow] = []

    await compensator(store, lambda t, f: redriven.append(f), clock, busy=lambda flow_id: flow_id == busy.id).run_once()

    assert redriven == []
    stored = await store.get_flow(fresh.task_id, fresh.scheduled_at_ms)
    assert stored is not None and stored.next_attempt_at_ms == fresh.next_attempt_at_ms
    held = await store.get_flow(busy.task_id, busy.scheduled_at_ms)
    assert held is not None and held.attempts == 0  # leased out of the next pass's way, no attempt counted


class OutcomeDuringTheLease(MemoryTaskStore):
    """``during_lease`` runs as a lease returns: on MariaDB an outcome flush's UPDATE of a flow the lease holds
    waits for the lease's row lock and lands right after its commit, before the compensator sees the result."""

    during_lease: Callable[[], Awaitable[None]] | None = None

    async def lease_stale_flows(
        self, shard: int, now_ms: int, lease_ms: int, limit: int, *, held: Callable[[str], int | None] | None = None
    ) -> list[tuple[Flow, Any]]:
        leased = await super().lease_stale_flows(shard, now_ms, lease_ms, limit, held=held)
        if self.during_lease is not None:
            await self.during_lease()
        return leased


async def test_a_flow_whose_outcome_is_written_while_the_lease_runs_is_not_sent_again(clock: ManualClock) -> None:
    # At 5,000 fires/s, 30 s behind (2026-12-07 04:50 UTC), 4 receivers got attempt 2 of a flow stored
    # `delivered` at attempt 1: the compensator asked what this node was delivering only after its lease,
    # by when the outcome write it had waited on had returned and the flow was forgotten as delivered.
    # Given a stale flow this node sent, its outcome (204) being written, and a lost one in the same shard
    store = OutcomeDuringTheLease()
    task, flow = await stale_flow(store, clock, overdue_ms=60_000)
    lost = await store.insert_manual_flow(task.id, replace(flow, scheduled_at_ms=flow.scheduled_at_ms + 1))
    delivering = {flow.id}
    writes = [0]

    async def outcome_written() -> None:
        delivered = FlowUpdate(task.id, flow.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 204, None)
        await store.record_flow_updates([delivered], clock.now_ms())
        delivering.discard(flow.id)
        writes[0] += 1

    store.during_lease = outcome_written
    redriven: list[Flow] = []

    # When a compensation pass leases both and the outcome lands meanwhile
    handled = await compensator(
        store,
        lambda t, f: redriven.append(f),
        clock,
        busy=lambda flow_id: flow_id in delivering,
        outcomes_written=lambda: writes[0],
    ).run_once()

    # Then the lost one is re-driven, and the delivered one is not: attempt 1 was its only send
    assert handled == 2
    assert [(f.scheduled_at_ms, f.attempts) for f in redriven] == [(lost.scheduled_at_ms, 1)]
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and (stored.status, stored.attempts) == (FlowStatus.DELIVERED, 1)


async def test_a_fenced_node_claims_nothing(clock: ManualClock) -> None:
    store = MemoryTaskStore()
    _, flow = await stale_flow(store, clock, overdue_ms=60_000)
    redriven: list[Flow] = []

    assert await compensator(store, lambda t, f: redriven.append(f), clock, fence=lambda now_ms: False).run_once() == 0

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert redriven == []
    assert stored is not None and (stored.attempts, stored.next_attempt_at_ms) == (0, flow.next_attempt_at_ms)


async def test_an_ending_whose_children_are_still_due_has_them_triggered_and_one_naming_none_is_cleared(
    clock: ManualClock,
) -> None:
    # Given two delivered flows marked as having children due (their node died before triggering them):
    # one of a task naming a child, one of a task naming none now
    store = MemoryTaskStore()
    parent, _ = await stale_flow(store, clock, overdue_ms=60_000, attempts=1, status=FlowStatus.DELIVERED)
    await store.edit_task(replace(parent, children=TaskChildren((12345,))), {"children"})
    _, bare = await stale_flow(store, clock, overdue_ms=60_000, attempts=1, status=FlowStatus.DELIVERED)
    told: list[FlowUpdate] = []

    async def ended(update: FlowUpdate) -> None:
        told.append(update)

    every_shard = frozenset(store.topology.shards())
    passes = Compensator(
        store, lambda: every_shard, lambda flow_id: False, lambda t, f: None, GRACE, clock, LEASE_MS, ended=ended
    )

    # When the compensator passes
    handled = await passes.run_once()

    # Then the first flow's children are triggered from its stored ending, the second's mark is cleared
    assert handled == 2
    assert [(u.task_id, u.status, u.children) for u in told] == [
        (parent.id, FlowStatus.DELIVERED, ChildTrigger(parent.app_id, (12345,), "null"))
    ]
    cleared = await store.get_flow(bare.task_id, bare.scheduled_at_ms)
    assert cleared is not None and cleared.status is FlowStatus.DELIVERED and cleared.next_attempt_at_ms is None
    clock.advance(LEASE_MS + 60_000)
    assert await passes.run_once() == 1  # the first still marked (its hook cleared nothing): taken again


def test_a_held_flow_is_leased_whole_leases_up_to_its_wait_one_at_least_and_sixteen_at_most() -> None:
    # leased until its queue reaches it, never past it (a crash re-drives it no later than its turn and a grace), in
    # whole leases so one lease writes few instants; an unknown wait (nothing taken from its queue lately): one lease
    lease = 46_000
    assert held_lease_ms(lease, 0.0) == lease
    assert held_lease_ms(lease, 45_999.0) == lease
    assert held_lease_ms(lease, 92_000.0) == 2 * lease
    assert held_lease_ms(lease, 137_999.0) == 2 * lease
    assert held_lease_ms(lease, 10 * 3_600_000.0) == HELD_LEASES_MAX * lease
    assert held_lease_ms(lease, math.inf) == lease
