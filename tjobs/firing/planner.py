"""What one fire does to its task: the pure planner run inside the fire transaction.

The store locks the task row and checks the compare-and-set; this module decides, from the row, the
due instant and ``now``, which flows to record and where the task goes next. Misfire policies live
here (README "Misfires"; *misfire* in docs/design.md): a fire is a misfire when it runs more than
``misfire_threshold_ms`` after its instant.

- ``fire_now``: one fire immediately for the missed instant; the task moves to its next future
  occurrence. Missed occurrences in between are collapsed into it (counted in ``missed``).
- ``fire_soon``: the same single collapsed fire, but the runner paces such fires under the app's
  misfire rate instead of releasing them all at once (see :mod:`tjobs.firing.pacing`).
- ``skip``: a ``skipped`` flow records the miss (never sent); the task moves to its next future
  occurrence. A one-shot task completes.
- A ``fixed_delay`` task fires one flow and is parked (:func:`park_ms`) until its flow's final
  outcome sets its next run (:mod:`tjobs.schedules.fixed_delay`); late under ``skip``, a ``skipped``
  flow and the next run a delay later.
- ``catch_up``: every missed occurrence fires, oldest first, paced; if more than ``catch_up_max`` are
  behind, the oldest surplus is recorded as one ``skipped`` flow and only the newest
  ``catch_up_max`` fire.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from tjobs.model import (
    DeliveryMode,
    FireIntent,
    FirePlan,
    FlowKind,
    FlowStatus,
    MisfirePolicy,
    NewFlow,
    Task,
    TaskStatus,
)
from tjobs.schedules import Schedule
from tjobs.schedules.calendars import excluded
from tjobs.schedules.jitter import JitteredSchedule
from tjobs.schedules.parsing import schedule_of, schedule_zone
from tjobs.specs import FixedDelaySpec
from tjobs.specs.calendar import CalendarLookup, CalendarRules

COUNT_CAP = 10_000  # missed occurrences are counted up to this many; beyond it the count saturates


FLUSH_SLACK_MS = 5_000  # a fixed_delay park's margin for the final outcome's write after the last attempt


@dataclass(frozen=True, slots=True)
class FirePolicy:
    """``max_age_ms`` and ``timeout_ms``: the node's callback defaults (``[callbacks] max_age_s`` and
    ``timeout_ms``), which bound how long a flow whose task sets neither can take to end."""

    misfire_threshold_ms: int
    catch_up_max: int
    max_age_ms: int = 86_400_000
    timeout_ms: int = 3000


class FirePlanner:
    """Callable planner handed to :meth:`tjobs.stores.base.TaskStore.commit_fires`.

    ``calendars`` answers the rules of an app's calendar by name from memory
    (:meth:`tjobs.service.calendars.CalendarService.rules`; ``None``: not known, nothing skipped).

    It declines (``None``: the task untouched, no flow) the fires of the apps in ``disabled_apps``
    (:class:`tjobs.service.disabled_apps.DisabledApps`), so a disabled app's tasks keep their instant
    and fire under their misfire policy once it is enabled again.
    """

    def __init__(
        self,
        policy: FirePolicy,
        disabled_apps: Container[str] = frozenset(),
        calendars: CalendarLookup | None = None,
    ) -> None:
        self.policy = policy
        self._disabled_apps = disabled_apps
        self._calendars = calendars

    def __call__(self, task: Task, intent: FireIntent, now_ms: int) -> FirePlan | None:
        if task.app_id in self._disabled_apps:
            return None
        name = getattr(task.schedule, "calendar", None)
        calendar = None if name is None or self._calendars is None else self._calendars(task.app_id, name)
        return plan_fire(task, intent, now_ms, self.policy, calendar)


def plan_fire(
    task: Task, intent: FireIntent, now_ms: int, policy: FirePolicy, calendar: CalendarRules | None = None
) -> FirePlan | None:
    """The plan of one due intent. Its instant is where the task was due (``next_run_at``: jittered when
    the schedule has ``jitter_ms``), and lateness is reckoned from it; the flow is keyed by its nominal
    instant (:meth:`~tjobs.schedules.jitter.JitteredSchedule.nominal_of`), and the next run is always a
    later nominal instant's, so jitter never repeats or skips an instant. ``calendar`` is the rules of
    the calendar the schedule names, as they are now: an instant they exclude records no flow, and
    the next run skips the instants they exclude."""
    if type(task.schedule) is FixedDelaySpec:
        return _fixed_delay(task, task.schedule, intent.scheduled_at_ms, now_ms, policy)
    schedule = schedule_of(task.schedule, task.id, calendar)
    scheduled_at_ms = intent.scheduled_at_ms
    flow_at_ms = floor_ms = scheduled_at_ms
    if isinstance(schedule, JitteredSchedule):
        flow_at_ms = schedule.nominal_of(scheduled_at_ms)
        floor_ms = max(scheduled_at_ms, schedule.jittered(flow_at_ms))  # this occurrence's own jittered instant
    if calendar is not None and excluded(calendar, schedule_zone(task.schedule), flow_at_ms):
        # the calendar (changed since the instant was computed) excludes it: no flow, on to the next
        return _plan([], task, schedule.next_fire(floor_ms), fires_added=0)
    if now_ms - scheduled_at_ms <= policy.misfire_threshold_ms:
        flow = _sent_flow(task, flow_at_ms, now_ms, FlowKind.SCHEDULED, missed=0)
        return _plan([flow], task, schedule.next_fire(floor_ms), fires_added=1)

    match task.misfire_policy:
        case MisfirePolicy.FIRE_NOW | MisfirePolicy.FIRE_SOON:
            missed = _count_after(schedule, floor_ms, now_ms)
            flow = _sent_flow(task, flow_at_ms, now_ms, FlowKind.MISFIRE, missed)
            return _plan([flow], task, schedule.next_fire(max(now_ms, floor_ms)), fires_added=1)
        case MisfirePolicy.SKIP:
            missed = 1 + _count_after(schedule, floor_ms, now_ms)
            flow = NewFlow(flow_at_ms, FlowKind.MISFIRE, FlowStatus.SKIPPED, missed=missed)
            return _plan([flow], task, schedule.next_fire(max(now_ms, floor_ms)), fires_added=0)
        case MisfirePolicy.CATCH_UP:
            return _catch_up(task, schedule, floor_ms, flow_at_ms, now_ms, policy.catch_up_max)
    raise AssertionError(f"unknown misfire policy {task.misfire_policy!r}")


def park_ms(task: Task, spec: FixedDelaySpec, scheduled_at_ms: int, now_ms: int, policy: FirePolicy) -> int:
    """Where the fire of a fixed_delay task at ``scheduled_at_ms`` parks it: the latest its flow can
    end (the deliverer gives up ``max_age_s`` after the flow's instant; the last attempt then takes up
    to ``timeout_ms``; then its outcome is written) plus the delay, so a flow that never reports its
    end still lets the task run again. A task naming ``callback.run_timeout_ms`` expects its target to
    take fires as runs (README "Job runs"): the last attempt's run may last that long, so it is added.
    The flow's final outcome moves it earlier (:class:`~tjobs.model.Reschedule`)."""
    callback = task.callback
    max_age_ms = policy.max_age_ms if callback.max_age_s is None else callback.max_age_s * 1000
    timeout_ms = policy.timeout_ms if callback.timeout_ms is None else callback.timeout_ms
    timeout_ms += callback.run_timeout_ms or 0
    return max(scheduled_at_ms + max_age_ms, now_ms) + timeout_ms + FLUSH_SLACK_MS + spec.delay_ms


