"""Unit-test doubles for delivery: a scripted sender (no sockets) and stored tasks with a flow each."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque

from sharding import TaskIdGenerator
from tjobs.clock import SystemClock
from tjobs.delivery.retry import classify
from tjobs.delivery.sender import AttemptResult, CallbackRequest, CallbackSender
from tjobs.delivery.signing import generate_secret
from tjobs.model import App, DeliveryMode, Flow, FlowKind, FlowStatus, MisfirePolicy, Task, TaskStatus
from tjobs.settings import CallbackSettings
from tjobs.stores.memory import MemoryTaskStore

CLOCK = SystemClock()
SETTINGS = CallbackSettings(backoff_base_ms=20, backoff_max_ms=40, max_attempts=5, timeout_ms=1000)
APP = App("shop", "shop", "", [generate_secret()], rate_limit_per_s=0.0, max_concurrency=10)
_instants = itertools.count(1)


class ScriptedSender(CallbackSender):
    """Answers attempts with scripted statuses (then ``then``), records every request, never connects.

    While ``hold`` is set to an unset event, every attempt waits for it: a slow receiver.
    """

    def __init__(self, *statuses: int, then: int = 200) -> None:
        super().__init__(SETTINGS)
        self.requests: list[CallbackRequest] = []
        self.hold: asyncio.Event | None = None
        self._statuses = deque(statuses)
        self._then = then
        self._arrived = asyncio.Condition()

    async def send(self, request: CallbackRequest) -> AttemptResult:
        async with self._arrived:
            self.requests.append(request)
            self._arrived.notify_all()
        if self.hold is not None:
            await self.hold.wait()
        status = self._statuses.popleft() if self._statuses else self._then
        return AttemptResult(
            request.flow_id,
            request.url,
            request.attempt,
            classify(status, None),
            status,
            None if 200 <= status < 300 else f"HTTP {status}",
            None,
            CLOCK.now_ms(),
            0.0,
        )

    async def wait_for(self, count: int, timeout_s: float = 5.0) -> list[CallbackRequest]:
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)
        return self.requests

    def attempts(self) -> list[int]:
        return [int(r.headers["tjobs-attempt"]) for r in self.requests]


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
