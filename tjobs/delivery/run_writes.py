"""Writing a run's transition (:mod:`tjobs.delivery.run_reports`) and what follows it, for every writer:
the API's reports and cancels (:mod:`tjobs.service.runs`) and the compensator's timeouts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from tjobs.delivery.child_triggers import with_children
from tjobs.delivery.run_reports import Transition
from tjobs.hot_tier.base import TaskChange
from tjobs.model import Flow, FlowUpdate, Task
from tjobs.observability.observer import NO_OBSERVER, FireObserver
from tjobs.stores.contracts.runs import RunRecords
from tjobs.stores.flow_documents import MAX_ERROR_CHARS

logger = logging.getLogger(__name__)


async def write_transition(
    store: RunRecords,
    transition: Transition,
    task: Task | None,
    flow: Flow,
    now_ms: int,
    flow_sink: Callable[[Task, Flow], None] | None,
    task_changes: Callable[[TaskChange], Awaitable[None]] | None,
    *,
    ended: Callable[[FlowUpdate], Awaitable[None]] | None = None,
    observer: FireObserver = NO_OBSERVER,
) -> FlowUpdate | None:
    """Write ``transition`` of ``flow`` (as it was read) where the flow is still as read; once written,
    hand a retry to delivery (``flow_sink``), tell a fixed_delay task's next run to its owner
    (``task_changes``) and an ending that triggers children to ``ended`` (:mod:`tjobs.service.child_flows`);
    tell ``observer`` the flow's new status, as the deliverer tells its outcomes, so the service levels
    count a run's end (delivered, dead), never its ``202``. Returns the update as written (with its
    children's marker); ``None``: another writer came first, nothing was written."""
    update = with_children(task, transition.update, now_ms)  # written with the marker that its children are due
    if not await store.write_run(transition.expected, update, now_ms, expected_attempts=transition.expected_attempts):
        return None
    await after_write(transition, update, task, flow, now_ms, flow_sink, task_changes, ended=ended, observer=observer)
    return update


async def after_write(
    transition: Transition,
    update: FlowUpdate,
    task: Task | None,
    flow: Flow,
    now_ms: int,
    flow_sink: Callable[[Task, Flow], None] | None,
    task_changes: Callable[[TaskChange], Awaitable[None]] | None,
    *,
    ended: Callable[[FlowUpdate], Awaitable[None]] | None = None,
    observer: FireObserver = NO_OBSERVER,
) -> None:
    """What follows ``update`` (``transition``'s, with its children's marker) once written: see
    :func:`write_transition`; a report written by :meth:`RunRecords.decide_run` comes here directly."""
    try:
        observer.flow_update(flow.app_id, update)
    except Exception:
        logger.exception("observer failed", extra={"action": "hook_failed", "flow_id": flow.id})
    moved = update.reschedule
    if moved is not None and task_changes is not None:
        try:
            await task_changes(TaskChange(update.task_id, moved.app_id, moved.next_run_at_ms, moved.version))
        except Exception:  # the store holds the truth: the cycle load or the park still fires it
            logger.exception("telling a fixed_delay task's next run failed", extra={"action": "hook_failed"})
    if ended is not None and update.children is not None:
        await ended(update)
    if transition.redrive and task is not None and flow_sink is not None:
        retry = replace(
            flow,
            status=update.status,
            attempts=update.attempts,
            next_attempt_at_ms=update.next_attempt_at_ms,
            last_error=update.last_error,
            run=update.run,
            updated_at_ms=now_ms,
        )
        flow_sink(task, retry)


def written(flow: Flow, update: FlowUpdate, now_ms: int) -> Flow:
    """``flow`` (as read) once ``update`` is written on it: what :meth:`RunRecords.write_run` sets (status,
    attempts, next attempt, the error clipped, the run when given, ``updated_at_ms``), without reading it back."""
    return replace(
        flow,
        status=update.status,
        attempts=update.attempts,
        next_attempt_at_ms=update.next_attempt_at_ms,
        last_error=None if update.last_error is None else update.last_error[:MAX_ERROR_CHARS],
        run=flow.run if update.run is None else update.run,
        updated_at_ms=now_ms,
    )
