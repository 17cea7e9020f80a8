"""Schedule specs: parsing what the API receives into a typed spec, and the schedule of a spec.

The API shape (``schedule`` of ``POST /v1/tasks``, README "Using it"; declared once in
:mod:`tjobs.wire`) and the canonical spec (:mod:`tjobs.specs.schedule`) that
:func:`parse_schedule_request` makes of it, shown as the JSON the store keeps::

    {"kind": "cron", "expr": "0 9 * * *", "timezone": "Asia/Shanghai",     # timezone default "UTC"
     "dst_gap": "skip" | "shift", "dst_overlap": "once" | "twice"}          # defaults skip, once
        -> the same, defaults filled in, expr whitespace-normalised
    {"kind": "interval", "every_ms": 30000, "start_at": "2026-11-21T00:00:00Z"}
        -> {"kind": "interval", "every_ms": 30000, "start_at_ms": ...}
    {"kind": "at", "at": "2026-11-21T17:00:00+08:00"}  or  {"kind": "at", "at_ms": 1795251600000}
        -> {"kind": "at", "at_ms": ...}
    {"kind": "delay", "delay_ms": 1800000}
        -> {"kind": "delay", "delay_ms": 1800000, "at_ms": now + 1800000}
    {"kind": "fixed_delay", "delay_ms": 60000[, "start_at": ...][, "max_fires": n]}
        -> {"kind": "fixed_delay", "delay_ms": 60000, "start_at_ms": start or now + 60000[, "max_fires": n]}

A fixed_delay's ``delay_ms`` is within ``MIN_FIXED_DELAY_MS``..``MAX_FIXED_DELAY_MS`` (1 s .. 366 days);
it takes no ``end_at``, ``jitter_ms`` or ``calendar`` (its instants depend on when runs end).

Recurring kinds (cron, interval) also take ``start_at`` / ``end_at`` (ISO-8601 with an offset, or
``start_at_ms`` / ``end_at_ms``; both bounds inclusive), stored as ``*_ms``, ``max_fires`` (a
positive int, enforced by the fire planner) and ``jitter_ms`` (0..``MAX_JITTER_MS`` and at most the
period: an interval's ``every_ms``, the smallest gap between a cron's first 256 fires; 0 is stored as
absent; see :mod:`tjobs.schedules.jitter`) and ``calendar`` (the name of one of the app's calendars,
:mod:`tjobs.schedules.calendars`; whether the app has it is the task service's check). An interval
without a start is anchored at registration
and fires first one period later (``start_at_ms = now + every_ms``); with a start it fires first at
the start itself. A stored cron, interval or at object validates to itself, so such a task read back
can be written back; a stored delay carries its computed ``at_ms``, which a delay request does not take.

Limits (:class:`~tjobs.settings.LimitSettings`): an ``at`` may be at most ``misfire_threshold_ms`` in
the past; nothing may start more than ``max_future_days`` ahead; an interval's ``every_ms`` and the
gaps between a cron's first 256 consecutive fires must be at least ``min_period_ms`` (a 6-field
``* * * * * *`` is 1 s apart, allowed at the default 1000 ms); a cron must fire within
``max_future_days`` of its start (``0 0 30 2 *`` never does).

Every rejection is an :class:`~tjobs.errors.InvalidInput` whose ``field`` is the dotted path of the
offending key (``schedule.expr``) and whose ``code`` is one of: ``invalid_type``, ``missing``,
``unknown_field``, ``unknown_kind``, ``invalid_cron``, ``unknown_timezone``, ``invalid_choice``,
``invalid_instant``, ``ambiguous``, ``out_of_range``, ``too_frequent``, ``in_past``, ``too_far``,
``never_fires``, ``jitter_too_large``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, TypeVar, get_args

from tjobs.errors import InvalidInput
from tjobs.schedules.base import Schedule
from tjobs.schedules.calendars import CalendarSchedule
from tjobs.schedules.cron import CronSchedule
from tjobs.schedules.cronexpr import CronSyntaxError, parse_cron
from tjobs.schedules.fixed_delay import FixedDelaySchedule
from tjobs.schedules.instants import parse_iso_instant_ms
from tjobs.schedules.interval import IntervalSchedule
from tjobs.schedules.jitter import JitteredSchedule
from tjobs.schedules.oneshot import OneShotSchedule
from tjobs.schedules.zones import is_known_zone
from tjobs.settings import LimitSettings
from tjobs.specs import (
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
from tjobs.specs.calendar import CalendarRules
from tjobs.specs.schedule import KIND
from tjobs.wire import (
    CALENDAR_NAME_PATTERN,
    MAX_FIXED_DELAY_MS,
    MAX_JITTER_MS,
    MIN_FIXED_DELAY_MS,
    SCHEDULE_SHAPES,
)

_KIND_OF = {kind.value: kind for kind in ScheduleKind}
MS_PER_DAY = 86_400_000
PERIOD_SAMPLE_FIRES = 256  # consecutive cron fires inspected for the minimum period
_CALENDAR_NAME = re.compile(CALENDAR_NAME_PATTERN)

# the keys each kind of request takes, as tjobs.wire declares them
_KEYS: dict[ScheduleKind, frozenset[str]] = {
    ScheduleKind(get_args(shape.model_fields[KIND].annotation)[0]): frozenset(shape.model_fields)
    for shape in SCHEDULE_SHAPES
}


def normalize_schedule(spec: Any, *, now_ms: int, limits: LimitSettings, misfire_threshold_ms: int) -> dict[str, Any]:
    """The stored JSON of :func:`parse_schedule_request`'s spec (see the module docs)."""
    return schedule_to_json(
        parse_schedule_request(spec, now_ms=now_ms, limits=limits, misfire_threshold_ms=misfire_threshold_ms)
    )


