"""The Deliverer with named targets, over the protocol router and the transport twin per protocol.

A changed target applies to the next attempt (through this node at once, from another node once the
directory's entry expires); a multicast of targets retries only the one that failed; a target gone
dead-letters naming it; the retry budget follows task > target > node; inline callbacks never ask
the directory.

Time is the test's: one ManualClock for the deliverer, the transports and the directory; no jitter
(a retry is due at once: its timer runs on the event loop, not on the clock); outcomes written one by
one; every wait is for an event or for loop turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from tests.delivery_fakes import APP, CLOCK, SETTINGS, NoJitter, delivered_all, settle, stored_flow
from tests.observers import RecordingObserver
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.delivery.router import ProtocolRouter
from tjobs.model import App, Flow, FlowStatus, Task, parse_flow_id
from tjobs.service.targets import TargetDirectory
from tjobs.specs import CallbackSpec
from tjobs.stores.memory import MemoryTaskStore
from tjobs.targets.addresses import AddressAllowList
from tjobs.targets.model import AmqpTarget, NatsTarget, Protocol, RetryPolicy, Target

SECRET = "amqp-pw-never-in-an-error"
ALLOWED = AddressAllowList.parse(["127.0.0.1:5672", "127.0.0.1:4222"])


def amqp(name: str = "orders-mq", version: int = 1, exchange: str = "orders", **retry: int) -> Target:
    return Target(
        APP.id,
        name,
        AmqpTarget("amqp://127.0.0.1:5672/", exchange, "fire"),
        version,
        RetryPolicy(**retry),
        MappingProxyType({"username": "tjobs", "password": SECRET}),
    )


def nats(name: str = "orders-nats", **retry: int) -> Target:
    return Target(APP.id, name, NatsTarget(("nats://127.0.0.1:4222",), "orders.fire"), 1, RetryPolicy(**retry))


class Apps:
    """The app source: one app, always cached."""

    def cached(self, app_id: str) -> App | None:
        return APP

    async def get(self, app_id: str) -> App:
        return APP


class Rig:
    def __init__(self, store: MemoryTaskStore, directory: TargetDirectory, clock: ManualClock) -> None:
        self.store = store
        self.directory = directory
        self.clock = clock  # the deliverer's, the transports' and the directory's: moves only when told
        self.http = RecordingTransport(SETTINGS, clock)
        self.amqp = RecordingTransport(SETTINGS, clock)
        self.nats = RecordingTransport(SETTINGS, clock)
        self.router = ProtocolRouter(
            self.http,
            SETTINGS,
            allowed_addresses=ALLOWED,
            transports={Protocol.AMQP: self.amqp, Protocol.NATS: self.nats},
        )
        self.observer = RecordingObserver()
        self.deliverer: Deliverer | None = None

    async def start(self, **kwargs: Any) -> Deliverer:
        kwargs.setdefault("targets", self.directory)
        self.deliverer = Deliverer(
            self.store,
            self.router,
            AppLimiter(SETTINGS.global_max_in_flight),
            SETTINGS,
            self.clock,
            NoJitter(),
            apps=Apps(),
            observer=self.observer,
            flush_batch=1,
            status_reader=self.store,
            **kwargs,
        )
        await self.deliverer.start()
        return self.deliverer

    async def put(self, target: Target, expected_version: int | None = None) -> None:
        await self.store.put_target(target, expected_version)

    async def flow_naming(self, *names: str, **budget: int) -> tuple[Task, Flow]:
        task, flow = await stored_flow(self.store)
        task = replace(task, callback=CallbackSpec((), targets=names, max_attempts=budget.get("max_attempts")))
        return task, flow

    async def settled(self) -> None:
        """Until nothing is queued, sent, waiting for a retry or unwritten."""
        assert self.deliverer is not None
        await delivered_all(self.deliverer)

    async def until(self, flow: Flow, status: FlowStatus) -> Flow:
        """Until the stored flow is in ``status`` (its targets may be read first: not in flight yet)."""
        for _ in range(10_000):  # loop turns, no wall time
            found = await self.store.get_flow(*parse_flow_id(flow.id))
            if found is not None and found.status is status:
                await self.settled()
                return found
            await asyncio.sleep(0)
        raise AssertionError(f"flow {flow.id} never became {status.value}")


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    store = MemoryTaskStore()
    clock = ManualClock(CLOCK.now_ms())
    made = Rig(store, TargetDirectory(store, clock, ttl_ms=5000), clock)
    yield made
    if made.deliverer is not None:
        await made.deliverer.stop(1.0)


async def stored(rig: Rig, flow: Flow) -> Flow:
    found = await rig.store.get_flow(*parse_flow_id(flow.id))
    assert found is not None
    return found


Step = Callable[[Rig], Awaitable[None]]


async def _through_this_node(rig: Rig) -> None:
    changed = amqp(version=2, exchange="billing")
    await rig.put(changed, 1)
    rig.directory.put(changed)  # what TargetService does on the node that served the change


async def _through_another_node(rig: Rig) -> None:
    await rig.put(amqp(version=2, exchange="billing"), 1)  # only the store knows
    rig.clock.advance(5001)  # this node's entry expires (targets.cache_ttl_s)


@pytest.mark.parametrize("change", [_through_this_node, _through_another_node], ids=["this-node", "another-node"])
async def test_a_target_changed_between_attempts_applies_to_the_next_attempt(rig: Rig, change: Step) -> None:
    await rig.put(amqp())
    deliverer = await rig.start()
    rig.amqp.script(Answer(503), then=Answer(200), url="target:orders-mq")
    rig.amqp.hold = asyncio.Event()  # the receiver sits on every attempt until released
    task, flow = await rig.flow_naming("orders-mq")

    deliverer.deliver(task, flow)
    await rig.amqp.wait_for(1)
    await change(rig)  # while the first attempt is still under way
    rig.amqp.hold.set()
    await rig.amqp.wait_for(2)
    await rig.settled()

    first, second = rig.amqp.requests
    assert first.url == second.url == "target:orders-mq"
    assert first.target is not None and second.target is not None
    assert (first.target.version, first.target.settings.exchange) == (1, "orders")  # type: ignore[union-attr]
    assert (second.target.version, second.target.settings.exchange) == (2, "billing")  # type: ignore[union-attr]
    assert [r.headers["webhook-id"] for r in rig.amqp.requests] == [flow.id, flow.id]
    assert (await stored(rig, flow)).status is FlowStatus.DELIVERED
    assert rig.observer.protocols == ["amqp", "amqp"]


async def test_a_multicast_of_two_targets_retries_only_the_one_that_failed(rig: Rig) -> None:
    await rig.put(amqp())
    await rig.put(nats())
    deliverer = await rig.start()
    rig.amqp.script(Answer(503), Answer(503), then=Answer(200), url="target:orders-mq")
    task, flow = await rig.flow_naming("orders-mq", "orders-nats")

    deliverer.deliver(task, flow)
    await rig.amqp.wait_for(3)
    await rig.settled()

    assert [int(r.headers["tjobs-attempt"]) for r in rig.amqp.requests] == [1, 2, 3]
    assert [int(r.headers["tjobs-attempt"]) for r in rig.nats.requests] == [1]  # delivered at once, never again
    done = await stored(rig, flow)
    assert (done.status, done.attempts, done.last_error) == (FlowStatus.DELIVERED, 3, None)
    assert rig.http.requests == []
    assert sorted(set(rig.observer.protocols)) == ["amqp", "nats"]


async def test_a_target_deleted_while_a_task_names_it_dead_letters_the_flow_naming_it(rig: Rig) -> None:
    await rig.put(nats())
    deliverer = await rig.start()
    task, flow = await rig.flow_naming("orders-nats", "gone")  # "gone" was deleted after registration

    deliverer.deliver(task, flow)
    dead = await rig.until(flow, FlowStatus.DEAD)

    assert dead.attempts == 1
    assert dead.last_error is not None and "target:gone: target 'gone' no longer exists" in dead.last_error
    assert len(rig.nats.requests) == 1  # the other target was sent to, once


async def test_a_broker_error_lands_in_last_error_by_target_name_without_address_or_credentials(rig: Rig) -> None:
    await rig.put(amqp(max_attempts=1))
    await rig.put(nats())
    deliverer = await rig.start()
    rig.amqp.script(then=Answer(410, body=b"unroutable"), url="target:orders-mq")
    task, flow = await rig.flow_naming("orders-mq", "orders-nats")

    deliverer.deliver(task, flow)
    dead = await rig.until(flow, FlowStatus.DEAD)

    assert dead.last_error is not None and dead.last_error.startswith("target:orders-mq: ")
    assert SECRET not in dead.last_error and "5672" not in dead.last_error


@pytest.mark.parametrize(
    ("budget", "targets", "attempts"),
    [
        ({}, [amqp(max_attempts=2)], 2),  # the target's policy over the node's 5
        ({"max_attempts": 3}, [amqp(max_attempts=2)], 3),  # the task's explicit value over the target's
        ({}, [amqp(max_attempts=2), nats(max_attempts=4)], 4),  # several targets: the largest
        ({}, [amqp(), nats(max_attempts=2)], 5),  # a target without its own counts as the node's 5
    ],
    ids=["target", "task", "largest", "node-default"],
)
async def test_the_retry_budget_is_the_tasks_else_the_targets_else_the_nodes(
    rig: Rig, budget: dict[str, int], targets: list[Target], attempts: int
) -> None:
    for target in targets:
        await rig.put(replace(target, retry=replace(target.retry, backoff_base_ms=1, backoff_max_ms=2)))
    deliverer = await rig.start()
    for twin in (rig.amqp, rig.nats):
        twin.script(then=Answer(503))
    task, flow = await rig.flow_naming(*(t.name for t in targets), **budget)

    deliverer.deliver(task, flow)
    dead = await rig.until(flow, FlowStatus.DEAD)

    assert dead.attempts == attempts


async def test_a_flow_whose_targets_cannot_be_read_now_stays_pending_for_the_compensator(rig: Rig) -> None:
    asked = asyncio.Event()

    class Down:
        def cached(self, app_id: str, name: str) -> Target | None:
            return None

        async def get(self, app_id: str, name: str) -> Target | None:
            asked.set()
            raise ConnectionError("the apps database is down")

    deliverer = await rig.start(targets=Down())
    task, flow = await rig.flow_naming("orders-mq")

    deliverer.deliver(task, flow)
    await asyncio.wait_for(asked.wait(), 5)
    await settle()  # the lookup's failure handled
    await rig.settled()

    assert rig.amqp.exchanges == []
    assert (await stored(rig, flow)).status is FlowStatus.PENDING


async def test_an_inline_callback_never_asks_the_target_directory(rig: Rig) -> None:
    class Counting:
        asked = 0

        def cached(self, app_id: str, name: str) -> Target | None:
            Counting.asked += 1
            return None

        async def get(self, app_id: str, name: str) -> Target | None:
            Counting.asked += 1
            return None

    deliverer = await rig.start(targets=Counting())
    rig.http.answer_statuses(500, then=200)
    task, flow = await stored_flow(rig.store)

    deliverer.deliver(task, flow)
    await rig.http.wait_for(2)
    await rig.settled()

    assert Counting.asked == 0
    assert [r.url for r in rig.http.requests] == ["https://receiver.example/hook"] * 2
    assert rig.observer.protocols == ["http", "http"]
