"""Unit-test helpers for delivery: the transport twin scripted by status, stored tasks with a flow each, and
nodes' deliverers sharing one store on the test's clock (with the owner's compensator beside them)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from sharding import TaskIdGenerator
from tjobs.clock import Clock, ManualClock, SystemClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.recording import RecordingTransport
from tjobs.delivery.signing import generate_secret
from tjobs.firing.compensator import Compensator
from tjobs.model import (
    App,
    DeliveryMode,
    Flow,
    FlowKind,
    FlowStatus,
    FlowUpdate,
    MisfirePolicy,
    Task,
    TaskStatus,
    parse_flow_id,
)
from tjobs.pools.model import Executor
from tjobs.settings import CallbackSettings, CompensatorSettings
from tjobs.specs import AtSpec, CallbackSpec
from tjobs.specs.pool import parse_pool_route
from tjobs.stores.base import TaskStore
from tjobs.stores.memory import MemoryTaskStore

CLOCK = SystemClock()
SETTINGS = CallbackSettings(backoff_base_ms=20, backoff_max_ms=40, max_attempts=5, timeout_ms=1000)
APP = App("shop", "shop", "", [generate_secret()], rate_limit_per_s=0.0, max_concurrency=10)
GRACE = CompensatorSettings(interval_s=1.0, grace_s=30.0, batch=100)
LEASE_MS = 16_000
_instants = itertools.count(1)


class ManualTime:
    """Monotonic seconds that move only when told, and a ``sleep`` on them: the limiter's time in tests.

    ``run()`` lets every task on the loop go as far as it can, then moves the clock straight to the
    earliest sleeper's wake-up time and wakes it, until nobody sleeps (or ``until_s`` is reached).
    """

    def __init__(self) -> None:
        self.now_s = 0.0
        self.slept: list[float] = []  # every sleep asked for, in order
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self.now_s

    async def sleep(self, delay_s: float) -> None:
        self.slept.append(delay_s)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now_s + delay_s, waiter))
        await waiter

    @property
    def sleeping(self) -> int:
        return sum(1 for _, waiter in self._sleepers if not waiter.done())

    async def run(self, until_s: float = float("inf")) -> None:
        while True:
            await settle()
            self._sleepers = [(due, waiter) for due, waiter in self._sleepers if not waiter.done()]
            if not self._sleepers:
                return
            due_s = min(due for due, _ in self._sleepers)
            if due_s > until_s:
                self.now_s = until_s
                return
            self.now_s = max(self.now_s, due_s)
            for due, waiter in self._sleepers:
                if due <= self.now_s:
                    waiter.set_result(None)


class FailingRecorder:
    """The store's outcome writes, failing while ``failing`` (a deadlock storm on the database server)."""

    def __init__(self, store: MemoryTaskStore) -> None:
        self.store = store
        self.failing = True
        self.failed = asyncio.Event()

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        if self.failing:
            self.failed.set()
            raise RuntimeError("(1213, 'Deadlock found when trying to get lock; try restarting transaction')")
        await self.store.record_flow_updates(updates, now_ms)


