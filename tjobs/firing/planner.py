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
from tjobs.schedules.parsing import schedule_of

COUNT_CAP = 10_000  # missed occurrences are counted up to this many; beyond it the count saturates


@dataclass(frozen=True, slots=True)
class FirePolicy:
    misfire_threshold_ms: int
    catch_up_max: int


class FirePlanner:
    """Callable planner handed to :meth:`tjobs.stores.base.TaskStore.commit_fires`.

    It declines (``None``: the task untouched, no flow) the fires of the apps in ``disabled_apps``
    (:class:`tjobs.service.disabled_apps.DisabledApps`), so a disabled app's tasks keep their instant
    and fire under their misfire policy once it is enabled again.
    """

    def __init__(self, policy: FirePolicy, disabled_apps: Container[str] = frozenset()) -> None:
        self.policy = policy
        self._disabled_apps = disabled_apps

    def __call__(self, task: Task, intent: FireIntent, now_ms: int) -> FirePlan | None:
        if task.app_id in self._disabled_apps:
            return None
        return plan_fire(task, intent, now_ms, self.policy)


def plan_fire(task: Task, intent: FireIntent, now_ms: int, policy: FirePolicy) -> FirePlan | None:
    schedule = schedule_of(task.schedule)
    scheduled_at_ms = intent.scheduled_at_ms
    if now_ms - scheduled_at_ms <= policy.misfire_threshold_ms:
        return _on_time(task, schedule, scheduled_at_ms, now_ms, FlowKind.SCHEDULED, missed=0)

    match task.misfire_policy:
        case MisfirePolicy.FIRE_NOW | MisfirePolicy.FIRE_SOON:
            missed = _count_after(schedule, scheduled_at_ms, now_ms)
            return _fire_and_jump(task, schedule, scheduled_at_ms, now_ms, missed)
        case MisfirePolicy.SKIP:
            missed = 1 + _count_after(schedule, scheduled_at_ms, now_ms)
            flow = NewFlow(scheduled_at_ms, FlowKind.MISFIRE, FlowStatus.SKIPPED, missed=missed)
            next_run = schedule.next_fire(now_ms)
            return _plan([flow], task, next_run, fires_added=0)
        case MisfirePolicy.CATCH_UP:
            return _catch_up(task, schedule, scheduled_at_ms, now_ms, policy.catch_up_max)
    raise AssertionError(f"unknown misfire policy {task.misfire_policy!r}")


def _on_time(
    task: Task, schedule: Schedule, scheduled_at_ms: int, now_ms: int, kind: FlowKind, missed: int
) -> FirePlan:
    flow = _sent_flow(task, scheduled_at_ms, now_ms, kind, missed)
    return _plan([flow], task, schedule.next_fire(scheduled_at_ms), fires_added=1)


def _fire_and_jump(task: Task, schedule: Schedule, scheduled_at_ms: int, now_ms: int, missed: int) -> FirePlan:
    flow = _sent_flow(task, scheduled_at_ms, now_ms, FlowKind.MISFIRE, missed)
    return _plan([flow], task, schedule.next_fire(now_ms), fires_added=1)


def _catch_up(task: Task, schedule: Schedule, scheduled_at_ms: int, now_ms: int, cap: int) -> FirePlan:
    # Backlog = this occurrence and every later one up to now.
    later = schedule.occurrences_between(scheduled_at_ms, now_ms, COUNT_CAP)
    backlog = 1 + len(later)
    if backlog <= cap:
        flow = _sent_flow(task, scheduled_at_ms, now_ms, FlowKind.MISFIRE, missed=0)
        return _plan([flow], task, schedule.next_fire(scheduled_at_ms), fires_added=1)
    surplus = backlog - cap
    if len(later) >= COUNT_CAP or cap <= 0:
        # Too far behind to enumerate: record the miss and resume at the next future occurrence.
        resume_at = schedule.next_fire(now_ms)
    else:
        # The newest `cap` occurrences remain; the task resumes at the first of them.
        resume_at = later[surplus - 1]
    skipped = NewFlow(scheduled_at_ms, FlowKind.MISFIRE, FlowStatus.SKIPPED, missed=surplus)
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
