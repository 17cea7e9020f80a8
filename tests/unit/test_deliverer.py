"""The Deliverer on the memory store with the transport twin: fencing, cancelled flows, throttling, apps.

Time is the test's: the deliverer's clock is a ManualClock moved by the test, its backoff draws no
jitter (a retry is due at once: its timer runs on the event loop, not on the clock), its outcomes are
written one by one (no flush interval), and every wait is for an event or for loop turns, never for
wall-clock time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from tests.delivery_fakes import (
    APP,
    CLOCK,
    SETTINGS,
    NoJitter,
    attempts_of,
    delivered_all,
    scripted,
    settle,
    stored_flow,
    turns_until,
)
from tests.observers import RecordingObserver
from tjobs.clock import ManualClock
from tjobs.delivery.allow_list import AllowList
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.recording import RecordingTransport
from tjobs.model import App, Flow, FlowStatus, parse_flow_id
from tjobs.service.apps import AppDirectory
from tjobs.stores.memory import MemoryTaskStore

Build = Callable[..., Awaitable[Deliverer]]


class CountingReader:
    """The store's flow read, counted: the fire path must not pay for it."""

    def __init__(self, store: MemoryTaskStore) -> None:
        self.store = store
        self.reads = 0

    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None:
        self.reads += 1
        return await self.store.get_flow(task_id, scheduled_at_ms)


@pytest.fixture
def store() -> MemoryTaskStore:
    return MemoryTaskStore()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK.now_ms())


@pytest.fixture
async def build(store: MemoryTaskStore, clock: ManualClock) -> AsyncIterator[Build]:
    built: list[Deliverer] = []

    async def make(transport: RecordingTransport, **kwargs: Any) -> Deliverer:
        limiter = kwargs.pop("limiter", None) or AppLimiter(SETTINGS.global_max_in_flight)
        kwargs.setdefault("flush_batch", 1)  # each outcome written at once, not after a flush interval
        deliverer = Deliverer(store, transport, limiter, SETTINGS, clock, NoJitter(), **kwargs)
        await deliverer.start()
        built.append(deliverer)
        return deliverer

    yield make
    for deliverer in built:
        await deliverer.stop(1.0)


async def _stored(store: MemoryTaskStore, flow_id: str) -> Flow:
    flow = await store.get_flow(*parse_flow_id(flow_id))
    assert flow is not None
    return flow


# ---- fencing -------------------------------------------------------------------------------------


async def test_a_node_whose_fence_is_closed_sends_nothing_and_leaves_the_flow_to_the_new_owner(
    store: MemoryTaskStore, build: Build
) -> None:
    transport = scripted()
    deliverer = await build(transport, fence=lambda now_ms: False)
    task, flow = await stored_flow(store)

    deliverer.submit(CallbackJob(task, flow, APP))
    await delivered_all(deliverer)

    assert transport.requests == []
    stored = await _stored(store, flow.id)
    assert (stored.status, stored.attempts, stored.next_attempt_at_ms) == (
        FlowStatus.PENDING,
        0,
        flow.next_attempt_at_ms,
    )