def parse_schedule_request(spec: Any, *, now_ms: int, limits: LimitSettings, misfire_threshold_ms: int) -> ScheduleSpec:
    """Validate a user's schedule request and return its canonical spec (see the module docs)."""
    if not isinstance(spec, dict):
        raise InvalidInput("schedule", "must be a JSON object", "invalid_type")
    kind_value = spec.get(KIND)
    if kind_value is None:
        raise InvalidInput("schedule.kind", "is required", "missing")
    if not isinstance(kind_value, str) or kind_value not in _KEYS:
        choices = ", ".join(k.value for k in ScheduleKind)
        raise InvalidInput("schedule.kind", f"must be one of {choices}", "unknown_kind")
    kind = _KIND_OF[kind_value]
    keys = _KEYS[kind]
    if not keys.issuperset(spec):
        unknown = sorted(str(key) for key in spec if key not in keys)
        raise InvalidInput(f"schedule.{unknown[0]}", f"is not a field of a {kind} schedule", "unknown_field")
    horizon_ms = now_ms + limits.max_future_days * MS_PER_DAY
    if kind is ScheduleKind.AT:
        return _normalize_at(spec, now_ms, horizon_ms, misfire_threshold_ms)
    if kind is ScheduleKind.DELAY:
        delay_ms = _int(spec, "delay_ms", required=True)
        assert delay_ms is not None
        if delay_ms < 0:
            raise InvalidInput("schedule.delay_ms", "must not be negative", "out_of_range")
        if now_ms + delay_ms > horizon_ms:
            raise InvalidInput("schedule.delay_ms", f"is more than {limits.max_future_days} days", "too_far")
        return DelaySpec(delay_ms=delay_ms, at_ms=now_ms + delay_ms)
    if kind is ScheduleKind.INTERVAL:
        return _normalize_interval(spec, now_ms, horizon_ms, limits)
    if kind is ScheduleKind.FIXED_DELAY:
        return _normalize_fixed_delay(spec, now_ms, horizon_ms)
    return _normalize_cron(spec, now_ms, horizon_ms, limits)


