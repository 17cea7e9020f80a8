"""Runs operator jobs (:mod:`tjobs.stores.contracts.operator_jobs`) on every node, one at a time.

Each node polls for a job to claim (at once when this node just queued one): an unfinished job whose
lease ran out. It walks the job in steps from the job's saved position (a kind's :class:`JobWalk`:
a redrive's batch of :data:`BATCH` flows here, a backfill's paced instants in
:mod:`tjobs.service.backfill_walk`), and after each step saves its progress (processed, failed, the
position) with a fresh lease, then waits as long as the step asked (a backfill's pace, or a flow it
waits for to end); a save refused because another node claimed the job since ends the walk here (that
node resumes from the last saved position). A node stopping saves its position and gives the lease
back, so a restart, or another node, resumes at once; a node that dies is replaced once its lease
(:data:`LEASE_MS`) ran out. A step interrupted before its save is walked again by the next claim, so
each kind makes a step's work safe to do twice: a redrive takes only flows that are dead and died
before the job's ``dead_before_ms``, so the flows that batch redrove are not taken again
(:mod:`tjobs.service.operator_jobs`); a backfill's flow is keyed by its instant, so an instant done
twice has one flow (:mod:`tjobs.service.backfill`).

A job ends ``done`` (its walk found no more, or it handled its confirmed total), ``cancelled`` (asked,
seen at the next step or claim) or ``failed`` (its app or its task is gone, or its kind is unknown
here: :class:`JobCannotRun`); the end is handed to ``on_finished`` (the node records it in the audit
log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from tjobs.clock import Clock
from tjobs.errors import NotFound, TjobsError
from tjobs.model import App, Flow
from tjobs.periodic import PeriodicPass
from tjobs.service.flow_filters import FlowFilters
from tjobs.service.operator_jobs import REDRIVE
from tjobs.service.search import FlowSearch, SearchService
from tjobs.stores.contracts.operator_jobs import JobState, OperatorJob, OperatorJobs
from tjobs.stores.queries import flow_position

logger = logging.getLogger(__name__)

BATCH = 100  # flows per batch: one search page, then one progress write
LEASE_MS = 30_000  # a job's lease, renewed with every batch's progress
POLL_S = 2.0  # how often a node looks for a job to claim
KEPT_ERRORS = 20  # a job keeps its newest failures, "flow id: why"

Redrive = Callable[[App, Sequence[str]], Awaitable[list[tuple[str, Flow | None, TjobsError | None]]]]


class JobCannotRun(TjobsError):
    """A job that cannot go on (its app or its task is gone): it ends ``failed`` with this message."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a job's walk: ``handled`` items (``failures`` among them, each "id: why"), the
    ``position`` to go on from, whether the walk ``ended``, and how long to wait before the next step
    (``pause_s``: a pace, or a flow still running)."""

    handled: int
    position: Any
    ended: bool
    failures: list[str] = field(default_factory=list)
    pause_s: float = 0.0


class JobWalk(Protocol):
    async def step(self, job: OperatorJob, batch: int) -> Step:
        """The next step of ``job`` from its position, at most ``batch`` items; :class:`JobCannotRun`
        when the job cannot go on."""
        ...


OpenWalk = Callable[[OperatorJob], Awaitable[JobWalk]]  # a kind's walk of a claimed job (or JobCannotRun)


class OperatorJobRunner(PeriodicPass):
    name = "operator_jobs"

    def __init__(
        self,
        jobs: OperatorJobs,
        search: SearchService,
        redrive: Redrive,
        app_of: Callable[[str], Awaitable[App]],
        clock: Clock,
        node_id: str,
        on_finished: Callable[[OperatorJob], Awaitable[object]] | None = None,
        *,
        batch: int = BATCH,
        lease_ms: int = LEASE_MS,
        poll_s: float = POLL_S,
        kinds: Mapping[str, OpenWalk] | None = None,
        sleep: Callable[[float], Awaitable[object]] | None = None,
    ) -> None:
        """``redrive`` is :meth:`tjobs.service.tasks.TaskService.redrive`; ``app_of`` answers an app by id
        (:class:`NotFound` when it is gone). ``kinds`` opens the walks of the other kinds of job (a
        backfill: :class:`tjobs.service.backfill_walk.BackfillWalks`). ``sleep`` waits between steps
        (by default up to the time asked, or until this node stops)."""
        super().__init__(poll_s)
        self._jobs = jobs
        self._search = search
        self._redrive = redrive
        self._app_of = app_of
        self._clock = clock
        self._node_id = node_id
        self.on_finished = on_finished
        self._batch = batch
        self._lease_ms = lease_ms
        self._woken = asyncio.Event()
        self._kinds: dict[str, OpenWalk] = {REDRIVE: self._open_redrive, **(kinds or {})}
        self._sleep = sleep or self._pause

    def wake(self) -> None:
        """Look for a job now (one was just queued here)."""
        self._woken.set()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop after the batch in progress (its progress saved, the lease given back)."""
        self._woken.set()
        await super().stop(timeout_s)

    async def _loop(self) -> None:
        """Unlike the base's: claim at once, and again while jobs wait; then every ``poll_s`` or when woken."""
        while not self._stopping.is_set():
            self._woken.clear()
            try:
                while await self.run_once() and not self._stopping.is_set():
                    pass  # another job may wait
            except Exception:
                logger.exception("operator job pass failed", extra={"action": "operator_job_failed"})
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._woken.wait()

    async def run_once(self) -> int:
        """Claim one job and run it until it ends, its claim is lost or this node stops; 1 if one was
        claimed, else 0."""
        job = await self._jobs.claim_operator_job(self._node_id, self._clock.now_ms(), self._lease_ms)
        if job is None:
            return 0
        logger.info(
            "operator job %s (%s) claimed at %d of %d",
            job.id,
            job.kind,
            job.processed,
            job.total,
            extra={"action": "operator_job_claimed"},
        )
        await self._run(job)
        return 1

    async def _run(self, job: OperatorJob) -> None:
        if job.cancel_requested:
            await self._finish(job, "cancelled")
            return
        open_walk = self._kinds.get(job.kind)
        if open_walk is None:
            await self._finish(job, "failed", f"this node does not know jobs of kind {job.kind}")
            return
        current: OperatorJob | None = job
        try:
            walk = await open_walk(job)
            while current is not None:
                if self._stopping.is_set():
                    await self._jobs.save_operator_job(replace(current, lease_until_ms=0))  # resumed at once elsewhere
                    return
                step = await walk.step(current, self._batch)
                current = await self._save_step(current, step)
                if current is None:
                    logger.warning(
                        "operator job %s: claimed by another node, stopping here",
                        job.id,
                        extra={"action": "operator_job_lease_lost"},
                    )
                    return
                if current.cancel_requested:
                    await self._finish(current, "cancelled")
                    return
                if step.ended:
                    await self._finish(current, "done")
                    return
                if step.pause_s > 0:
                    await self._sleep(step.pause_s)
        except JobCannotRun as error:
            if current is not None:
                await self._finish(current, "failed", error.message)

    async def _save_step(self, job: OperatorJob, step: Step) -> OperatorJob | None:
        """``job`` with ``step``'s progress and a fresh lease, as stored (``None``: the claim was lost)."""
        now_ms = self._clock.now_ms()
        progressed = replace(
            job,
            processed=job.processed + step.handled,
            failed=job.failed + len(step.failures),
            position=step.position,
            errors=[*job.errors, *step.failures][-KEPT_ERRORS:],
            last_error=step.failures[-1] if step.failures else job.last_error,
            updated_at_ms=now_ms,
            lease_until_ms=now_ms + self._lease_ms,
        )
        return await self._jobs.save_operator_job(progressed)

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if this node is asked to stop meanwhile."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def _open_redrive(self, job: OperatorJob) -> JobWalk:
        try:
            app = await self._app_of(job.app_id)
        except NotFound:
            raise JobCannotRun(f"app {job.app_id} no longer exists") from None
        filters = FlowFilters.from_json(job.params["filters"])
        search = await self._search.flow_query(app.id, filters, changed_before_ms=int(job.params["dead_before_ms"]))
        return _RedriveWalk(app, search, self._search, self._redrive)

    async def _finish(self, job: OperatorJob, state: JobState, error: str | None = None) -> None:
        now_ms = self._clock.now_ms()
        last_error = error or job.last_error
        ended = replace(job, state=state, finished_at_ms=now_ms, updated_at_ms=now_ms, last_error=last_error)
        saved = await self._jobs.save_operator_job(ended)
        if saved is None:
            return  # another node holds it now
        logger.info(
            "operator job %s %s: %d of %d processed, %d failed",
            saved.id,
            saved.state,
            saved.processed,
            saved.total,
            saved.failed,
            extra={"action": "operator_job_finished"},
        )
        if self.on_finished is not None:
            await self.on_finished(saved)


class _RedriveWalk:
    """A redrive job's walk: the next page of its dead letters, in the order of the search, redriven."""

    def __init__(self, app: App, query: FlowSearch, search: SearchService, redrive: Redrive) -> None:
        self._app = app
        self._query = query
        self._search = search
        self._redrive = redrive

    async def step(self, job: OperatorJob, batch: int) -> Step:
        left = job.total - job.processed
        after = None if job.position is None else (int(job.position[0]), int(job.position[1]))
        page = await self._search.read_flows(self._query, after, min(batch, left)) if left > 0 else None
        if page is None or not page.items:
            return Step(0, job.position, ended=True)
        results = await self._redrive(self._app, [flow.id for flow in page.items])
        failures = [f"{flow_id}: {error.message}" for flow_id, _, error in results if error is not None]
        return Step(len(results), list(flow_position(page.items[-1])), not page.more, failures)