def _fixed_delay(task: Task, spec: FixedDelaySpec, scheduled_at_ms: int, now_ms: int, policy: FirePolicy) -> FirePlan:
    """A fixed_delay fire: one flow (nothing is ever collapsed: one instant is due at a time), the task
    parked at :func:`park_ms`. Late past the threshold under ``skip``: a skipped flow, which ends at
    once, so the next run is a delay from now."""
    if now_ms - scheduled_at_ms <= policy.misfire_threshold_ms:
        flow = _sent_flow(task, scheduled_at_ms, now_ms, FlowKind.SCHEDULED, missed=0)
    elif task.misfire_policy is MisfirePolicy.SKIP:
        skipped = NewFlow(scheduled_at_ms, FlowKind.MISFIRE, FlowStatus.SKIPPED, missed=1)
        return _plan([skipped], task, now_ms + spec.delay_ms, fires_added=0)
    else:  # fire_now, fire_soon (catch_up is refused at registration: there is no backlog)
        flow = _sent_flow(task, scheduled_at_ms, now_ms, FlowKind.MISFIRE, missed=0)
    return _plan([flow], task, park_ms(task, spec, scheduled_at_ms, now_ms, policy), fires_added=1)


def flow_instant(task: Task, due_ms: int) -> int:
    """The instant of the flow a fire of ``task`` due at ``due_ms`` records: its nominal instant."""
    schedule = schedule_of(task.schedule, task.id)
    return schedule.nominal_of(due_ms) if isinstance(schedule, JitteredSchedule) else due_ms


