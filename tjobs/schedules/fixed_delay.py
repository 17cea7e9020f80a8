"""Fixed-delay schedules: the first run at ``start_at_ms``, each later one ``delay_ms`` after the
previous run *ended* (PowerJob ``FIXED_DELAY``, db-scheduler ``FixedDelay``), so runs never overlap and
a slow run pushes the next one out.

The end of a run is known only when its flow's final outcome is recorded (delivered, or dead after its
retries), so this schedule alone cannot say when the task fires after its first run. The fire
transaction *parks* the task at the latest its flow can end plus the delay
(:func:`tjobs.firing.planner.park_ms`), and the write of the flow's final outcome sets the next run
to its end plus the delay, guarded on the task still being parked there
(:class:`tjobs.model.Reschedule`; README "Fixed delay"). ``next_fire(after)`` is that rule for a run
that ends the instant it starts: what the preview and the schedule math use, never the fire path.
"""

from __future__ import annotations

from dataclasses import dataclass

from tjobs.model import ScheduleKind
from tjobs.schedules.base import Schedule


@dataclass(frozen=True, slots=True)
class FixedDelaySchedule(Schedule):
    kind = ScheduleKind.FIXED_DELAY

    delay_ms: int
    start_at_ms: int
    max_fires: int | None = None

    def __post_init__(self) -> None:
        if self.delay_ms <= 0:
            raise ValueError("delay_ms must be positive")

    def next_fire(self, after_ms: int) -> int | None:
        return self.start_at_ms if after_ms < self.start_at_ms else after_ms + self.delay_ms

    def first_fire(self, now_ms: int) -> int | None:
        # registered: its start; resumed after the start passed: one delay from now
        return self.start_at_ms if self.start_at_ms >= now_ms else now_ms + self.delay_ms
