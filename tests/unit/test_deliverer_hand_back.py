"""A fenced node's unsent flows are written back due (the deliverer's ``hand_back_ms``), so the shard's owner,
this node once it fires again or another node, re-drives them at its next compensation pass, not a grace later.

An etcd kill (docs/testing.md, 2026-12-06) left one first send 33.5 s late: a flow committed just before the
nodes' fences closed was dropped from the deliverer's queue unsent and waited for compensator.grace_s (30 s)
and a pass. Deliverers and compensators run on the memory store; the clock is a ManualClock the test moves,
and never as far as the grace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest

from sharding import shard_of_task_id
from tests.delivery_fakes import (
    APP,
    NoJitter,
    attempts_of,
    delivered_all,
    scripted,
    settle,
    stored,
    stored_flow,
    turns_until,
)
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer, TargetSource
from tjobs.delivery.lanes import KEEP_MIN
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.firing.compensator import Compensator
from tjobs.model import App, DeliveryMode, Flow, FlowStatus, FlowUpdate
from tjobs.settings import CallbackSettings, CompensatorSettings
from tjobs.specs import CallbackSpec
from tjobs.stores.base import TaskStore
from tjobs.stores.memory import MemoryTaskStore
from tjobs.targets.model import HttpTarget, RetryPolicy, Target

GRACE = CompensatorSettings(interval_s=5.0, grace_s=30.0, batch=100)
HAND_BACK_MS = 30_000 + 2 * 1_000  # the grace and twice the clock bound, as the node sets it
LEASE_MS = 16_000


class Node:
    """One node's deliverer and compensator as the node wires them, behind a fence the test opens and closes."""

    def __init__(
        self,
        store: TaskStore,
        clock: ManualClock,
        hand_back_ms: int | None = HAND_BACK_MS,
        targets: TargetSource | None = None,
        elapsed: ManualClock | None = None,
        keep_in_memory: int = KEEP_MIN,
        app: App = APP,
    ) -> None:
        """``elapsed`` is the node's monotonic clock (its limiter's time): the wall ``clock`` unless the test steps
        the wall clock alone. Its compensator re-drives a flow as one of ``app``."""
        self.fence_open = True
        self.transport: RecordingTransport = scripted(clock=clock)
        monotonic = elapsed or clock
        self.deliverer = Deliverer(
            store,
            self.transport,
            AppLimiter(100, monotonic=lambda: monotonic.now_ms() / 1000),
            CallbackSettings(),
            clock,
            NoJitter(),
            flush_batch=1,
            status_reader=store,
            fence=lambda now_ms: self.fence_open,
            hand_back_ms=hand_back_ms,
            targets=targets,
            keep_in_memory=keep_in_memory,
        )
        every_shard = frozenset(store.topology.shards())
        self.compensator = Compensator(
            store,
            lambda: every_shard,
            self.deliverer.is_in_flight,
            lambda t, f: self.deliverer.submit(CallbackJob(t, f, app)),
            GRACE,
            clock,
            LEASE_MS,
            fence=lambda now_ms: self.fence_open,
            outcomes_written=lambda: self.deliverer.flush_calls,
            wait_ms=self.deliverer.wait_ms,
            spill=self.deliverer.spill,
        )


@asynccontextmanager
async def running(*nodes: Node) -> AsyncIterator[None]:
    """The nodes' deliverers started, then stopped (1 s to drain) however the test ends, any attempt it held
    released first."""
    for node in nodes:
        await node.deliverer.start()
    try:
        yield
    finally:
        for node in nodes:
            if node.transport.hold is not None:
                node.transport.hold.set()
            await node.deliverer.stop(1.0)