def schedule_of(spec: ScheduleSpec, seed: int | None = None, calendar: CalendarRules | None = None) -> Schedule:
    """The :class:`Schedule` (the fire math) of a spec: its nominal instants, less those ``calendar``
    (the rules of the calendar the spec names) excludes in the schedule's zone
    (:class:`~tjobs.schedules.calendars.CalendarSchedule`); with ``seed`` (the task id) the instants
    its task fires at, jittered when the spec has ``jitter_ms``
    (:class:`~tjobs.schedules.jitter.JitteredSchedule`).

    Cheap enough for the fire path: cron schedules (and their parsed expressions and zones) are cached,
    and so are compiled calendars.
    """
    nominal = _nominal_schedule(spec)
    kept = None if calendar is None else CalendarSchedule(nominal, calendar, schedule_zone(spec))
    jitter_ms = getattr(spec, "jitter_ms", None)
    if seed is None or not jitter_ms:
        return kept or nominal
    return JitteredSchedule(nominal, jitter_ms, seed, kept)


def schedule_zone(spec: ScheduleSpec) -> str:
    """The IANA zone a schedule's wall times (and its calendar's) are read in: a cron's own, else UTC."""
    return spec.timezone if type(spec) is CronSpec else "UTC"


def _nominal_schedule(spec: ScheduleSpec) -> Schedule:
    if type(spec) is CronSpec:
        return _cron_schedule(
            spec.expr, spec.timezone, spec.dst_gap, spec.dst_overlap, spec.start_at_ms, spec.end_at_ms, spec.max_fires
        )
    if type(spec) is IntervalSpec:
        return IntervalSchedule(spec.every_ms, spec.start_at_ms, spec.end_at_ms, spec.max_fires)
    if type(spec) is AtSpec or type(spec) is DelaySpec:
        return OneShotSchedule(spec.kind, spec.at_ms)
    if type(spec) is FixedDelaySpec:
        return FixedDelaySchedule(spec.delay_ms, spec.start_at_ms, spec.max_fires)
    raise TypeError(f"not a schedule spec: {spec!r}")


def parse_schedule(stored: dict[str, Any]) -> Schedule:
    """The :class:`Schedule` of a stored schedule object (trusted: it passed validation)."""
    return schedule_of(schedule_from_json(stored))


@lru_cache(maxsize=65_536)
def _cron_schedule(
    expr: str,
    timezone: str,
    dst_gap: DstGap,
    dst_overlap: DstOverlap,
    start_at_ms: int | None,
    end_at_ms: int | None,
    max_fires: int | None,
) -> CronSchedule:
    return CronSchedule(expr, timezone, dst_gap, dst_overlap, start_at_ms, end_at_ms, max_fires)


# ---- per kind ------------------------------------------------------------------------------------


def _normalize_at(spec: dict[str, Any], now_ms: int, horizon_ms: int, misfire_threshold_ms: int) -> AtSpec:
    at_ms = _instant(spec, "at")
    if at_ms is None:
        raise InvalidInput("schedule.at", "is required (or at_ms)", "missing")
    field = "schedule.at" if "at" in spec else "schedule.at_ms"
    if at_ms < now_ms - misfire_threshold_ms:
        raise InvalidInput(field, f"is {(now_ms - at_ms) // 1000} s in the past", "in_past")
    if at_ms > horizon_ms:
        raise InvalidInput(field, "is too far in the future", "too_far")
    return AtSpec(at_ms=at_ms)


def _normalize_interval(spec: dict[str, Any], now_ms: int, horizon_ms: int, limits: LimitSettings) -> IntervalSpec:
    every_ms = _int(spec, "every_ms", required=True)
    assert every_ms is not None
    if every_ms < limits.min_period_ms:
        raise InvalidInput("schedule.every_ms", f"must be at least {limits.min_period_ms} ms", "too_frequent")
    if every_ms > limits.max_future_days * MS_PER_DAY:
        raise InvalidInput("schedule.every_ms", f"is more than {limits.max_future_days} days", "too_far")
    start_ms, end_ms, max_fires = _bounds(spec, horizon_ms)
    jitter_ms = _jitter(spec, every_ms)
    start = start_ms if start_ms is not None else now_ms + every_ms
    interval = IntervalSpec(every_ms, start, end_ms, max_fires, jitter_ms, _calendar(spec))
    if schedule_of(interval).first_fire(now_ms) is None:
        raise InvalidInput("schedule.end_at", "is before the first occurrence", "never_fires")
    return interval


