"""Which children a flow's ending triggers, and with what payload (pure; README "Child tasks").

A flow that ends ``delivered`` triggers its task's ``children.on_success``; one that ends ``dead``, its
``on_failure``; no other ending (cancelled, skipped, unknown) triggers any. The payload is the parent's
result: its run's result where a run reported one; else the body of the newest answer kept with the flow
(parsed as JSON where it is JSON, else the text), unless empty; else ``null``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from tjobs.model import ChildTrigger, FlowStatus, FlowUpdate, Task


def with_children(task: Task | None, update: FlowUpdate) -> FlowUpdate:
    """``update`` carrying the :class:`ChildTrigger` its ending makes (unchanged where it makes none)."""
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
    return replace(update, children=ChildTrigger(task.app_id, task_ids, payload_json))


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
