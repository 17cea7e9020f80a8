"""Schedule math: when a task fires. Pure functions of the instant they are given; no clock, no I/O.

- :mod:`~tjobs.schedules.parsing` parses the API's schedule request into its typed spec
  (:func:`~tjobs.schedules.parsing.parse_schedule_request`; :mod:`tjobs.specs`) and builds the
  :class:`Schedule` of a spec (:func:`~tjobs.schedules.parsing.schedule_of`). :func:`normalize_schedule`
  and :func:`parse_schedule` do the same from and to the stored JSON object.
- :mod:`~tjobs.schedules.cron` is cron in an IANA zone with the DST policies (``dst_gap`` skip/shift,
  ``dst_overlap`` once/twice) documented there; :mod:`~tjobs.schedules.cronexpr` matches expressions
  against wall-clock time and :mod:`~tjobs.schedules.zones` finds a zone's offset transitions.
- :mod:`~tjobs.schedules.interval` (fixed rate), :mod:`~tjobs.schedules.fixed_delay` (a delay after each
  run's end) and :mod:`~tjobs.schedules.oneshot` (``at``/``delay``).
"""

from tjobs.schedules.base import Schedule
from tjobs.schedules.cron import CronSchedule, DstGap, DstOverlap
from tjobs.schedules.interval import IntervalSchedule
from tjobs.schedules.oneshot import OneShotSchedule
from tjobs.schedules.parsing import normalize_schedule, parse_schedule

__all__ = [
    "CronSchedule",
    "DstGap",
    "DstOverlap",
    "IntervalSchedule",
    "OneShotSchedule",
    "Schedule",
    "normalize_schedule",
    "parse_schedule",
]
