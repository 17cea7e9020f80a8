"""One-shot schedules (``at`` and ``delay``): a single instant, fixed when the task is registered."""

from __future__ import annotations

from dataclasses import dataclass

from tjobs.model import ScheduleKind
from tjobs.schedules.base import Schedule


@dataclass(frozen=True, slots=True)
class OneShotSchedule(Schedule):
    kind: ScheduleKind  # AT or DELAY; a delay was turned into its instant by parse_schedule_request
    at_ms: int

    def next_fire(self, after_ms: int) -> int | None:
        return self.at_ms if self.at_ms > after_ms else None

    def first_fire(self, now_ms: int) -> int | None:
        return self.at_ms