async def test_a_fenced_node_reports_the_flows_it_does_not_send_in_a_few_lines_not_one_each(
    store: MemoryTaskStore, build: Build, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A node that lost its jobs with a deep queue (a stop's hand-off, a SIGSTOP past the lease) wrote
    # one warning per flow: 127,448 lines in 5 s at 3,000 fires/s. The operator needs the first flow
    # and the count, every few seconds, and the total at stop.
    transport = scripted()
    deliverer = await build(transport, fence=lambda now_ms: False)
    flows = [await stored_flow(store) for _ in range(40)]
    caplog.set_level(logging.WARNING, logger="tjobs.delivery.fenced_flows")

    for task, flow in flows[:30]:
        deliverer.submit(CallbackJob(task, flow, APP))
    await delivered_all(deliverer)
    clock.advance(10_000)  # the next report is due: one line for the next flow and the ones before it
    for task, flow in flows[30:]:
        deliverer.submit(CallbackJob(task, flow, APP))
    await delivered_all(deliverer)
    await deliverer.stop(1.0)

    assert transport.requests == []
    fenced = [r for r in caplog.records if getattr(r, "action", None) == "delivery_fenced"]
    assert [r.getMessage() for r in fenced] == [
        f"fenced: not sending flow {flows[0][1].id}; the owner's compensator re-drives it",
        f"fenced: not sending flow {flows[30][1].id} and 29 more since the last report;"
        " their owners' compensators re-drive them",
        "fenced: 9 more flows not sent since the last report; their owners' compensators re-drive them",
    ]
    assert deliverer.fenced_flows.dropped == 40


async def test_a_fence_closing_between_attempts_stops_the_retries(
    store: MemoryTaskStore, build: Build, clock: ManualClock
) -> None:
    # Given a flow whose first attempt fails while the node still holds its lease
    lease_ends_ms = clock.now_ms() + 10_000
    transport = scripted(500, then=200)
    transport.hold = asyncio.Event()  # the receiver sits on the attempt until released
    deliverer = await build(transport, fence=lambda now_ms: now_ms < lease_ends_ms)
    task, flow = await stored_flow(store)
    deliverer.submit(CallbackJob(task, flow, APP))
    await transport.wait_for(1)
    # When the lease expires (a SIGSTOP outlived it) before the retry is due
    clock.advance(10_000)
    transport.hold.set()  # attempt 1 answers 500: its retry is due at once
    await delivered_all(deliverer)
    # Then the retry is never sent; the recorded outcome says what was sent, for the new owner
    assert attempts_of(transport) == [1]
    stored = await _stored(store, flow.id)
    assert (stored.status, stored.attempts) == (FlowStatus.PENDING, 1)


# ---- cancelled flows ---------------------------------------------------------------------------


async def test_a_retry_of_a_flow_cancelled_meanwhile_is_not_sent(
    store: MemoryTaskStore, build: Build, clock: ManualClock
) -> None:
    transport = scripted(500, then=200)
    transport.hold = asyncio.Event()  # attempt 1 is under way until released
    deliverer = await build(transport, status_reader=store)
    task, flow = await stored_flow(store)
    deliverer.submit(CallbackJob(task, flow, APP))
    await transport.wait_for(1)

    assert await store.delete_task_cancelling_flows(task.id, clock.now_ms())  # a DELETE on any node
    transport.hold.set()  # attempt 1 answers 500: its retry is due at once
    await delivered_all(deliverer)

    assert attempts_of(transport) == [1]
    assert (await _stored(store, flow.id)).status is FlowStatus.CANCELLED


async def test_only_a_retry_reads_the_flow_first(store: MemoryTaskStore, build: Build) -> None:
    reader = CountingReader(store)
    transport = scripted(200, 500, then=200)
    deliverer = await build(transport, status_reader=reader)
    first_task, first = await stored_flow(store)
    deliverer.submit(CallbackJob(first_task, first, APP))
    await delivered_all(deliverer)
    assert reader.reads == 0  # a first attempt (the fire path) costs no read

    task, flow = await stored_flow(store)
    deliverer.submit(CallbackJob(task, flow, APP))
    await delivered_all(deliverer)

    assert attempts_of(transport) == [1, 1, 2] and reader.reads == 1
    assert (await _stored(store, flow.id)).status is FlowStatus.DELIVERED


@pytest.mark.parametrize(
    "broken",
    [
        {"payload_json": "{not json"},  # a trigger's payload override, corrupted in its row
        {"body": "\ud800"},  # a callback body that cannot be encoded (a lone surrogate)
    ],
    ids=["payload", "body"],
)
async def test_a_flow_whose_callback_cannot_be_built_is_a_dead_letter_and_nothing_is_sent(
    store: MemoryTaskStore, build: Build, broken: dict[str, str]
) -> None:
    transport = scripted()
    deliverer = await build(transport)
    task, flow = await stored_flow(store)
    if "body" in broken:
        task = replace(task, callback=replace(task.callback, body=broken["body"]))
    else:
        flow = replace(flow, payload_json=broken["payload_json"])
    deliverer.submit(CallbackJob(task, flow, APP))
    await delivered_all(deliverer)
    stored = await _stored(store, flow.id)
    assert transport.requests == []
    assert stored.status is FlowStatus.DEAD and (stored.last_error or "").startswith("unusable callback spec")


# ---- throttling ----------------------------------------------------------------------------------


async def test_waiting_for_the_apps_concurrency_cap_is_counted_as_concurrency_throttling(
    store: MemoryTaskStore, build: Build
) -> None:
    # Given an app allowed one callback at a time and a slow receiver
    app = App("one-at-a-time", "one", "", APP.secrets, rate_limit_per_s=0.0, max_concurrency=1)
    observer = RecordingObserver()
    throttled = observer.throttled_calls
    limiter = AppLimiter(SETTINGS.global_max_in_flight, observer=observer)
    transport = scripted()
    transport.hold = asyncio.Event()
    deliverer = await build(transport, limiter=limiter)
    # When three of its flows are due at once
    for _ in range(3):
        task, flow = await stored_flow(store, app=app)
        deliverer.submit(CallbackJob(task, flow, app))
    await transport.wait_for(1)
    await settle()  # the other two had every chance to start
    assert len(transport.requests) == 1
    transport.hold.set()
    await delivered_all(deliverer)
    # Then all three are delivered, and the two that waited for the cap are counted
    assert len(transport.requests) == 3
    assert throttled == [("one-at-a-time", "concurrency")] * 2


async def test_a_callback_that_never_waits_is_not_counted(store: MemoryTaskStore, build: Build) -> None:
    observer = RecordingObserver()
    throttled = observer.throttled_calls
    limiter = AppLimiter(SETTINGS.global_max_in_flight, observer=observer)
    deliverer = await build(scripted(), limiter=limiter)
    for _ in range(3):
        task, flow = await stored_flow(store)
        deliverer.submit(CallbackJob(task, flow, APP))
    await delivered_all(deliverer)
    assert throttled == []


# ---- apps ------------------------------------------------------------------------------------------


class CountingApps(AppDirectory):
    """The node's app directory over the memory store, its store reads counted; a read answers once
    ``answer`` is set (set from the start unless the test holds it)."""

    def __init__(self, store: MemoryTaskStore, clock: ManualClock, fail: bool = False) -> None:
        super().__init__(store, clock)
        self.store_reads = 0
        self.fail = fail
        self.answer = asyncio.Event()
        self.answer.set()

    async def _read(self, app_id: str) -> App:
        self.store_reads += 1
        await self.answer.wait()  # a database round trip
        if self.fail:
            raise OSError("database unreachable")
        return await super()._read(app_id)


async def test_a_burst_of_flows_of_a_cold_app_is_delivered_after_one_app_read(
    store: MemoryTaskStore, build: Build, clock: ManualClock
) -> None:
    # Given an app the node has not cached
    await store.put_app(APP)
    apps = CountingApps(store, clock)
    apps.answer.clear()  # the read is under way while the burst arrives
    transport = scripted()
    deliverer = await build(transport, apps=apps)
    # When ten of its flows are handed over at once
    for _ in range(10):
        deliverer.deliver(*await stored_flow(store))
    await settle()
    apps.answer.set()
    # Then the app is read once and every flow is delivered
    await transport.wait_for(10)
    await delivered_all(deliverer)
    assert apps.store_reads == 1
    assert len(transport.requests) == 10


async def test_a_flow_whose_app_cannot_be_read_stays_pending_for_the_compensator(
    store: MemoryTaskStore, build: Build, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    transport = scripted()
    deliverer = await build(transport, apps=CountingApps(store, clock, fail=True))
    task, flow = await stored_flow(store)
    with caplog.at_level(logging.ERROR, logger="tjobs.delivery.lookup"):
        deliverer.deliver(task, flow)
        await turns_until(
            lambda: any(getattr(r, "action", None) == "delivery_deferred" for r in caplog.records),
            "logged delivery_deferred",
        )
    assert [
        getattr(r, "flow_id", None) for r in caplog.records if getattr(r, "action", None) == "delivery_deferred"
    ] == [flow.id]
    assert transport.requests == []
    assert (await _stored(store, flow.id)).status is FlowStatus.PENDING


async def test_the_request_carries_its_apps_allow_list(store: MemoryTaskStore, build: Build) -> None:
    # Given an app whose allow-list admits an internal network
    app = App("internal", "internal", "", APP.secrets, settings={"allowed_callback_hosts": ["10.0.0.0/8"]})
    transport = scripted()
    deliverer = await build(transport)
    task, flow = await stored_flow(store, app=app)
    # When its flow is sent
    deliverer.submit(CallbackJob(task, flow, app))
    await transport.wait_for(1)
    # Then the target policy finds the allow-list on the request (no app lookup per send)
    assert transport.requests[0].allow_list == AllowList.parse(["10.0.0.0/8"])
