"""Child flows (README "Child tasks"): once a parent's ending is written, each child it names gets a
manual flow at the parent's instant, whose payload is the parent's result.

The child flow's key is (child task, parent's instant), so the flows table's primary key makes a second
trigger of it (an ending written twice, two nodes, a retried hook) a no-op, and a cycle that two
concurrent edits closed stops where it reaches a task again at that instant. Its delivery budget counts
from the trigger, as a backfilled flow's (:meth:`tjobs.service.tasks.TaskService.backfill_flow`). A child
deleted meanwhile, or of another app, is passed over; a child whose callback sends its own body (or is a
``GET``) sends that, not the payload.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sharding import shard_of_task_id
from tjobs.model import App, Flow, FlowKind, FlowUpdate, flow_id
from tjobs.stores.base import TaskStore

if TYPE_CHECKING:
    from tjobs.service.tasks import TaskService

logger = logging.getLogger(__name__)


class ChildFlows:
    """Triggers the children an ending names (:attr:`tjobs.model.FlowUpdate.children`)."""

    def __init__(self, store: TaskStore, shard_count: int) -> None:
        self._store = store
        self._shard_count = shard_count
        self._tasks: TaskService | None = None
        self._app_of: Callable[[str], Awaitable[App]] | None = None
        self.triggered = 0

    def bind(self, tasks: TaskService, app_of: Callable[[str], Awaitable[App]]) -> None:
        """The task service that stores and hands over each child flow, and the app directory (both made
        after the deliverer, which calls :meth:`ended`)."""
        self._tasks = tasks
        self._app_of = app_of

    async def ended(self, update: FlowUpdate) -> None:
        """``update`` was written: trigger the children it names (none: nothing), then clear the parent's
        marker that they are due (:mod:`tjobs.delivery.child_triggers`). A failure is logged, never raised:
        the parent's ending stands, and its marker, left, has the compensator trigger them again."""
        trigger = update.children
        if trigger is None or self._tasks is None or self._app_of is None:
            return
        parent = flow_id(update.task_id, update.scheduled_at_ms)
        try:
            for child_id in trigger.task_ids:
                await self._trigger(child_id, trigger.app_id, trigger.payload_json, update.scheduled_at_ms, parent)
            await self._store.clear_children_due(update.task_id, update.scheduled_at_ms)
        except Exception:
            logger.exception(
                "triggering the children of flow %s failed; the compensator tries again",
                parent,
                extra={"action": "child_flow_failed", "flow_id": parent},
            )

    async def triggered_by(self, flow: Flow) -> list[str]:
        """The ids of the child flows ``flow``'s ending triggered (its task's children, as they are now,
        that have a manual flow at its instant), in the order its task names them."""
        task = await self._store.get_task(flow.task_id)
        if task is None or not task.children or not flow.status.terminal:
            return []
        found: list[str] = []
        for child_id in task.children.all:
            if child_id <= 0 or shard_of_task_id(child_id) >= self._shard_count:
                continue
            child = await self._store.get_flow(child_id, flow.scheduled_at_ms)
            if child is not None and child.kind is FlowKind.MANUAL and child.app_id == flow.app_id:
                found.append(child.id)
        return found

    async def _trigger(self, child_id: int, app_id: str, payload_json: str, at_ms: int, parent: str) -> None:
        assert self._tasks is not None and self._app_of is not None
        if child_id <= 0 or shard_of_task_id(child_id) >= self._shard_count:
            return
        child = await self._store.get_task(child_id)
        if child is None or child.app_id != app_id:
            return
        app = await self._app_of(app_id)
        payload = payload_json if child.callback.sends_payload else None
        stored = await self._tasks.backfill_flow(app, child, at_ms, payload)
        if stored is None:
            return  # triggered already (the key is the child and the parent's instant)
        self.triggered += 1
        logger.info(
            "flow %s triggered child flow %s",
            parent,
            stored.id,
            extra={"action": "child_flow_triggered", "flow_id": stored.id},
        )
