"""Wall-clock access in one place. Pure time math elsewhere takes ``now_ms`` as an argument."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from functools import lru_cache
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
    """``2026-11-21T09:00:00.000Z`` for an epoch-ms instant. Once per callback message: the text of
    the instant's second is cached (fires due together share it), the milliseconds are formatted."""
    second, millis = divmod(instant_ms, 1000)
    return f"{_iso_second(second)}.{millis:03d}Z"


@lru_cache(maxsize=1024)
def _iso_second(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="seconds").removesuffix("+00:00")
