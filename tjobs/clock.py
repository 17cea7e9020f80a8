"""Wall-clock access in one place. Pure time math elsewhere takes ``now_ms`` as an argument."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Current UTC instant in epoch milliseconds."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to; for tests and simulations."""

    def __init__(self, now_ms: int) -> None:
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> int:
        if delta_ms < 0:
            raise ValueError("a clock never goes back")
        self._now_ms += delta_ms
        return self._now_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = now_ms


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms_to_datetime(instant_ms: int) -> datetime:
    return datetime.fromtimestamp(instant_ms / 1000, tz=UTC)


def datetime_to_ms(instant: datetime) -> int:
    if instant.tzinfo is None:
        raise ValueError("naive datetime: instants must carry a time zone")
    return (instant - _EPOCH) // timedelta(milliseconds=1)


def iso_ms(instant_ms: int) -> str:
    """``2026-11-21T09:00:00.000Z`` for an epoch-ms instant."""
    return ms_to_datetime(instant_ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")