def _normalize_fixed_delay(spec: dict[str, Any], now_ms: int, horizon_ms: int) -> FixedDelaySpec:
    delay_ms = _int(spec, "delay_ms", required=True)
    assert delay_ms is not None
    if not MIN_FIXED_DELAY_MS <= delay_ms <= MAX_FIXED_DELAY_MS:
        raise InvalidInput(
            "schedule.delay_ms",
            f"must be within {MIN_FIXED_DELAY_MS}..{MAX_FIXED_DELAY_MS} (1 s .. 366 days)",
            "out_of_range",
        )
    start_ms, _, max_fires = _bounds(spec, horizon_ms)
    return FixedDelaySpec(delay_ms, start_ms if start_ms is not None else now_ms + delay_ms, max_fires)


def _normalize_cron(spec: dict[str, Any], now_ms: int, horizon_ms: int, limits: LimitSettings) -> CronSpec:
    expr = spec.get("expr")
    if expr is None:
        raise InvalidInput("schedule.expr", "is required", "missing")
    if not isinstance(expr, str):
        raise InvalidInput("schedule.expr", "must be a string", "invalid_type")
    expr = " ".join(expr.split())
    try:
        parse_cron(expr)
    except CronSyntaxError as exc:
        code = "never_fires" if exc.code == "never_fires" else "invalid_cron"
        raise InvalidInput("schedule.expr", f"{exc} ({expr!r})", code) from None
    timezone = _str(spec, "timezone", "UTC")
    if not is_known_zone(timezone):
        raise InvalidInput("schedule.timezone", f"{timezone!r} is not an IANA time zone", "unknown_timezone")
    dst_gap = _choice(spec, "dst_gap", DstGap, DstGap.SKIP)
    dst_overlap = _choice(spec, "dst_overlap", DstOverlap, DstOverlap.ONCE)
    start_ms, end_ms, max_fires = _bounds(spec, horizon_ms)

    schedule = CronSchedule(expr, timezone, dst_gap, dst_overlap, start_ms)  # no end: see why it never fires
    first = schedule.first_fire(now_ms)
    if first is None or first > max(now_ms, start_ms or now_ms) + limits.max_future_days * MS_PER_DAY:
        raise InvalidInput("schedule.expr", f"has no occurrence within {limits.max_future_days} days", "never_fires")
    if end_ms is not None and first > end_ms:
        raise InvalidInput("schedule.end_at", "is before the first occurrence", "never_fires")
    period_ms = _check_cron_period(schedule, first, limits.min_period_ms)
    jitter_ms = _jitter(spec, period_ms)
    return CronSpec(expr, timezone, dst_gap, dst_overlap, start_ms, end_ms, max_fires, jitter_ms, _calendar(spec))


def _check_cron_period(schedule: CronSchedule, first_ms: int, min_period_ms: int) -> int | None:
    """Reject a cron whose consecutive fires come closer than ``min_period_ms`` (sampled); the
    smallest gap sampled (``None`` if it fires once)."""
    previous, smallest = first_ms, None
    for _ in range(PERIOD_SAMPLE_FIRES):
        nxt = schedule.next_unbounded(previous)
        if nxt is None:
            break
        if nxt - previous < min_period_ms:
            raise InvalidInput(
                "schedule.expr",
                f"fires {nxt - previous} ms apart; the minimum period is {min_period_ms} ms",
                "too_frequent",
            )
        smallest = nxt - previous if smallest is None else min(smallest, nxt - previous)
        previous = nxt
    return smallest


