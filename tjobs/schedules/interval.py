"""Fixed-rate schedules: occurrences at ``start_at_ms + k * every_ms`` for k = 0, 1, 2, ...

A pure duration on the UTC timeline: no time zone, so no DST effect, and no drift (each occurrence is
computed from the anchor, never from the previous fire or from when it actually ran).
"""

from __future__ import annotations

from dataclasses import dataclass

from tjobs.model import ScheduleKind
from tjobs.schedules.base import Schedule


@dataclass(frozen=True, slots=True)
class IntervalSchedule(Schedule):
    kind = ScheduleKind.INTERVAL

    every_ms: int
    start_at_ms: int
    end_at_ms: int | None = None
    max_fires: int | None = None

    def __post_init__(self) -> None:
        if self.every_ms <= 0:
            raise ValueError("every_ms must be positive")

    def next_fire(self, after_ms: int) -> int | None:
        if after_ms < self.start_at_ms:
            found = self.start_at_ms
        else:
            found = self.start_at_ms + ((after_ms - self.start_at_ms) // self.every_ms + 1) * self.every_ms
        if self.end_at_ms is not None and found > self.end_at_ms:
            return None
        return found

    def first_fire(self, now_ms: int) -> int | None:
        return self.next_fire(now_ms - 1)

    def occurrences_between(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        first = self.next_fire(after_ms)
        if first is None or limit <= 0:
            return []
        last = until_ms if self.end_at_ms is None else min(until_ms, self.end_at_ms)
        return list(range(first, last + 1, self.every_ms)[:limit])
