"""Schedule builders: plain dicts in the API's shape, so they can be logged, stored or edited.

::

    delay(minutes=30)                     {"kind": "delay", "delay_ms": 1800000}
    at(datetime(2026, 11, 21, 17, tzinfo=ZoneInfo("Asia/Shanghai")))
    cron("0 9 * * *", timezone="Asia/Shanghai")
    every(seconds=30, start_at=datetime(2026, 11, 21, tzinfo=UTC))
    fixed_delay(seconds=30)               {"kind": "fixed_delay", "delay_ms": 30000}
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict, Unpack

Schedule = dict[str, Any]


class Duration(TypedDict, total=False):
    """A length of time as keyword arguments, added up (with a ``timedelta`` given first):
    ``every(minutes=1, seconds=30)``."""

    ms: int
    seconds: float
    minutes: float
    hours: float
    days: float


def _ms(
    value: timedelta | None,
    *,
    ms: int = 0,
    seconds: float = 0,
    minutes: float = 0,
    hours: float = 0,
    days: float = 0,
) -> int:
    """A :class:`Duration` (after ``value``) in whole milliseconds."""
    parts = {"seconds": seconds, "minutes": minutes, "hours": hours, "days": days}
    total = (value or timedelta()) + timedelta(**{k: v for k, v in parts.items() if v})
    return int(total.total_seconds() * 1000) + ms


def _instant(value: datetime | int) -> dict[str, Any]:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("instants must be timezone-aware datetimes (or epoch milliseconds)")
        return {"at": value.isoformat()}
    return {"at_ms": int(value)}


def delay(value: timedelta | None = None, **duration: Unpack[Duration]) -> Schedule:
    """Fire once, this long after registration."""
    return {"kind": "delay", "delay_ms": _ms(value, **duration)}


def at(instant: datetime | int) -> Schedule:
    """Fire once at ``instant`` (an aware datetime, or UTC epoch milliseconds)."""
    return {"kind": "at", **_instant(instant)}


def _bounds(start_at: datetime | int | None, end_at: datetime | int | None, max_fires: int | None) -> Schedule:
    out: Schedule = {}
    for name, value in (("start_at", start_at), ("end_at", end_at)):
        if value is not None:
            ((key, v),) = _instant(value).items()
            out[name if key == "at" else f"{name}_ms"] = v
    if max_fires is not None:
        out["max_fires"] = max_fires
    return out


def cron(
    expr: str,
    *,
    timezone: str = "UTC",
    dst_gap: Literal["skip", "shift"] = "skip",
    dst_overlap: Literal["once", "twice"] = "once",
    start_at: datetime | int | None = None,
    end_at: datetime | int | None = None,
    max_fires: int | None = None,
) -> Schedule:
    """Fire on a cron expression (5 fields, or 6 with seconds first) in an IANA time zone."""
    return {
        "kind": "cron",
        "expr": expr,
        "timezone": timezone,
        "dst_gap": dst_gap,
        "dst_overlap": dst_overlap,
        **_bounds(start_at, end_at, max_fires),
    }


def every(
    value: timedelta | None = None,
    *,
    start_at: datetime | int | None = None,
    end_at: datetime | int | None = None,
    max_fires: int | None = None,
    **duration: Unpack[Duration],
) -> Schedule:
    """Fire at a fixed rate, anchored at ``start_at`` (default: one period after registration)."""
    return {"kind": "interval", "every_ms": _ms(value, **duration), **_bounds(start_at, end_at, max_fires)}


def fixed_delay(
    value: timedelta | None = None,
    *,
    start_at: datetime | int | None = None,
    max_fires: int | None = None,
    **duration: Unpack[Duration],
) -> Schedule:
    """Fire first at ``start_at`` (default: one delay after registration), then each time this long
    after the previous run ended (its callback's final outcome: delivered, or dead after its retries).
    The delay is 1 s .. 366 days."""
    return {"kind": "fixed_delay", "delay_ms": _ms(value, **duration), **_bounds(start_at, None, max_fires)}
