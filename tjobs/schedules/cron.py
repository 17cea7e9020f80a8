"""Cron schedules in an IANA time zone, with explicit daylight-saving policies.

The expression is matched against **local wall-clock time** in ``timezone``; the fire instants are
the UTC instants at which the zone's clocks show a matching wall time. Away from DST transitions that
is one instant per matching wall time. At a transition two per-task policies decide (README schedule table):

Gap (clocks spring forward, e.g. America/New_York 2026-03-08 02:00 EST -> 03:00 EDT; wall times
02:00:00-02:59:59 do not exist that day):

- ``dst_gap="skip"`` (default): a matching wall time inside the gap produces no fire.
- ``dst_gap="shift"``: matching wall times inside the gap fire at the **first valid instant after
  the gap**, i.e. the transition instant itself (03:00:00 EDT = 07:00Z for a 02:30 job). All the
  matching gap wall times of one transition collapse into that single fire, which is also the fire of
  the wall time at the gap's end if that matches too (``*/15 * * * *`` fires once at 03:00, not five
  times). Lord Howe's 30-minute gap (02:00 -> 02:30) shifts to 02:30.

Overlap (clocks fall back, e.g. New York 2026-11-01 02:00 EDT -> 01:00 EST; wall times
01:00:00-01:59:59 happen twice, first at UTC-4 (``fold=0``) and again at UTC-5 (``fold=1``)):

- ``dst_overlap="once"`` (default): a repeated wall time fires only on its first pass (``fold=0``). A
  daily 01:30 job fires at 05:30Z; ``*/15 * * * *`` fires at 01:00, 01:15, 01:30, 01:45 EDT, then
  nothing until 02:00 EST (07:00Z), leaving an hour of UTC time without fires.
- ``dst_overlap="twice"``: a repeated wall time fires on both passes. The 01:30 job fires at 05:30Z
  and 06:30Z; ``*/15`` fires every 15 minutes straight through both passes.

These rules hold for every offset change the tz database records, whatever its size or cause (DST,
a zone changing its standard offset); wall times are whole seconds, and fire instants are strictly
increasing. ``start_at_ms``/``end_at_ms`` bound the fire instants (both inclusive).

How: the search walks the UTC timeline in stretches of constant offset (see
:mod:`tjobs.schedules.zones`). In each stretch it asks the :class:`~tjobs.schedules.cronexpr.CronPattern`
for the first matching wall time from the stretch's lower bound; if that wall time maps to an instant
inside the stretch, that is the answer, otherwise the next stretch starts at the transition, from
the wall time just after a gap (skip), from the transition instant (shift, when a gap wall time
matched), from the start of the repeated wall times (twice) or from the end of them (once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tjobs.schedules.base import Schedule
from tjobs.schedules.cronexpr import CronPattern, parse_cron
from tjobs.schedules.zones import ZoneTimeline, zone_timeline
from tjobs.specs import DstGap as DstGap  # the policies are part of the spec; re-exported here
from tjobs.specs import DstOverlap as DstOverlap
from tjobs.specs import ScheduleKind

SEARCH_HORIZON_S = 100 * 366 * 86_400  # give up looking for a next fire this far past the last one


@dataclass(frozen=True, slots=True)
class CronSchedule(Schedule):
    kind = ScheduleKind.CRON

    expr: str
    timezone: str = "UTC"
    dst_gap: DstGap = DstGap.SKIP
    dst_overlap: DstOverlap = DstOverlap.ONCE
    start_at_ms: int | None = None
    end_at_ms: int | None = None
    max_fires: int | None = None
    _pattern: CronPattern = field(init=False, repr=False, compare=False)
    _timeline: ZoneTimeline = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Raises CronSyntaxError / KeyError for inputs that parse_schedule_request would have rejected.
        object.__setattr__(self, "_pattern", parse_cron(self.expr))
        object.__setattr__(self, "_timeline", zone_timeline(self.timezone))

    def next_fire(self, after_ms: int) -> int | None:
        if self.start_at_ms is not None and after_ms < self.start_at_ms:
            after_ms = self.start_at_ms - 1
        found = self.next_unbounded(after_ms)
        if found is None or (self.end_at_ms is not None and found > self.end_at_ms):
            return None
        return found

    def first_fire(self, now_ms: int) -> int | None:
        return self.next_fire(now_ms - 1)

    def next_unbounded(self, after_ms: int) -> int | None:
        """The first fire instant strictly after ``after_ms``, ignoring ``start_at``/``end_at``."""
        pattern, timeline = self._pattern, self._timeline
        once = self.dst_overlap is DstOverlap.ONCE
        shift = self.dst_gap is DstGap.SHIFT

        offset = timeline.offset_ms(after_ms)
        from_s = (after_ms + offset) // 1000 + 1  # first wall second still to consider
        if once:
            # In the second pass of an overlap, the repeated wall times already fired on the first.
            last = timeline.last_transition(after_ms)
            if last is not None and last.after_ms < last.before_ms:
                from_s = max(from_s, (last.at_ms + last.before_ms) // 1000)
        limit_s = from_s + SEARCH_HORIZON_S
        cursor_ms = after_ms  # the current stretch of constant offset runs from here
        wall_s = pattern.next_at_or_after(from_s, limit_s)
        while wall_s is not None:
            candidate_ms = wall_s * 1000 - offset
            transition = timeline.next_transition(cursor_ms, candidate_ms)
            if transition is None:
                return candidate_ms
            # The offset changes before the candidate: nothing matched in the rest of this stretch.
            at_ms, before_ms, after_off_ms = transition.at_ms, transition.before_ms, transition.after_ms
            if shift and after_off_ms > before_ms and wall_s * 1000 < at_ms + after_off_ms:
                return at_ms  # a matching wall time inside the gap: the first valid instant after it
            if once and after_off_ms < before_ms:
                next_from_s = (at_ms + before_ms) // 1000  # skip the repeated wall times
            else:
                next_from_s = (at_ms + after_off_ms) // 1000
            if not from_s <= next_from_s <= wall_s:
                wall_s = pattern.next_at_or_after(next_from_s, limit_s)
            from_s, offset, cursor_ms = next_from_s, after_off_ms, at_ms
        return None
