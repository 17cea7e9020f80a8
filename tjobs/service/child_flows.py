"""Child flows (README "Child tasks"): once a parent's ending is written, each child it names gets a
manual flow at the parent's instant, whose payload is the parent's result.

The child flow's key is (child task, parent's instant), so the flows table's primary key makes a second
trigger of it (an ending written twice, two nodes, a retried hook) a no-op, and a cycle that two
concurrent edits closed stops where it reaches a task again at that instant. Its delivery budget counts
from the trigger, as a backfilled flow's (:meth:`tjobs.service.tasks.TaskService.backfill_flow`). A child
deleted meanwhile, or of another app, is passed over; a child whose callback sends its own body (or is a
``GET``) sends that, not the payload.

**Fan-in.** A child that several tasks name in their ``on_success`` (the reverse index,
:mod:`tjobs.service.child_links`) runs once per instant, when every one of them has a ``delivered`` flow at
that instant; its payload is then ``{parent task id: result}``. Each parent's ending looks at the others'
flows at its instant after its own write is committed, so the last one to end sees them all (two that end
together may both see it: the key makes that one flow). A parent with no flow at the instant holds the child
back while it is active (its flow is still to come); a paused or completed one is left out. A parent whose
flow at the instant ended otherwise (``dead``, ``skipped``, ``cancelled``, ``unknown``) means the child does
not run at that instant, as a DAG node does not run after a failed upstream; its flow, retried from the dead
letters and delivered, ends again and lets the child run. ``on_failure`` children are never joined: any
parent's ``dead`` ending triggers one (the first wins the instant's key).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from sharding import shard_of_task_id
from tjobs.delivery.child_triggers import ending_of, result_of
from tjobs.model import App, Flow, FlowKind, FlowStatus, FlowUpdate, TaskChildren, TaskStatus, flow_id
from tjobs.service.child_links import parent_naming
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.task_parents import TaskParentRecords

if TYPE_CHECKING:
    from tjobs.service.tasks import TaskService

logger = logging.getLogger(__name__)
_NONE = TaskChildren()


class ChildFlows:
    """Triggers the children an ending names (:attr:`tjobs.model.FlowUpdate.children`)."""

    def __init__(self, store: TaskStore, shard_count: int, parents: TaskParentRecords | None = None) -> None:
        """``parents``: the reverse index of child tasks (``None``: no child is joined)."""
        self._store = store
        self._shard_count = shard_count
        self._parents = parents
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
            parents: dict[int, TaskChildren] = {}
            if update.status is FlowStatus.DELIVERED and self._parents is not None:  # on_success: joined
                parents = await self._parents.parents_of(trigger.task_ids)
            for child_id in trigger.task_ids:
                payload_json: str | None = trigger.payload_json  # a single parent's result
                others = tuple(p for p in parents.get(child_id, _NONE).on_success if p != update.task_id)
                if others:
                    payload_json = await self._joined(update, child_id, others)
                if payload_json is not None:
                    await self._trigger(child_id, trigger.app_id, payload_json, update.scheduled_at_ms, parent)
            await self._store.clear_children_due(update.task_id, update.scheduled_at_ms)
        except Exception:
            logger.exception(
                "triggering the children of flow %s failed; the compensator tries again",
                parent,
                extra={"action": "child_flow_failed", "flow_id": parent},
            )

    async def _joined(self, update: FlowUpdate, child_id: int, others: tuple[int, ...]) -> str | None:
        """The payload of fan-in child ``child_id`` once ``update``'s ending and ``others`` (its other
        ``on_success`` parents as indexed) let it run at the ending's instant; ``None`` while it waits, or
        where it does not run there (see the module docstring)."""
        assert update.children is not None
        app_id, at_ms = update.children.app_id, update.scheduled_at_ms
        results: dict[int, Any] = {update.task_id: orjson.loads(update.children.payload_json)}
        several = False
        for other in others:
            task = await parent_naming(self._store, self._routable, app_id, other, child_id, "on_success")
            if task is None:
                continue  # a stale row: it no longer names the child
            several = True
            flow = await self._store.get_flow(other, at_ms)
            if flow is None and task.status is TaskStatus.ACTIVE:
                return None  # its flow at this instant is still to come: its ending joins
            if flow is None:
                continue  # paused or completed: left out
            if flow.status is not FlowStatus.DELIVERED:
                return None  # open (its ending joins), or ended otherwise: no child at this instant
            results[other] = result_of(ending_of(flow))
        if not several:
            return update.children.payload_json
        return orjson.dumps({str(task_id): results[task_id] for task_id in sorted(results)}).decode()

    def _routable(self, task_id: int) -> bool:
        return task_id > 0 and shard_of_task_id(task_id) < self._shard_count

    async def triggered_by(self, flow: Flow) -> list[str]:
        """The ids of the child flows ``flow``'s ending triggered (its task's children, as they are now,
        that have a manual flow at its instant), in the order its task names them."""
        task = await self._store.get_task(flow.task_id)
        if task is None or not task.children or not flow.status.terminal:
            return []
        found: list[str] = []
        for child_id in task.children.all:
            if not self._routable(child_id):
                continue
            child = await self._store.get_flow(child_id, flow.scheduled_at_ms)
            if child is not None and child.kind is FlowKind.MANUAL and child.app_id == flow.app_id:
                found.append(child.id)
        return found

    async def triggering(self, flow: Flow) -> list[str]:
        """The ids of the parent flows whose endings triggered ``flow`` (a manual flow): its task's parents,
        as they are now, whose flow at its instant ended as their relation asks (``delivered`` for
        ``on_success``, ``dead`` for ``on_failure``), by relation then id."""
        if flow.kind is not FlowKind.MANUAL or self._parents is None:
            return []
        recorded = (await self._parents.parents_of([flow.task_id])).get(flow.task_id)
        found: list[str] = []
        for relation, ending in (("on_success", FlowStatus.DELIVERED), ("on_failure", FlowStatus.DEAD)):
            for parent_id in () if recorded is None else getattr(recorded, relation):
                if await parent_naming(self._store, self._routable, flow.app_id, parent_id, flow.task_id, relation):
                    parent = await self._store.get_flow(parent_id, flow.scheduled_at_ms)
                    if parent is not None and parent.status is ending:
                        found.append(parent.id)
        return found

    async def _trigger(self, child_id: int, app_id: str, payload_json: str, at_ms: int, parent: str) -> None:
        assert self._tasks is not None and self._app_of is not None
        if not self._routable(child_id):
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