@pytest.mark.parametrize("taker", ["the same node, fired again", "another node"])
async def test_a_fenced_nodes_unsent_flows_go_out_at_the_owners_next_pass(taker: str) -> None:
    # Given a node whose fence closes (etcd gone, or the node frozen past its lease) with five flows on their way
    # out: a first attempt, a retry (attempt 1 failed, recorded), one another node answered meanwhile, one
    # another node's compensator leased meanwhile, and an at-most-once one the fire transaction stored `sending`
    start_ms = 1_796_000_000_000
    clock = ManualClock(start_ms)
    store = MemoryTaskStore()
    fenced, other = Node(store, clock), Node(store, clock)
    async with running(fenced, other):
        first = await stored_flow(store, clock=clock)
        retry = await stored_flow(store, clock=clock, attempts=1)
        answered = await stored_flow(store, clock=clock)
        leased = await stored_flow(store, clock=clock, overdue_ms=60_000)
        at_most_once = await stored_flow(
            store, clock=clock, attempts=1, status=FlowStatus.SENDING, delivery=DeliveryMode.AT_MOST_ONCE
        )
        task, flow = answered
        await store.record_flow_updates(
            [FlowUpdate(task.id, flow.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 204, None)], clock.now_ms()
        )
        leased_by_other = await store.lease_stale_flows(
            shard_of_task_id(leased[0].id), clock.now_ms() - 30_000, 45_000, 10
        )
        assert [f.id for f, _ in leased_by_other] == [leased[1].id]
        fenced.fence_open = False

        for task, flow in (first, retry, answered, leased, at_most_once):
            fenced.deliverer.submit(CallbackJob(task, flow, APP))
        await delivered_all(fenced.deliverer)
        assert (
            fenced.transport.requests == [] and fenced.deliverer.fenced_flows.handed_back == 4
        )  # not the `sending` one
        assert await fenced.compensator.run_once() == 0  # fenced: claims nothing

        # When, 5 s later (well inside the grace), the shards' owner runs its next compensation pass
        clock.advance(5_000)
        if taker == "another node":
            taking = other
        else:
            fenced.fence_open = True
            taking = fenced
        handled = await taking.compensator.run_once()
        await turns_until(lambda: len(taking.transport.requests) == 2, "the two re-drives")
        await delivered_all(taking.deliverer)

        # Then the two still pending go out, each once (its lease counts an attempt), and nothing else
        assert handled == 2
        assert sorted(attempts_of(taking.transport)) == [2, 3]
        assert fenced.transport.requests == [] or taking is fenced
        for (_, flow), attempts in ((first, 2), (retry, 3)):
            now = await stored(store, flow.id)
            assert (now.status, now.attempts) == (FlowStatus.DELIVERED, attempts)
        still_leased = await stored(store, leased[1].id)
        assert (still_leased.attempts, still_leased.next_attempt_at_ms) == (1, start_ms + 15_000)  # its lease holds
        untouched = await stored(store, at_most_once[1].id)
        assert (untouched.status, untouched.attempts) == (FlowStatus.SENDING, 1)  # the grace's, as before


async def test_without_hand_back_a_fenced_nodes_flows_wait_for_the_grace() -> None:
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    node = Node(store, clock, hand_back_ms=None)
    async with running(node):
        task, flow = await stored_flow(store, clock=clock)
        node.fence_open = False
        node.deliverer.submit(CallbackJob(task, flow, APP))
        await delivered_all(node.deliverer)
        stored_now = await stored(store, flow.id)
        assert (stored_now.status, stored_now.next_attempt_at_ms) == (FlowStatus.PENDING, flow.next_attempt_at_ms)
        assert node.deliverer.fenced_flows.handed_back == 0


async def attempts_stored(store: MemoryTaskStore, flow_id: str, attempts: int) -> None:
    """Until the store has ``attempts`` for the flow (loop turns, no wall time)."""
    for _ in range(10_000):
        if (await stored(store, flow_id)).attempts == attempts:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"flow {flow_id} never stored {attempts} attempts")


