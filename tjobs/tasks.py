"""Task operations behind the API: validate, route by shard, store, and hand near-term changes to the wheel.

Every change that could move, stop or start a fire is published to the hot path after it commits, so
the owning node's wheel sees it before the task's instant (the fire CAS covers any race).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sharding import TaskIdGenerator, Topology, shard_for_key, shard_of_task_id
from tjobs.clock import Clock
from tjobs.errors import Conflict, DuplicateKey, InvalidInput, NotFound
from tjobs.hotpath.base import HotPath, TaskChange
from collections.abc import Callable

from tjobs.model import App, Flow, FlowKind, FlowStatus, Task, TaskStatus
from tjobs.schedules import normalize_schedule, parse_schedule
from tjobs.settings import Settings
from tjobs.stores.base import TaskStore
from tjobs.validation import (
    check_key,
    check_name,
    check_payload,
    normalize_callback,
    parse_delivery,
    parse_misfire_policy,
)

logger = logging.getLogger(__name__)

_CREATE_KEYS = frozenset({"name", "key", "schedule", "callback", "payload", "misfire_policy", "delivery"})
_UPDATE_KEYS = frozenset({"name", "schedule", "callback", "payload", "misfire_policy", "delivery", "version"})
MAX_INSERT_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Created:
    task: Task
    created: bool  # False when an existing task with the same (app, key) was returned


class TaskService:
    def __init__(
        self, store: TaskStore, hotpath: HotPath, settings: Settings, clock: Clock, topology: Topology
    ) -> None:
        self._store = store
        self._hotpath = hotpath
        self._settings = settings
        self._clock = clock
        self._topology = topology
        self._ids = TaskIdGenerator(topology.shard_count)
        self._threshold_ms = int(settings.scheduler.misfire_threshold_s * 1000)
        self.manual_flow_sink: Callable[[Task, Flow], None] | None = None

    # ---- create ---------------------------------------------------------------------------------

    def build(self, app: App, request: Any, now_ms: int) -> Task:
        """Validate a create request and build the task it describes (not stored yet)."""
        if not isinstance(request, dict):
            raise InvalidInput("body", "must be a JSON object")
        unknown = set(request) - _CREATE_KEYS
        if unknown:
            raise InvalidInput(sorted(unknown)[0], "unknown field", "unknown_field")
        for required in ("name", "schedule", "callback"):
            if required not in request:
                raise InvalidInput(required, "is required", "missing")
        name = check_name(request["name"])
        key = check_key(request.get("key"))
        limits = self._settings.limits
        schedule = normalize_schedule(
            request["schedule"], now_ms=now_ms, limits=limits, misfire_threshold_ms=self._threshold_ms
        )
        callback = normalize_callback(request["callback"], limits)
        payload = request.get("payload")
        check_payload(payload, limits)
        kind = schedule["kind"]
        policy = parse_misfire_policy(request.get("misfire_policy"), self._settings.default_misfire_policy(kind))
        delivery = parse_delivery(request.get("delivery"))
        first = parse_schedule(schedule).first_fire(now_ms)
        if first is None:
            raise InvalidInput("schedule", "never fires", "never_fires")
        shard = shard_for_key(app.id, key, self._topology.shard_count) if key else self._ids.random_shard()
        return Task(
            id=self._ids.mint(shard, now_ms),
            app_id=app.id,
            name=name,
            key=key,
            schedule=schedule,
            callback=callback,
            payload=payload,
            misfire_policy=policy,
            delivery=delivery,
            status=TaskStatus.ACTIVE,
            next_run_at_ms=first,
            version=1,
            fire_count=0,
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
        )

    async def create(self, app: App, request: Any) -> Created:
        now_ms = self._clock.now_ms()
        task = self.build(app, request, now_ms)
        for _ in range(MAX_INSERT_ATTEMPTS):
            try:
                stored = await self._store.insert_task(task)
            except DuplicateKey as duplicate:
                existing = await self._store.get_task(duplicate.existing_task_id)
                if existing is None:  # deleted between the insert and the read: try again
                    continue
                return Created(existing, created=False)
            except Conflict:
                # A task id collision (1 in 4096 per node and millisecond): mint another id.
                task.id = self._ids.mint(shard_of_task_id(task.id), self._clock.now_ms())
                continue
            await self._hotpath.publish(TaskChange.of(stored))
            return Created(stored, created=True)
        raise Conflict(f"could not store task {task.name!r}; retry")

    # ---- read ---------------------------------------------------------------------------------

    async def get(self, app: App, task_id: int) -> Task:
        task = await self._store.get_task(task_id) if self._routable(task_id) else None
        if task is None or task.app_id != app.id:
            raise NotFound("task", task_id)
        return task

    async def flows(self, app: App, task_id: int, limit: int, before_ms: int | None) -> list[Flow]:
        await self.get(app, task_id)
        return await self._store.list_flows(task_id, limit, before_ms)

    # ---- change -------------------------------------------------------------------------------

    async def update(self, app: App, task_id: int, request: Any) -> Task:
        if not isinstance(request, dict):
            raise InvalidInput("body", "must be a JSON object")
        unknown = set(request) - _UPDATE_KEYS
        if unknown:
            raise InvalidInput(sorted(unknown)[0], "unknown field", "unknown_field")
        task = await self.get(app, task_id)
        expected = request.get("version", task.version)
        if not isinstance(expected, int) or isinstance(expected, bool):
            raise InvalidInput("version", "must be an integer")
        now_ms = self._clock.now_ms()
        limits = self._settings.limits
        if "name" in request:
            task.name = check_name(request["name"])
        if "callback" in request:
            task.callback = normalize_callback(request["callback"], limits)
        if "payload" in request:
            check_payload(request["payload"], limits)
            task.payload = request["payload"]
        if "delivery" in request:
            task.delivery = parse_delivery(request["delivery"])
        if "misfire_policy" in request:
            task.misfire_policy = parse_misfire_policy(request["misfire_policy"], task.misfire_policy)
        if "schedule" in request:
            task.schedule = normalize_schedule(
                request["schedule"], now_ms=now_ms, limits=limits, misfire_threshold_ms=self._threshold_ms
            )
            first = parse_schedule(task.schedule).first_fire(now_ms)
            if first is None:
                raise InvalidInput("schedule", "never fires", "never_fires")
            task.next_run_at_ms = first
            task.fire_count = 0
            if task.status is TaskStatus.COMPLETED:
                task.status = TaskStatus.ACTIVE
        task.updated_at_ms = now_ms
        return await self._save(task, expected)

    async def pause(self, app: App, task_id: int) -> Task:
        task = await self.get(app, task_id)
        if task.status is not TaskStatus.ACTIVE:
            return task
        task.status = TaskStatus.PAUSED
        task.updated_at_ms = self._clock.now_ms()
        return await self._save(task, task.version)

    async def resume(self, app: App, task_id: int) -> Task:
        """Resume a paused task at its stored next run; if that passed while paused, the task's
        misfire policy decides what happens at its (immediate) fire."""
        task = await self.get(app, task_id)
        if task.status is not TaskStatus.PAUSED:
            return task
        task.status = TaskStatus.ACTIVE
        task.updated_at_ms = self._clock.now_ms()
        return await self._save(task, task.version)

    async def trigger(self, app: App, task_id: int) -> Flow:
        """A manual fire now, with its own flow; the schedule is untouched."""
        task = await self.get(app, task_id)
        now_ms = self._clock.now_ms()
        flow = Flow(task.id, now_ms, task.app_id, FlowKind.MANUAL, FlowStatus.PENDING, 0, now_ms, now_ms, now_ms)
        stored = await self._store.insert_manual_flow(task.id, flow)
        if self.manual_flow_sink is not None:
            self.manual_flow_sink(task, stored)
        return stored

    async def delete(self, app: App, task_id: int) -> None:
        await self.get(app, task_id)
        await self._store.delete_task(task_id)
        await self._hotpath.publish(TaskChange.deleted(task_id, app.id))

    async def _save(self, task: Task, expected_version: int) -> Task:
        stored = await self._store.update_task(task, expected_version)
        await self._hotpath.publish(TaskChange.of(stored))
        return stored

    def _routable(self, task_id: int) -> bool:
        return task_id > 0 and shard_of_task_id(task_id) < self._topology.shard_count

