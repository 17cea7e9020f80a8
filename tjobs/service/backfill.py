"""Backfill: run a task's schedule over a past range as manual flows, one operator job
(:mod:`tjobs.stores.contracts.operator_jobs`, kind ``backfill``) that whichever node claims it walks
(:mod:`tjobs.service.backfill_walk`).

``POST /v1/tasks/{task_id}/backfill`` with ``{"from": …, "to": …, "pace_per_s": …}`` (instants as
ISO-8601 with an offset or epoch ms). The instants are the task's schedule's in ``[from, to)``, listed
by :func:`tjobs.schedules.preview.instants_in`, the schedule preview's own math: the schedule's bounds
apply (an interval's first instant is its ``start_at``), the instants its calendar excludes are left
out, and jitter, which moves when an instant fires and not which instants there are, does not apply
(a backfilled flow goes now, at the job's pace). ``max_fires`` caps the count, as for a task
registered at ``from``. The job's ``total`` is that count, counted when it is asked for: ``to`` must
not be in the future, ``from`` must be before ``to``, and the range must hold 1 to
:data:`MAX_BACKFILL` instants (each bad field a 422 naming it). The job keeps the schedule it
counted (``params.schedule``): a task edited meanwhile does not change what it walks; a calendar
changed meanwhile does (it is read when the walk reads the instants).

Each instant becomes a manual flow keyed by the task and the instant, as its scheduled fire would
have been (the callback's ``tjobs-scheduled-at`` is that instant): an instant that has a flow
already (it fired, or an earlier backfill did it) is left as it is, counted processed, never a
second flow. ``pace_per_s`` (default :data:`DEFAULT_PACE_PER_S`, at most :data:`MAX_PACE_PER_S`)
bounds the flows the job starts per second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tjobs.clock import Clock
from tjobs.errors import InvalidInput, known_object
from tjobs.model import App
from tjobs.schedules.preview import instants_in
from tjobs.service.operator_jobs import new_job_id
from tjobs.service.schedule_preview import parse_instant
from tjobs.service.tasks import TaskService
from tjobs.specs.schedule import FixedDelaySpec, schedule_to_json
from tjobs.stores.contracts.operator_jobs import OperatorJob, OperatorJobs

BACKFILL = "backfill"
MAX_BACKFILL = 100_000  # instants per job
DEFAULT_PACE_PER_S = 10
MAX_PACE_PER_S = 1_000
_FIELDS = frozenset({"from", "to", "pace_per_s"})


@dataclass(frozen=True, slots=True)
class BackfillRequest:
    """A backfill's range ``[from_ms, to_ms)`` and its pace."""

    from_ms: int
    to_ms: int
    pace_per_s: int = DEFAULT_PACE_PER_S


def parse_backfill_request(body: Any, now_ms: int) -> BackfillRequest:
    """A backfill's JSON body, each bad value a 422 naming its field (``from``, ``to``, ``pace_per_s``)."""
    known_object(body, _FIELDS)
    bounds: dict[str, int] = {}
    for name in ("from", "to"):
        value = body.get(name)
        if isinstance(value, bool):
            raise InvalidInput(name, "must be an ISO-8601 instant with an offset, or epoch ms", "invalid_type")
        instant_ms = parse_instant(value, name)
        if instant_ms is None:
            raise InvalidInput(name, "is required (an ISO-8601 instant with an offset, or epoch ms)", "missing")
        bounds[name] = instant_ms
    if bounds["to"] > now_ms:
        raise InvalidInput("to", "must not be in the future: a backfill runs a past range", "in_future")
    if bounds["from"] >= bounds["to"]:
        raise InvalidInput("from", "must be before to", "out_of_range")
    pace = body.get("pace_per_s", DEFAULT_PACE_PER_S)
    if not isinstance(pace, int) or isinstance(pace, bool) or not 1 <= pace <= MAX_PACE_PER_S:
        raise InvalidInput("pace_per_s", f"must be an integer within 1..{MAX_PACE_PER_S}", "out_of_range")
    return BackfillRequest(bounds["from"], bounds["to"], pace)


class BackfillService:
    """Starts backfill jobs (reading, listing and cancelling them is
    :class:`tjobs.service.operator_jobs.OperatorJobService`'s, as for every operator job). ``wake``
    tells this node's runner that a job waits."""

    def __init__(
        self, jobs: OperatorJobs, tasks: TaskService, clock: Clock, wake: Callable[[], None] = lambda: None
    ) -> None:
        self._jobs = jobs
        self._tasks = tasks
        self._clock = clock
        self.wake = wake

    async def start(self, app: App, task_id: int, request: BackfillRequest, *, created_by: str) -> OperatorJob:
        """A backfill job of the app's task over ``request``'s range, queued for the next runner: 404
        for a task the app does not have; 422 naming ``from`` when the range holds none of the task's
        instants or more than :data:`MAX_BACKFILL`; 422 naming ``schedule.kind`` for a fixed_delay task."""
        task = await self._tasks.get(app, task_id)
        if type(task.schedule) is FixedDelaySpec:
            raise InvalidInput(
                "schedule.kind",
                "a fixed_delay task has no instants of its own to backfill (each run follows the previous one's end)",
                "not_backfillable",
            )
        calendar = self._tasks.calendar_of(app.id, task.schedule)
        # 0.6-0.7 s of a cron's math for 100,001 instants (2 s on a loaded box): in a thread, so the event
        # loop keeps its turns
        instants = await asyncio.to_thread(
            instants_in, task.schedule, request.from_ms, request.to_ms, MAX_BACKFILL + 1, calendar=calendar
        )
        if len(instants) > MAX_BACKFILL:
            raise InvalidInput(
                "from",
                f"[from, to) holds more than {MAX_BACKFILL:,} of the task's instants: start later or split the range",
                "too_many_instants",
            )
        total = len(instants) if task.schedule.max_fires is None else min(len(instants), task.schedule.max_fires)
        if total == 0:
            raise InvalidInput(
                "from", "[from, to) holds none of the task's instants (see POST /v1/schedules:preview)", "no_instants"
            )
        params = {
            "task_id": str(task.id),
            "from_ms": request.from_ms,
            "to_ms": request.to_ms,
            "pace_per_s": request.pace_per_s,
            "schedule": schedule_to_json(task.schedule),
        }
        now_ms = self._clock.now_ms()
        job = OperatorJob(new_job_id(), BACKFILL, app.id, params, total, created_by, now_ms, now_ms)
        stored, _ = await self._jobs.create_operator_job(job)
        self.wake()
        return stored