async def settle(rounds: int = 20) -> None:
    """Let every runnable task on the loop run until it waits (a few loop iterations, no wall time)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class NoJitter(random.Random):
    """The deliverer's jitter source drawing 0: every backoff is 0 ms, so a retry (or a pool flow's
    wait for executors) is due at once. The deliverer keeps its retry timers on the event loop
    (``loop.call_later``), not on its clock: with them due at once, no test waits for one."""

    def random(self) -> float:
        return 0.0


async def turns_until(done: Callable[[], bool], what: str, turns: int = 10_000) -> None:
    """Let the loop run (``sleep(0)``, no wall time) until ``done()``; fail naming ``what`` if it never is."""
    for _ in range(turns):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"after {turns} loop turns, still not {what}")


async def delivered_all(deliverer: Deliverer) -> None:
    """Until nothing is queued, sent, waiting for a retry or unwritten (loop turns, no wall time)."""
    await turns_until(lambda: not deliverer.in_flight_count(), f"settled: in flight {deliverer.in_flight()}")


def scripted(*statuses: int, then: int = 200, clock: Clock = CLOCK) -> RecordingTransport:
    """The transport twin answering ``statuses`` in order, then ``then`` for good; connects nowhere."""
    transport = RecordingTransport(SETTINGS, clock)
    transport.answer_statuses(*statuses, then=then)
    return transport


def attempts_of(transport: RecordingTransport) -> list[int]:
    """The ``tjobs-attempt`` header of every attempt, in arrival order."""
    return [int(r.headers["tjobs-attempt"]) for r in transport.requests]


async def stored_flow(
    store: TaskStore,
    *,
    app: App = APP,
    overdue_ms: int = 0,
    attempts: int = 0,
    status: FlowStatus = FlowStatus.PENDING,
    delivery: DeliveryMode = DeliveryMode.AT_LEAST_ONCE,
    clock: Clock = CLOCK,
) -> tuple[Task, Flow]:
    """A task stored with one flow (its next attempt ``overdue_ms`` before ``clock``'s now)."""
    now_ms = clock.now_ms()
    ids = TaskIdGenerator(store.topology.shard_count)
    task = await store.insert_task(
        Task(
            ids.mint(ids.random_shard(), now_ms + next(_instants)),
            app.id,
            "t",
            None,
            AtSpec(now_ms),
            CallbackSpec(("https://receiver.example/hook",)),
            {"order": 1},
            MisfirePolicy.FIRE_NOW,
            delivery,
            TaskStatus.COMPLETED,
            None,
            2,
            1,
            now_ms,
            now_ms,
        )
    )
    at_ms = now_ms - overdue_ms
    flow = await store.insert_manual_flow(
        task.id, Flow(task.id, at_ms, app.id, FlowKind.SCHEDULED, status, attempts, at_ms, at_ms, at_ms)
    )
    return task, flow


async def stored(store: TaskStore, flow_id: str) -> Flow:
    """The flow as the store has it now."""
    flow = await store.get_flow(*parse_flow_id(flow_id))
    assert flow is not None
    return flow


# Fixtures of tests whose nodes share one store on the test's clock. pytest finds a module's fixtures by name
# in its namespace: a test module takes these by binding them there (``store = delivery_fakes.store``).


@pytest.fixture
def store() -> MemoryTaskStore:
    return MemoryTaskStore()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK.now_ms())


@pytest.fixture
async def deliverers() -> AsyncIterator[list[Deliverer]]:
    """The deliverers ``node`` built for the test, stopped after it."""
    built: list[Deliverer] = []
    yield built
    for deliverer in built:
        await deliverer.stop(1.0)


async def node(
    built: list[Deliverer], store: MemoryTaskStore, transport: RecordingTransport, clock: ManualClock, **kwargs: object
) -> Deliverer:
    """One node's deliverer as the node wires it (the store's flow read before a retry, unless ``status_reader``
    reads instead), outcomes written at once; ``recorder`` writes them instead of the store, the other keywords
    go to the deliverer."""
    kwargs.setdefault("flush_batch", 1)
    kwargs.setdefault("status_reader", store)
    recorder = kwargs.pop("recorder", store)
    deliverer = Deliverer(
        recorder,  # type: ignore[arg-type]
        transport,
        AppLimiter(SETTINGS.global_max_in_flight),
        SETTINGS,
        clock,
        NoJitter(),
        **kwargs,  # type: ignore[arg-type]
    )
    await deliverer.start()
    built.append(deliverer)
    return deliverer


def owners_compensator(store: MemoryTaskStore, owner: Deliverer, clock: ManualClock) -> Compensator:
    """The compensator of a node owning every shard, re-driving through its deliverer ``owner``."""
    every_shard = frozenset(store.topology.shards())
    return Compensator(
        store,
        lambda: every_shard,
        owner.is_in_flight,
        lambda t, f: owner.submit(CallbackJob(t, f, APP)),
        GRACE,
        clock,
        LEASE_MS,
        outcomes_written=lambda: owner.flush_calls,
    )


async def queue_one_pair(store: MemoryTaskStore, clock: ManualClock) -> tuple[LocalCoordinator, Task, Flow, Flow]:
    """A task routed to pool ``workers`` (one executor registered in the returned registry) whose overlap is
    ``queue_one``, with two stored flows: the second due a millisecond after the first."""
    registry = LocalCoordinator(4)
    await registry.register_executor(APP.id, "workers", Executor("e0", "http://10.0.0.1:8000", "z1"))
    task, first = await stored_flow(store, clock=clock)
    spec = CallbackSpec((), pool=parse_pool_route({"name": "workers", "overlap": "queue_one"}))
    task = await store.update_task(dataclasses.replace(task, callback=spec), task.version)
    at_ms = first.scheduled_at_ms + 1
    second = await store.insert_manual_flow(
        task.id, dataclasses.replace(first, scheduled_at_ms=at_ms, next_attempt_at_ms=at_ms)
    )
    return registry, task, first, second
