"""A task's schedule as a typed value: one frozen, slotted dataclass per kind, in its canonical form.

The canonical form is what :func:`tjobs.schedules.parsing.parse_schedule_request` makes of a request
(instants as UTC epoch ms, defaults filled in, a delay turned into its instant) and what the store keeps
as JSON in the task's ``schedule`` column::

    CronSpec      {"kind": "cron", "expr", "timezone", "dst_gap", "dst_overlap",
                   ["start_at_ms",] ["end_at_ms",] ["max_fires",] ["jitter_ms",] ["calendar"]}
    IntervalSpec  {"kind": "interval", "every_ms", "start_at_ms", ["end_at_ms",] ["max_fires",] ["jitter_ms",]
                   ["calendar"]}
    AtSpec        {"kind": "at", "at_ms"}
    DelaySpec     {"kind": "delay", "delay_ms", "at_ms"}
    FixedDelaySpec {"kind": "fixed_delay", "delay_ms", "start_at_ms", ["max_fires"]}

The JSON keys are the dataclass field names, in field order, and optional fields are left out when
unset, so :func:`schedule_to_json` writes exactly the bytes the store has always held and
:func:`schedule_from_json` reads every stored row back. Both bounds are inclusive; ``max_fires`` is
enforced by the fire planner. ``jitter_ms`` (recurring kinds) moves each occurrence a reproducible
offset later (:mod:`tjobs.schedules.jitter`); ``calendar`` (recurring kinds) names the app's calendar
whose excluded instants it skips (:mod:`tjobs.schedules.calendars`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from enum import StrEnum
from typing import Any, ClassVar

KIND = "kind"  # the JSON key naming a schedule's kind


class ScheduleKind(StrEnum):
    CRON = "cron"
    INTERVAL = "interval"
    AT = "at"
    DELAY = "delay"
    FIXED_DELAY = "fixed_delay"


class DstGap(StrEnum):
    """What a cron does with a wall time that a spring-forward gap skips (see :mod:`tjobs.schedules.cron`)."""

    SKIP = "skip"
    SHIFT = "shift"


class DstOverlap(StrEnum):
    """What a cron does with a wall time that a fall-back overlap repeats (see :mod:`tjobs.schedules.cron`)."""

    ONCE = "once"
    TWICE = "twice"


@dataclass(frozen=True, slots=True)
class CronSpec:
    kind: ClassVar[ScheduleKind] = ScheduleKind.CRON

    expr: str
    timezone: str = "UTC"
    dst_gap: DstGap = DstGap.SKIP
    dst_overlap: DstOverlap = DstOverlap.ONCE
    start_at_ms: int | None = None
    end_at_ms: int | None = None
    max_fires: int | None = None
    jitter_ms: int | None = None
    calendar: str | None = None

    def __post_init__(self) -> None:
        # a stored row holds the policies as their strings
        if type(self.dst_gap) is not DstGap:
            object.__setattr__(self, "dst_gap", DstGap(self.dst_gap))
        if type(self.dst_overlap) is not DstOverlap:
            object.__setattr__(self, "dst_overlap", DstOverlap(self.dst_overlap))


@dataclass(frozen=True, slots=True)
class IntervalSpec:
    """Fires at ``start_at_ms + k * every_ms``; the anchor is always set (registration fills it in)."""

    kind: ClassVar[ScheduleKind] = ScheduleKind.INTERVAL

    every_ms: int
    start_at_ms: int
    end_at_ms: int | None = None
    max_fires: int | None = None
    jitter_ms: int | None = None
    calendar: str | None = None


@dataclass(frozen=True, slots=True)
class AtSpec:
    kind: ClassVar[ScheduleKind] = ScheduleKind.AT
    max_fires: ClassVar[None] = None  # a one-shot fires once

    at_ms: int


@dataclass(frozen=True, slots=True)
class DelaySpec:
    """A delay as registered (``delay_ms``) and the instant it came to (``at_ms``)."""

    kind: ClassVar[ScheduleKind] = ScheduleKind.DELAY
    max_fires: ClassVar[None] = None

    delay_ms: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class FixedDelaySpec:
    """Fires first at ``start_at_ms`` (registration fills it in: ``now + delay_ms``), then each time
    ``delay_ms`` after the previous run ended (:mod:`tjobs.schedules.fixed_delay`)."""

    kind: ClassVar[ScheduleKind] = ScheduleKind.FIXED_DELAY

    delay_ms: int
    start_at_ms: int
    max_fires: int | None = None


ScheduleSpec = CronSpec | IntervalSpec | AtSpec | DelaySpec | FixedDelaySpec

SPEC_OF_KIND: dict[ScheduleKind, type[ScheduleSpec]] = {
    spec.kind: spec for spec in (CronSpec, IntervalSpec, AtSpec, DelaySpec, FixedDelaySpec)
}
_SPEC_OF_NAME: dict[str, type[ScheduleSpec]] = {kind.value: spec for kind, spec in SPEC_OF_KIND.items()}
_FIELDS: dict[type[ScheduleSpec], tuple[str, ...]] = {
    spec: tuple(f.name for f in fields(spec)) for spec in SPEC_OF_KIND.values()
}
_KIND_NAME: dict[type[ScheduleSpec], str] = {spec: spec.kind.value for spec in SPEC_OF_KIND.values()}  # no enum lookup
# each field's name and default (MISSING: required), in the order the spec takes them
_READ: dict[type[ScheduleSpec], tuple[tuple[str, Any], ...]] = {
    spec: tuple((f.name, f.default) for f in fields(spec)) for spec in SPEC_OF_KIND.values()
}


def schedule_to_json(spec: ScheduleSpec) -> dict[str, Any]:
    """The stored JSON object of ``spec`` (see the module docstring for its keys and their order)."""
    if type(spec) is AtSpec:  # a one-shot: its own path (a batch renders it twice per task: its row, the answer)
        return {KIND: "at", "at_ms": spec.at_ms}
    kind = type(spec)
    stored: dict[str, Any] = {KIND: _KIND_NAME[kind]}
    for name in _FIELDS[kind]:
        value = getattr(spec, name)
        if value is not None:
            stored[name] = value.value if isinstance(value, StrEnum) else value
    return stored


def schedule_from_json(stored: dict[str, Any]) -> ScheduleSpec:
    """The spec of a stored schedule object (trusted: it was validated when the task was registered).

    Unknown keys are ignored and optional keys may be missing (older rows); a row without its kind or
    a required field raises ``ValueError``.
    """
    spec = _SPEC_OF_NAME.get(stored.get(KIND))  # type: ignore[arg-type]
    if spec is None:
        raise ValueError(f"not a stored schedule: {stored!r}")
    values = [stored.get(name, default) for name, default in _READ[spec]]
    if MISSING in values:
        missing = [name for name, default in _READ[spec] if default is MISSING and name not in stored]
        raise ValueError(f"stored {spec.kind} schedule without {missing}: {stored!r}")
    return spec(*values)