@pytest.mark.parametrize("letting_go", ["its shards handed over", "it stops"])
async def test_a_healthy_nodes_unsent_flows_go_out_at_the_new_owners_next_pass(letting_go: str) -> None:
    # Given a healthy node (its fence open) sending one callback at a time for an app, with four flows: a retry
    # waiting on its timer (attempt 1 answered 503, Retry-After 10 s), one under way (its attempt 1 about to be
    # answered 503, Retry-After 10 s too), and two queued behind it, never sent
    start_ms = 1_796_000_000_000
    clock = ManualClock(start_ms)
    store = MemoryTaskStore()
    old, new = Node(store, clock), Node(store, clock)
    async with running(old, new):
        old.transport.script(Answer(503, retry_after="10"), Answer(503, retry_after="10"), then=Answer(200))
        one_at_a_time = replace(APP, max_concurrency=1)
        retrying = await stored_flow(store, clock=clock)
        old.deliverer.submit(CallbackJob(*retrying, one_at_a_time))
        await attempts_stored(store, retrying[1].id, 1)
        old.transport.hold = asyncio.Event()
        under_way = await stored_flow(store, clock=clock)
        queued = [await stored_flow(store, clock=clock) for _ in range(2)]
        for task, flow in (under_way, *queued):
            old.deliverer.submit(CallbackJob(task, flow, one_at_a_time))
        await old.transport.wait_for(2)

        # When it lets them go: the shards go to another node (a node joined, or this one is stopping in a
        # cluster), or the node stops; the attempt under way is answered meanwhile
        if letting_go == "its shards handed over":
            old.deliverer.forget_runs(frozenset(store.topology.shards()))
            old.transport.hold.set()
            await delivered_all(old.deliverer)
        else:
            stopping = asyncio.create_task(old.deliverer.stop(5.0))
            await settle()
            old.transport.hold.set()
            await stopping
        assert attempts_of(old.transport) == [1, 1]  # the queued ones never sent here

        # Then the new owner's compensator re-drives the two never sent at its next pass, 5 s later (well inside
        # the grace), each once
        clock.advance(5_000)
        assert await new.compensator.run_once() == 2
        await turns_until(lambda: len(new.transport.requests) == 2, "the two queued flows re-driven")
        assert sorted(r.flow_id for r in new.transport.requests) == sorted(flow.id for _, flow in queued)
        assert attempts_of(new.transport) == [2, 2]  # each lease counts an attempt
        # and the two that failed once at their retry time, 10 s after the 503s: not before
        clock.advance(2_000)
        assert await new.compensator.run_once() == 0
        clock.advance(3_000)
        assert await new.compensator.run_once() == 2
        await turns_until(lambda: len(new.transport.requests) == 4, "the two retries re-driven")
        await delivered_all(new.deliverer)
        assert attempts_of(new.transport) == [2, 2, 3, 3]
        for _, flow in (retrying, under_way, *queued):
            assert (await stored(store, flow.id)).status is FlowStatus.DELIVERED


