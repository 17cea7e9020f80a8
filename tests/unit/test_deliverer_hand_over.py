"""A shard handed over while its flows are in delivery here (docs/design.md invariant 4): the old owner sends
nothing more of them, so its retries cannot carry the attempt number the new owner's compensator re-drives,
and a retry goes only once the outcome of the attempt before it is written (the new owner's lease counts
one attempt up from what is stored: at most the one attempt in flight may be missing there).

Soak of 2026-12-04 (attempt_reuse = 42): node 2's group went back to it from node 1; node 2's compensator
re-drove flow ...-1796426863000 as attempt 3 while node 1's deliverer, healthy and not fenced, sent its own
retry, attempt 3 too. Time is the test's (ManualClock; retries due at once, on the event loop)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from sharding import shard_of_task_id
from tests import delivery_fakes
from tests.delivery_fakes import (
    APP,
    GRACE,
    FailingRecorder,
    attempts_of,
    delivered_all,
    node,
    owners_compensator,
    scripted,
    settle,
    stored,
    stored_flow,
)
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.model import DeliveryMode, FlowStatus
from tjobs.stores.memory import MemoryTaskStore

store, clock, deliverers = delivery_fakes.store, delivery_fakes.clock, delivery_fakes.deliverers  # the fixtures


async def test_the_old_owner_sends_no_retry_of_a_flow_whose_shard_it_handed_over(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 1 delivering a flow of a shard it owns, its attempt 1 under way and about to time out
    old = scripted(504, then=504, clock=clock)
    old.hold = asyncio.Event()
    node1 = await node(deliverers, store, old, clock)
    task, flow = await stored_flow(store, clock=clock)
    node1.submit(CallbackJob(task, flow, APP))
    await old.wait_for(1)
    # When the shard goes to node 2 (a graceful hand-over: node 1 is healthy, its fence open), whose
    # compensator leases the overdue flow and re-drives it (its attempt still under way at the receiver)
    node1.forget_runs(frozenset({shard_of_task_id(task.id)}))
    new = scripted(200, clock=clock)
    new.hold = asyncio.Event()
    node2 = await node(deliverers, store, new, clock)
    clock.advance(int(GRACE.grace_s * 1000) + 1)
    assert await owners_compensator(store, node2, clock).run_once() == 1
    await new.wait_for(1)
    old.hold.set()  # node 1's attempt 1 answers 504: a retry would be due at once
    await delivered_all(node1)
    await settle()
    # Then node 1 sends nothing more of it: no attempt number reaches the receiver twice
    assert attempts_of(old) == [1] and attempts_of(new) == [2]
    new.hold.set()
    await delivered_all(node2)
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)


async def test_a_flow_queued_before_the_hand_over_is_not_sent_by_the_old_owner(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 1 with one flow under way and a second queued behind it (the app takes one at a time)
    app = replace(APP, max_concurrency=1)
    transport = scripted(200, clock=clock)
    transport.hold = asyncio.Event()
    node1 = await node(deliverers, store, transport, clock)
    first_task, first = await stored_flow(store, clock=clock)
    second_task, second = await stored_flow(store, clock=clock)
    while shard_of_task_id(second_task.id) == shard_of_task_id(first_task.id):
        second_task, second = await stored_flow(store, clock=clock)
    node1.submit(CallbackJob(first_task, first, app))
    node1.submit(CallbackJob(second_task, second, app))
    await transport.wait_for(1)
    # When the second flow's shard is handed over before its turn comes
    node1.forget_runs(frozenset({shard_of_task_id(second_task.id)}))
    transport.hold.set()
    await delivered_all(node1)
    await settle()
    # Then only the first is sent
    sent = [r.flow_id for r in transport.requests]
    assert second.id not in sent
    assert (await stored(store, second.id)).status is FlowStatus.PENDING  # for the new owner's compensator


async def test_flows_of_shards_still_owned_are_retried_as_before(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    transport = scripted(500, then=200, clock=clock)
    node1 = await node(deliverers, store, transport, clock)
    task, flow = await stored_flow(store, clock=clock)
    others = frozenset(store.topology.shards()) - {shard_of_task_id(task.id)}
    node1.submit(CallbackJob(task, flow, APP))
    node1.forget_runs(others)
    await transport.wait_for(2)
    await delivered_all(node1)
    assert attempts_of(transport) == [1, 2]
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)


async def test_a_retry_waits_until_the_outcome_of_the_attempt_before_it_is_written(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given a flow whose attempt 1 fails while the node's outcome writes fail ("writing N flow updates
    # failed; keeping them for the next flush"): the store still says 0 attempts
    recorder = FailingRecorder(store)
    transport = scripted(500, then=200, clock=clock)
    node1 = await node(deliverers, store, transport, clock, recorder=recorder, flush_interval_s=0.001)
    task, flow = await stored_flow(store, clock=clock)
    node1.submit(CallbackJob(task, flow, APP))
    await transport.wait_for(1)
    await asyncio.wait_for(recorder.failed.wait(), 5.0)
    await settle(200)
    # Then attempt 2 is not sent yet: were the shard handed over now, the new owner's lease would count
    # 0 + 1 and re-drive attempt 2 beside it
    assert attempts_of(transport) == [1]
    assert (await stored(store, flow.id)).attempts == 0
    # When the writes work again, attempt 1's outcome is written, and only then attempt 2 goes
    recorder.failing = False
    await transport.wait_for(2)
    await delivered_all(node1)
    assert attempts_of(transport) == [1, 2]
    final = await stored(store, flow.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)


async def test_an_at_most_once_flow_queued_before_the_hand_over_is_left_pending_unrecorded_for_the_new_owner(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given node 1 with one flow under way and, queued behind it (the app takes one at a time), an at-most-once
    # flow still ``pending`` (a manual trigger its API took, or a re-drive): recorded ``sending`` only at its turn
    app = replace(APP, max_concurrency=1)
    transport = scripted(200, clock=clock)
    transport.hold = asyncio.Event()
    node1 = await node(deliverers, store, transport, clock)
    first_task, first = await stored_flow(store, clock=clock)
    second_task, second = await stored_flow(store, clock=clock, delivery=DeliveryMode.AT_MOST_ONCE)
    while shard_of_task_id(second_task.id) == shard_of_task_id(first_task.id):
        second_task, second = await stored_flow(store, clock=clock, delivery=DeliveryMode.AT_MOST_ONCE)
    node1.submit(CallbackJob(first_task, first, app))
    node1.submit(CallbackJob(second_task, second, app))
    await transport.wait_for(1)
    # When its shard is handed over before its turn comes
    node1.forget_runs(frozenset({shard_of_task_id(second_task.id)}))
    transport.hold.set()
    await delivered_all(node1)
    await settle()
    # Then node 1 neither sends it nor records it ``sending`` (which the new owner's compensator would close
    # ``unknown``, never sent): it is still pending, 0 attempts
    assert second.id not in [r.flow_id for r in transport.requests]
    left = await stored(store, second.id)
    assert (left.status, left.attempts) == (FlowStatus.PENDING, 0)
    # and the new owner's compensator, past grace, sends it once (the lease counts 0 + 1: attempt 2)
    new = scripted(200, clock=clock)
    node2 = await node(deliverers, store, new, clock)
    clock.advance(int(GRACE.grace_s * 1000) + 1)
    assert await owners_compensator(store, node2, clock).run_once() == 1
    await delivered_all(node2)
    assert [int(r.headers["tjobs-attempt"]) for r in new.requests if r.flow_id == second.id] == [2]
    final = await stored(store, second.id)
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)