def _catch_up(task: Task, schedule: Schedule, scheduled_at_ms: int, flow_at_ms: int, now_ms: int, cap: int) -> FirePlan:
    # Backlog = this occurrence and every later one up to now.
    later = schedule.occurrences_between(scheduled_at_ms, now_ms, COUNT_CAP)
    backlog = 1 + len(later)
    if backlog <= cap:
        flow = _sent_flow(task, flow_at_ms, now_ms, FlowKind.MISFIRE, missed=0)
        return _plan([flow], task, schedule.next_fire(scheduled_at_ms), fires_added=1)
    surplus = backlog - cap
    if len(later) >= COUNT_CAP or cap <= 0:
        # Too far behind to enumerate: record the miss and resume at the next future occurrence.
        resume_at = schedule.next_fire(max(now_ms, scheduled_at_ms))
    else:
        # The newest `cap` occurrences remain; the task resumes at the first of them.
        resume_at = later[surplus - 1]
    skipped = NewFlow(flow_at_ms, FlowKind.MISFIRE, FlowStatus.SKIPPED, missed=surplus)
    return _plan([skipped], task, resume_at, fires_added=0)


def _sent_flow(task: Task, scheduled_at_ms: int, now_ms: int, kind: FlowKind, missed: int) -> NewFlow:
    if task.delivery is DeliveryMode.AT_MOST_ONCE:
        # The single attempt is recorded before it is sent (at-most-once).
        return NewFlow(scheduled_at_ms, kind, FlowStatus.SENDING, attempts=1, next_attempt_at_ms=now_ms, missed=missed)
    return NewFlow(scheduled_at_ms, kind, FlowStatus.PENDING, attempts=0, next_attempt_at_ms=now_ms, missed=missed)


def _plan(flows: list[NewFlow], task: Task, next_run_at_ms: int | None, fires_added: int) -> FirePlan:
    schedule_max = task.schedule.max_fires
    if next_run_at_ms is not None and schedule_max is not None and task.fire_count + fires_added >= schedule_max:
        next_run_at_ms = None
    status = TaskStatus.ACTIVE if next_run_at_ms is not None else TaskStatus.COMPLETED
    return FirePlan(flows=flows, next_run_at_ms=next_run_at_ms, status=status, fires_added=fires_added)


def _count_after(schedule: Schedule, after_ms: int, until_ms: int) -> int:
    return len(schedule.occurrences_between(after_ms, until_ms, COUNT_CAP))
