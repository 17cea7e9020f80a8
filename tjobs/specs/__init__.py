"""A task's specs as typed values: its schedule (:mod:`~tjobs.specs.schedule`) and its callback
(:mod:`~tjobs.specs.callback`).

They are parsed once at the edge from a request (:func:`tjobs.schedules.parsing.parse_schedule_request`,
:func:`tjobs.service.validation.parse_callback_request`), travel typed through :class:`tjobs.model.Task`,
the stores, the fire planner and delivery, and are kept as JSON in the task's ``schedule`` and
``callback`` columns. :func:`schedule_from_text` and :func:`callback_from_text` read those columns;
they remember recent texts, because a fire reads its task's row again inside the fire transaction
and most tasks' callbacks (and recurring tasks' schedules) repeat from fire to fire. The specs are
immutable, so one parsed value can be shared.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Generic, TypeVar

import orjson

from tjobs.specs.callback import CallbackSpec, callback_from_json, callback_to_json
from tjobs.specs.schedule import (
    AtSpec,
    CronSpec,
    DelaySpec,
    DstGap,
    DstOverlap,
    FixedDelaySpec,
    IntervalSpec,
    ScheduleKind,
    ScheduleSpec,
    schedule_from_json,
    schedule_to_json,
)

__all__ = [
    "AtSpec",
    "CallbackSpec",
    "CronSpec",
    "DelaySpec",
    "DstGap",
    "DstOverlap",
    "FixedDelaySpec",
    "IntervalSpec",
    "ScheduleKind",
    "ScheduleSpec",
    "callback_from_json",
    "callback_from_text",
    "callback_to_json",
    "callback_to_text",
    "schedule_from_json",
    "schedule_from_text",
    "schedule_to_json",
    "schedule_to_text",
]

SPEC_CACHE_SIZE = 4096  # distinct column texts remembered per kind of spec


@lru_cache(maxsize=SPEC_CACHE_SIZE)
def schedule_from_text(text: str | bytes) -> ScheduleSpec:
    """The spec of a stored ``schedule`` column."""
    return schedule_from_json(orjson.loads(text))


@lru_cache(maxsize=SPEC_CACHE_SIZE)
def callback_from_text(text: str | bytes) -> CallbackSpec:
    """The spec of a stored ``callback`` column."""
    return callback_from_json(orjson.loads(text))


def schedule_to_text(spec: ScheduleSpec) -> str:
    """The ``schedule`` column of ``spec``: the same bytes a task registered before typed specs holds."""
    return orjson.dumps(schedule_to_json(spec)).decode()


def callback_to_text(spec: CallbackSpec) -> str:
    """The ``callback`` column of ``spec``: the same bytes a task registered before typed specs holds."""
    return orjson.dumps(callback_to_json(spec)).decode()


T = TypeVar("T")


class RenderedOnce(Generic[T]):
    """``render(spec)`` made once per callback spec object, for the rows of one statement or the items of
    one answer: the tasks of a batch share their callback's spec (:mod:`tjobs.service.task_batches`).
    Keyed by the spec's ``id``, the spec held beside its rendering, so an ``id`` is not reused while
    this lives."""

    __slots__ = ("_render", "_seen")

    def __init__(self, render: Callable[[CallbackSpec], T]) -> None:
        self._render = render
        self._seen: dict[int, tuple[CallbackSpec, T]] = {}

    def __call__(self, spec: CallbackSpec) -> T:
        known = self._seen.get(id(spec))
        if known is not None and known[0] is spec:
            return known[1]
        rendered = self._render(spec)
        self._seen[id(spec)] = (spec, rendered)
        return rendered
