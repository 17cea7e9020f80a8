"""Unit-test helpers for delivery: the transport twin scripted by status, and stored tasks with a flow each."""

from __future__ import annotations

import itertools

from sharding import TaskIdGenerator
from tjobs.clock import SystemClock
from tjobs.delivery.recording import RecordingTransport
from tjobs.delivery.signing import generate_secret
from tjobs.model import App, DeliveryMode, Flow, FlowKind, FlowStatus, MisfirePolicy, Task, TaskStatus
from tjobs.settings import CallbackSettings
from tjobs.stores.memory import MemoryTaskStore

CLOCK = SystemClock()
SETTINGS = CallbackSettings(backoff_base_ms=20, backoff_max_ms=40, max_attempts=5, timeout_ms=1000)
APP = App("shop", "shop", "", [generate_secret()], rate_limit_per_s=0.0, max_concurrency=10)
_instants = itertools.count(1)


def scripted(*statuses: int, then: int = 200) -> RecordingTransport:
    """The transport twin answering ``statuses`` in order, then ``then`` for good; connects nowhere."""
    transport = RecordingTransport(SETTINGS, CLOCK)
    transport.answer_statuses(*statuses, then=then)
    return transport


def attempts_of(transport: RecordingTransport) -> list[int]:
    """The ``tjobs-attempt`` header of every attempt, in arrival order."""
    return [int(r.headers["tjobs-attempt"]) for r in transport.requests]


async def stored_flow(
    store: MemoryTaskStore,
    *,
    app: App = APP,
    overdue_ms: int = 0,
    attempts: int = 0,
    status: FlowStatus = FlowStatus.PENDING,
    delivery: DeliveryMode = DeliveryMode.AT_LEAST_ONCE,
) -> tuple[Task, Flow]:
    """A task stored with one flow (its next attempt ``overdue_ms`` in the past)."""
    now_ms = CLOCK.now_ms()
    ids = TaskIdGenerator(store.topology.shard_count)
    task = await store.insert_task(
        Task(
            ids.mint(ids.random_shard(), now_ms + next(_instants)),
            app.id,
            "t",
            None,
            {"kind": "at", "at_ms": now_ms},
            {"url": "https://receiver.example/hook"},
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
