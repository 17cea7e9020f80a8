"""How a node walks a backfill job (:mod:`tjobs.service.backfill`) for the operator job runner
(:mod:`tjobs.service.operator_job_runner`).

Each step reads the task (gone, or moved to another app: the job ends ``failed``, "task … no longer
exists"), then takes the next instants of the job's schedule after its position (the last instant
done), at most one second's worth at the job's pace (and at most the runner's batch), makes each a
manual flow (:meth:`tjobs.service.tasks.TaskService.backfill_flow`: an instant that has a flow
already is left as it is), and asks the runner to wait until that second is over before the next
step. A step done twice (its node died before saving it) finds its flows made and makes no second.
An instant whose flow could not be made is a failure of the job ("flow id: why"), except when its
database is unreachable: then the step stops there and the job is resumed from its saved position
once its lease ran out, so an outage loses no instant.

**Overlap.** A task that may overlap itself (no pool, or ``callback.pool.overlap`` ``allow``) gets its
backfilled flows as fast as the pace allows, several of them running at once. A task whose pool
forbids it (``skip_if_running`` or ``queue_one``) is backfilled one flow at a time: the next instant
is made only once the previous backfilled flow has ended (delivered, dead, skipped...) and the task's
newest flow is not running either; meanwhile the step handles nothing and asks to be looked at again
in :data:`WAIT_S` (the lease is renewed, a cancel is seen). So the backfill never runs two flows of
such a task at once, nor starts one while the task's scheduled flow runs; a scheduled fire that comes
while a backfilled flow runs is judged by the gate of the node that fires it, which sees only its own
node's flows (as for a manual trigger: :mod:`tjobs.pools.overlap`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tjobs.clock import Clock
from tjobs.errors import InvalidInput, NotFound, StorageUnavailable, TjobsError
from tjobs.model import App, Task, flow_id
from tjobs.schedules.preview import instants_in
from tjobs.service.operator_job_runner import JobCannotRun, JobWalk, Step
from tjobs.service.tasks import TaskService
from tjobs.specs.pool import Overlap
from tjobs.specs.schedule import schedule_from_json
from tjobs.stores.contracts.operator_jobs import OperatorJob

WAIT_S = 1.0  # a one-at-a-time backfill looks again this long after finding a flow still running


class BackfillWalks:
    """Opens the walk of a claimed backfill job (``kinds={BACKFILL: walks.open}`` of the runner)."""

    def __init__(self, tasks: TaskService, app_of: Callable[[str], Awaitable[App]], clock: Clock) -> None:
        self._tasks = tasks
        self._app_of = app_of
        self._clock = clock

    async def open(self, job: OperatorJob) -> JobWalk:
        try:
            app = await self._app_of(job.app_id)
        except NotFound:
            raise JobCannotRun(f"app {job.app_id} no longer exists") from None
        return _BackfillWalk(self._tasks, app, self._clock, job)


class _BackfillWalk:
    def __init__(self, tasks: TaskService, app: App, clock: Clock, job: OperatorJob) -> None:
        params = job.params
        self._tasks = tasks
        self._app = app
        self._clock = clock
        self._task_id = int(params["task_id"])
        self._from_ms = int(params["from_ms"])
        self._to_ms = int(params["to_ms"])
        self._pace_per_s = int(params["pace_per_s"])
        self._schedule = schedule_from_json(params["schedule"])

    async def step(self, job: OperatorJob, batch: int) -> Step:
        started_ms = self._clock.now_ms()
        task = await self._task()
        one_at_a_time = task.callback.pool is not None and task.callback.pool.overlap is not Overlap.ALLOW
        position = None if job.position is None else int(job.position)
        if one_at_a_time and await self._running(task, position):
            return Step(0, job.position, ended=False, pause_s=WAIT_S)
        left = job.total - job.processed
        size = 1 if one_at_a_time else min(batch, self._pace_per_s, left)
        try:
            calendar = self._tasks.calendar_of(self._app.id, self._schedule)
        except InvalidInput as error:
            raise JobCannotRun(f"task {self._task_id}: {error.message}") from None
        instants = instants_in(self._schedule, self._from_ms, self._to_ms, size, after_ms=position, calendar=calendar)
        if left <= 0 or not instants:
            return Step(0, job.position, ended=True)
        failures: list[str] = []
        for instant in instants:
            try:
                await self._tasks.backfill_flow(self._app, task, instant)
            except StorageUnavailable:
                raise  # the step is walked again once the lease ran out: the instant is not lost
            except TjobsError as error:
                failures.append(f"{flow_id(task.id, instant)}: {error.message}")
        ended = len(instants) >= left or len(instants) < size
        elapsed_s = (self._clock.now_ms() - started_ms) / 1000
        pause_s = max(0.0, len(instants) / self._pace_per_s - elapsed_s)
        return Step(len(instants), instants[-1], ended, failures, 0.0 if ended else pause_s)

    async def _task(self) -> Task:
        try:
            return await self._tasks.get(self._app, self._task_id)
        except NotFound:
            raise JobCannotRun(f"task {self._task_id} no longer exists") from None

    async def _running(self, task: Task, position: int | None) -> bool:
        """Whether the previous backfilled flow (at ``position``), or the task's newest flow, still runs."""
        newest = await self._tasks.flows(self._app, task.id, 1, None)
        if newest and not newest[0].status.terminal:
            return True
        if position is None:
            return False
        try:
            previous = await self._tasks.get_flow(self._app, flow_id(task.id, position))
        except NotFound:
            return False
        return not previous.status.terminal
