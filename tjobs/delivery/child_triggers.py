"""Which children a flow's ending triggers, and with what payload (pure; README "Child tasks").

A flow that ends ``delivered`` triggers its task's ``children.on_success``; one that ends ``dead``, its
``on_failure``; no other ending (cancelled, skipped, unknown) triggers any. The payload is the parent's
result: its run's result where a run reported one; else the body of the newest answer kept with the flow
(parsed as JSON where it is JSON, else the text), unless empty; else ``null``.

An ending that triggers children is written with its flow's ``next_attempt_at`` set to the ending's time:
the marker that its children are still due (a terminal flow has no attempt to come, so the column is free).
:meth:`tjobs.service.child_flows.ChildFlows.ended` clears it once every child flow exists; a node killed in
between leaves it, and the compensator's pass over the shard (:mod:`tjobs.firing.compensator`) triggers
the children again from the stored flow (:func:`ending_of`). The child flow's key makes that exactly once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from tjobs.model import ChildTrigger, Flow, FlowStatus, FlowUpdate, Task


def with_children(task: Task | None, update: FlowUpdate, now_ms: int) -> FlowUpdate:
    """``update`` carrying the :class:`ChildTrigger` its ending makes and the marker that its children are
    due since ``now_ms`` (unchanged where it makes none)."""
    children = None if task is None else task.children
    if not children:
        return update
    if update.status is FlowStatus.DELIVERED:
        task_ids = children.on_success
    elif update.status is FlowStatus.DEAD:
        task_ids = children.on_failure
    else:
        return update
    if not task_ids:
        return update
    assert task is not None
    payload_json = orjson.dumps(result_of(update)).decode()
    trigger = ChildTrigger(task.app_id, task_ids, payload_json)
    return replace(update, next_attempt_at_ms=now_ms, children=trigger)


def ending_of(flow: Flow) -> FlowUpdate:
    """The ending of ``flow`` (terminal, as stored) as the update that wrote it, to trigger its children
    again (:func:`with_children`)."""
    return FlowUpdate(
        flow.task_id,
        flow.scheduled_at_ms,
        flow.status,
        flow.attempts,
        flow.next_attempt_at_ms,
        flow.last_status_code,
        answers=flow.answers,
        run=flow.run,
    )


def result_of(update: FlowUpdate) -> Any:
    """The parent's result handed to its children (see the module docstring)."""
    run = update.run
    if run is not None and run.result is not None:
        return run.result
    if update.answers and update.answers[-1].body:
        body = update.answers[-1].body
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
    return None