# ---- fields --------------------------------------------------------------------------------------


def _bounds(spec: dict[str, Any], horizon_ms: int) -> tuple[int | None, int | None, int | None]:
    start_ms = _instant(spec, "start_at")
    end_ms = _instant(spec, "end_at")
    if start_ms is not None and start_ms > horizon_ms:
        raise InvalidInput(_which(spec, "start_at"), "is too far in the future", "too_far")
    if end_ms is not None and start_ms is not None and end_ms < start_ms:
        raise InvalidInput(_which(spec, "end_at"), "is before start_at", "out_of_range")
    max_fires = _int(spec, "max_fires", required=False)
    if max_fires is not None and max_fires < 1:
        raise InvalidInput("schedule.max_fires", "must be at least 1", "out_of_range")
    return start_ms, end_ms, max_fires


def _jitter(spec: dict[str, Any], period_ms: int | None) -> int | None:
    """``jitter_ms``: 0..MAX_JITTER_MS and at most ``period_ms``; 0 (no jitter) as ``None``."""
    jitter_ms = _int(spec, "jitter_ms", required=False)
    if not jitter_ms:
        return None
    if jitter_ms < 0 or jitter_ms > MAX_JITTER_MS:
        raise InvalidInput("schedule.jitter_ms", f"must be within 0..{MAX_JITTER_MS}", "out_of_range")
    if period_ms is not None and jitter_ms > period_ms:
        raise InvalidInput(
            "schedule.jitter_ms", f"is more than the schedule's period ({period_ms} ms)", "jitter_too_large"
        )
    return jitter_ms


def _calendar(spec: dict[str, Any]) -> str | None:
    name = spec.get("calendar")
    if name is None:
        return None
    if not isinstance(name, str):
        raise InvalidInput("schedule.calendar", "must be a string", "invalid_type")
    if not _CALENDAR_NAME.match(name):
        raise InvalidInput(
            "schedule.calendar", "is not a calendar name (letters, digits, '.', '_', '-')", "invalid_name"
        )
    return name


def _instant(spec: dict[str, Any], name: str) -> int | None:
    """``name`` (ISO-8601 with an offset) or ``name_ms`` (epoch ms) as epoch ms; at most one of them."""
    iso, ms_name = spec.get(name), f"{name}_ms"
    if iso is not None and spec.get(ms_name) is not None:
        raise InvalidInput(f"schedule.{ms_name}", f"give {name} or {ms_name}, not both", "ambiguous")
    if iso is None:
        return _int(spec, ms_name, required=False)
    if not isinstance(iso, str):
        raise InvalidInput(f"schedule.{name}", "must be an ISO-8601 string with a UTC offset", "invalid_type")
    return parse_iso_instant_ms(iso, f"schedule.{name}")


def _which(spec: dict[str, Any], name: str) -> str:
    return f"schedule.{name}" if spec.get(name) is not None else f"schedule.{name}_ms"


def _int(spec: dict[str, Any], name: str, *, required: bool) -> int | None:
    value = spec.get(name)
    if value is None:
        if required:
            raise InvalidInput(f"schedule.{name}", "is required", "missing")
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"schedule.{name}", "must be an integer", "invalid_type")
    if abs(value) >= 2**63:
        raise InvalidInput(f"schedule.{name}", "is out of range", "out_of_range")
    return value


def _str(spec: dict[str, Any], name: str, default: str) -> str:
    value = spec.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise InvalidInput(f"schedule.{name}", "must be a string", "invalid_type")
    return value


_Policy = TypeVar("_Policy", DstGap, DstOverlap)


def _choice(spec: dict[str, Any], name: str, enum: type[_Policy], default: _Policy) -> _Policy:
    value = _str(spec, name, default.value)
    try:
        return enum(value)
    except ValueError:
        choices = " or ".join(repr(e.value) for e in enum)
        raise InvalidInput(f"schedule.{name}", f"must be {choices}", "invalid_choice") from None