class SlowTargets:
    """The target source of a node whose directory must read every target, and waits for ``read`` to do so."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.read = asyncio.Event()
        self.asked = asyncio.Event()

    def cached(self, app_id: str, name: str) -> Target | None:
        return None

    async def get(self, app_id: str, name: str) -> Target | None:
        self.asked.set()
        await self.read.wait()
        return self.target


async def test_a_flow_whose_shard_goes_while_its_targets_are_read_goes_out_at_the_new_owners_next_pass() -> None:
    # Given a node about to send a flow naming a target, reading that target before the attempt
    start_ms = 1_796_000_000_000
    clock = ManualClock(start_ms)
    store = MemoryTaskStore()
    hook = Target(APP.id, "hook", HttpTarget(("https://receiver.example/hook",)), 1, RetryPolicy())
    slow = SlowTargets(hook)
    old, new = Node(store, clock, targets=slow), Node(store, clock)
    async with running(old, new):
        task, flow = await stored_flow(store, clock=clock)
        task = replace(task, callback=CallbackSpec((), targets=("hook",)))
        old.deliverer.submit(CallbackJob(task, flow, APP, {"hook": hook}))
        await asyncio.wait_for(slow.asked.wait(), 5.0)

        # When its shard goes to another node during the read
        old.deliverer.forget_runs(frozenset(store.topology.shards()))
        slow.read.set()
        await settle(50)  # the attempt goes on from the read
        await delivered_all(old.deliverer)

        # Then it is not sent from here, and the new owner sends it at its next pass, 5 s later
        assert old.transport.requests == []
        clock.advance(5_000)
        assert await new.compensator.run_once() == 1
        await turns_until(lambda: len(new.transport.requests) == 1, "the flow re-driven")


async def queued_behind_a_slow_app(
    store: MemoryTaskStore, clock: ManualClock, node: Node, delivery: DeliveryMode = DeliveryMode.AT_LEAST_ONCE
) -> tuple[Flow, int, asyncio.Event]:
    """``node`` sending one callback at a time for an app whose receiver holds the attempt under way, and a flow
    (of ``delivery``) queued behind it for 15 minutes of compensation passes, a pass every 5 s: past the grace, so
    every pass in which it is stale again leases it (a lease holds it 46 s). The queued flow, how many flows the
    passes leased, and the hold on the attempt under way."""
    one_at_a_time = replace(APP, max_concurrency=1)
    node.transport.hold = hold = asyncio.Event()
    under_way = await stored_flow(store, clock=clock)
    queued = await stored_flow(store, clock=clock, delivery=delivery)
    for task, flow in (under_way, queued):
        node.deliverer.submit(CallbackJob(task, flow, one_at_a_time))
    await node.transport.wait_for(1)
    leases = 0
    for _ in range(180):
        clock.advance(5_000)
        leases += await node.compensator.run_once()
    return queued[1], leases, hold


async def test_a_flow_queued_behind_a_slow_app_for_many_passes_is_sent_once_its_node_stops() -> None:
    # Given a healthy node with a flow queued behind a slow app's attempt for 15 minutes of compensation passes,
    # each leasing it as stale, the node skipping it as its own
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    old, new = Node(store, clock), Node(store, clock)
    async with running(old, new):
        queued, leases, hold = await queued_behind_a_slow_app(store, clock, old)
        assert leases >= 2 * CallbackSettings().max_attempts  # each flow leased more often than it may be tried
        assert attempts_of(old.transport) == [1]  # the queued one never sent

        # Then its stored attempts still say what was sent: a lease counts the attempt a lost node may have made,
        # and this node's own flows are not lost
        assert (await stored(store, queued.id)).attempts == 0

        # And when the node stops (a rolling restart), the flow is handed back and the new owner sends it at its
        # next pass, 5 s later, as a second attempt at most: not closed as spent without ever being sent
        stopping = asyncio.create_task(old.deliverer.stop(5.0))
        await settle()
        hold.set()
        await stopping
        clock.advance(5_000)
        assert await new.compensator.run_once() == 1
        await turns_until(lambda: len(new.transport.requests) == 1, "the queued flow re-driven")
        await delivered_all(new.deliverer)
        assert [r.flow_id for r in new.transport.requests] == [queued.id]
        assert attempts_of(new.transport) == [2]  # its lease counts an attempt
        assert (await stored(store, queued.id)).status is FlowStatus.DELIVERED


async def test_an_at_most_once_flow_queued_behind_a_slow_app_for_many_passes_is_never_sent_twice() -> None:
    # Given a node with an at-most-once flow queued behind a slow app's attempt for 15 minutes of compensation
    # passes, each leasing it as stale
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    old, new = Node(store, clock), Node(store, clock)
    async with running(old, new):
        once, _, first = await queued_behind_a_slow_app(store, clock, old, DeliveryMode.AT_MOST_ONCE)

        # When the receiver answers the first, the at-most-once flow's single attempt goes out, and the node dies
        # with that attempt under way (its outcome never written)
        old.transport.hold = asyncio.Event()  # the second attempt is never answered
        first.set()
        await old.transport.wait_for(2)
        assert old.transport.requests[1].flow_id == once.id

        # Then the store says it was sent (`sending`), and the new owner, a grace later, closes it `unknown`
        # instead of sending it again
        assert (await stored(store, once.id)).status is FlowStatus.SENDING
        clock.advance(80_000)
        await new.compensator.run_once()
        await settle()
        assert new.transport.requests == []
        assert (await stored(store, once.id)).status is FlowStatus.UNKNOWN


async def test_a_backlog_behind_a_slow_app_is_leased_about_once_a_flow_and_re_driven_near_its_turn_after_a_crash() -> (
    None
):
    # Given a node sending one callback at a time for an app whose receiver answers one a second, and 400 flows queued
    # at once (a daily batch of a rate-limited app): the last one's turn 400 s away, most of them waiting past the grace
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    old, new = Node(store, clock), Node(store, clock)
    async with running(old, new):
        one_at_a_time = replace(APP, max_concurrency=1)
        old.transport.hold = asyncio.Event()
        backlog = [await stored_flow(store, clock=clock) for _ in range(400)]
        for task, flow in backlog:
            old.deliverer.submit(CallbackJob(task, flow, one_at_a_time))
        await old.transport.wait_for(1)

        # When it sends them, a compensation pass every 5 s, and dies (kill -9: nothing written) after 200 s
        leases, held_past_grace = 0, 0
        for second in range(1, 201):
            clock.advance(1_000)
            answered, old.transport.hold = old.transport.hold, asyncio.Event()
            answered.set()
            await old.transport.wait_for(second + 1)
            if second == 30:  # every flow still held (the one under way too) is stale from now on: due at 0
                held_past_grace = len(backlog) - len(old.transport.requests) + 1
            if second % 5 == 0:
                leases += await old.compensator.run_once()
        sent = {r.flow_id for r in old.transport.requests}
        crashed_ms = clock.now_ms()
        # (what its metrics showed then: the app's queue and how long it takes to drain at one a second)
        [(app_id, queued, drain_s)] = old.deliverer.lanes.queues()
        assert (app_id, queued) == (APP.id, len(backlog) - len(sent))
        assert drain_s is not None and abs(drain_s - queued) <= 0.05 * queued

        # Then each flow it held past the grace was leased about once: until about its turn. A lease at every lease's
        # end (46 s here) would make ~1,200 leases of these 370 flows over the 200 s
        assert held_past_grace == 370
        assert leases <= 1.5 * held_past_grace, f"{leases} leases of {held_past_grace} flows held past the grace"

        # And the new owner re-drives each flow the dead node still held no later than a grace and a pass after its
        # turn on the dead node (position in its queue, at one a second): not minutes after, as a lease pushed past
        # its turn would make it
        # (the one under way when it died first, its turn then)
        unanswered = [flow for _, flow in backlog if (await stored(store, flow.id)).status is FlowStatus.PENDING]
        assert len(unanswered) == len(backlog) - len(sent) + 1
        turn_ms = {flow.id: crashed_ms + position * 1_000 for position, flow in enumerate(unanswered)}
        redriven_ms: dict[str, int] = {}
        for _ in range(180):  # 15 minutes of passes
            clock.advance(5_000)
            await new.compensator.run_once()
            await settle()
            for request in new.transport.requests:
                redriven_ms.setdefault(request.flow_id, clock.now_ms())
        assert set(redriven_ms) == set(turn_ms)
        late = {f: redriven_ms[f] - turn_ms[f] for f in turn_ms if redriven_ms[f] > turn_ms[f] + 30_000 + 5_000}
        assert not late, f"{len(late)} re-driven past their turn and the grace, by up to {max(late.values())} ms"


def counted_flow_reads(store: MemoryTaskStore) -> list[str]:
    """The ids of the flows read from ``store`` (``get_flow``) from now on, in order."""
    reads: list[str] = []
    read_flow = store.get_flow

    async def counted_read(task_id: int, scheduled_at_ms: int) -> Flow | None:
        reads.append(f"{task_id}-{scheduled_at_ms}")
        return await read_flow(task_id, scheduled_at_ms)

    store.get_flow = counted_read  # type: ignore[method-assign]
    return reads


async def test_a_first_attempt_that_waited_long_in_its_apps_queue_is_not_sent_once_its_task_is_deleted() -> None:
    # Given a node sending one callback at a time for an app whose receiver holds the attempt under way, two flows
    # queued behind it, and a count of the store's flow reads
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    node = Node(store, clock)
    reads = counted_flow_reads(store)
    async with running(node):
        one_at_a_time = replace(APP, max_concurrency=1)
        node.transport.hold = asyncio.Event()
        under_way = await stored_flow(store, clock=clock)
        deleted, kept = [await stored_flow(store, clock=clock) for _ in range(2)]
        for task, flow in (under_way, deleted, kept):
            node.deliverer.submit(CallbackJob(task, flow, one_at_a_time))
        await node.transport.wait_for(1)

        # When the first one's task is deleted (its open flows cancelled) while they wait, a minute (the order was
        # paid: its "close the order" timer is no longer wanted)
        assert await store.delete_task_cancelling_flows(deleted[0].id, clock.now_ms())
        clock.advance(60_000)
        node.transport.hold.set()
        await delivered_all(node.deliverer)

        # Then it is not sent (its flow read first, found cancelled), and the other is
        assert [r.flow_id for r in node.transport.requests] == [under_way[1].id, kept[1].id]
        assert sorted(reads) == sorted([deleted[1].id, kept[1].id])
        assert (await stored(store, deleted[1].id)).status is FlowStatus.CANCELLED
        assert (await stored(store, kept[1].id)).status is FlowStatus.DELIVERED

        # And a first attempt taken from its queue at once is sent without a read: the fire path pays none
        reads.clear()
        prompt = await stored_flow(store, clock=clock)
        node.deliverer.submit(CallbackJob(*prompt, one_at_a_time))
        await delivered_all(node.deliverer)
        assert node.transport.requests[-1].flow_id == prompt[1].id
        assert reads == []


async def test_a_stopping_nodes_flow_waiting_for_its_apps_rate_is_handed_back_when_the_drain_runs_out() -> None:
    # Given a node with an app limited to one callback a second: one attempt sent, the next flow taken from the queue
    # by a worker and waiting about a second for the app's rate, a third still queued
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    node = Node(store, clock)
    await node.deliverer.start()
    one_a_second = replace(APP, rate_limit_per_s=1.0, max_concurrency=2)
    flows = [await stored_flow(store, clock=clock) for _ in range(3)]
    for task, flow in flows:
        node.deliverer.submit(CallbackJob(task, flow, one_a_second))
    await node.transport.wait_for(1)

    # When the node stops (a rolling restart) with a drain shorter than that wait
    await node.deliverer.stop(0.2)

    # Then both flows not sent are written back due for the shard's owner's next pass, the one that waited for its
    # slot too (not left as stored, for the owner a grace later)
    assert [r.flow_id for r in node.transport.requests] == [flows[0][1].id]
    for _, flow in flows[1:]:
        stored_now = await stored(store, flow.id)
        assert (stored_now.status, stored_now.next_attempt_at_ms) == (
            FlowStatus.PENDING,
            clock.now_ms() - HAND_BACK_MS,
        ), flow.id


async def test_flows_let_go_from_a_queue_no_longer_count_ahead_of_those_behind_them() -> None:
    # Given a node sending one callback at a time for an app whose queue drained at one a second for a window, and five
    # flows queued behind the attempt under way
    clock = ManualClock(1_796_000_000_000)
    store = MemoryTaskStore()
    node = Node(store, clock)
    async with running(node):
        one_at_a_time = replace(APP, max_concurrency=1)
        node.transport.hold = asyncio.Event()
        for second in range(31):
            filler = await stored_flow(store, clock=clock)
            node.deliverer.submit(CallbackJob(*filler, one_at_a_time))
            if second:
                clock.advance(1_000)
                answered, node.transport.hold = node.transport.hold, asyncio.Event()
                answered.set()
            await node.transport.wait_for(second + 1)
        queued = [await stored_flow(store, clock=clock) for _ in range(5)]
        for task, flow in queued:
            node.deliverer.submit(CallbackJob(task, flow, one_at_a_time))

        # When the shards of the first and the third go to another node (a node joined)
        handed = frozenset({shard_of_task_id(queued[0][0].id), shard_of_task_id(queued[2][0].id)})
        staying = [flow for task, flow in queued if shard_of_task_id(task.id) not in handed]
        node.deliverer.forget_runs(handed)

        # Then those left wait only for each other: the n-th of them n seconds at that pace, not behind the let-go ones
        waits = [node.deliverer.wait_ms(flow.id) for flow in staying]
        assert 1 <= len(waits) <= 3
        assert waits == pytest.approx([(n + 1) * 1_000 for n in range(len(waits))], rel=0.1)


async def test_a_step_of_the_wall_clock_is_no_wait_in_an_apps_queue() -> None:
    # Given a node sending one callback at a time for an app whose receiver holds the attempt under way, a flow queued
    # behind it, and a count of the store's flow reads
    clock, elapsed = ManualClock(1_796_000_000_000), ManualClock(0)
    store = MemoryTaskStore()
    node = Node(store, clock, elapsed=elapsed)
    reads = counted_flow_reads(store)
    async with running(node):
        one_at_a_time = replace(APP, max_concurrency=1)
        node.transport.hold = asyncio.Event()
        under_way, queued = [await stored_flow(store, clock=clock) for _ in range(2)]
        for task, flow in (under_way, queued):
            node.deliverer.submit(CallbackJob(task, flow, one_at_a_time))
        await node.transport.wait_for(1)

        # When the node's wall clock steps 30 s ahead (an NTP step, `date -s`) while the flow waits 0.1 s
        clock.advance(30_000)
        elapsed.advance(100)
        node.transport.hold.set()
        await delivered_all(node.deliverer)

        # Then it waited 0.1 s, not 30: sent without a read (the fire path pays none), as a prompt first attempt is
        assert [r.flow_id for r in node.transport.requests] == [under_way[1].id, queued[1].id]
        assert reads == []


async def test_a_fenced_nodes_unsent_flow_goes_out_at_the_owners_next_pass_when_its_wall_clock_stepped_ahead() -> None:
    # Given a flow fired on time, then let go unsent by its node whose wall clock stepped 30 s ahead meanwhile (an NTP
    # step: its fence closes, its lease expired by that clock), and the shard's owner on the right clock
    start_ms = 1_796_000_000_000
    clock, stepped = ManualClock(start_ms), ManualClock(start_ms + 30_000)
    store = MemoryTaskStore()
    fenced, owner = Node(store, stepped), Node(store, clock)
    async with running(fenced, owner):
        task, flow = await stored_flow(store, clock=clock)
        fenced.fence_open = False
        fenced.deliverer.submit(CallbackJob(task, flow, APP))
        await delivered_all(fenced.deliverer)
        assert fenced.transport.requests == [] and fenced.deliverer.handed_back == 1

        # When the owner runs its next compensation pass, 5 s later by the right clock
        clock.advance(5_000)
        handled = await owner.compensator.run_once()
        await delivered_all(owner.deliverer)

        # Then it goes out from there, once: not a grace later, as it would written back due by the stepped clock
        assert handled == 1
        assert [r.flow_id for r in owner.transport.requests] == [flow.id]
        assert (await stored(store, flow.id)).status is FlowStatus.DELIVERED
