"""Runs operator jobs (:mod:`tjobs.stores.contracts.operator_jobs`) on every node, one at a time.

Each node polls for a job to claim (at once when this node just queued one): an unfinished job whose
lease ran out. It walks the job's flows in batches of :data:`BATCH` from the job's saved position,
and after each batch saves its progress (processed, failed, the position) with a fresh lease; a save
refused because another node claimed the job since ends the walk here (that node resumes from the last
saved position). A node stopping saves its position and gives the lease back, so a restart, or
another node, resumes at once; a node that dies is replaced once its lease (:data:`LEASE_MS`) ran out.
A batch interrupted before its save is walked again by the next claim: a redrive takes only flows that
are dead and died before the job's ``dead_before_ms``, so the flows that batch redrove are not taken
again (:mod:`tjobs.service.operator_jobs`).

A job ends ``done`` (its walk found no more, or it handled its confirmed total), ``cancelled`` (asked,
seen at the next batch or claim) or ``failed`` (its app is gone, or its kind is unknown here); the
end is handed to ``on_finished`` (the node records it in the audit log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from tjobs.clock import Clock
from tjobs.errors import NotFound, TjobsError
from tjobs.model import App, Flow
from tjobs.periodic import PeriodicPass
from tjobs.service.flow_filters import FlowFilters
from tjobs.service.operator_jobs import REDRIVE
from tjobs.service.search import SearchService
from tjobs.stores.contracts.operator_jobs import JobState, OperatorJob, OperatorJobs
from tjobs.stores.queries import flow_position

logger = logging.getLogger(__name__)

BATCH = 100  # flows per batch: one search page, then one progress write
LEASE_MS = 30_000  # a job's lease, renewed with every batch's progress
POLL_S = 2.0  # how often a node looks for a job to claim
KEPT_ERRORS = 20  # a job keeps its newest failures, "flow id: why"

Redrive = Callable[[App, Sequence[str]], Awaitable[list[tuple[str, Flow | None, TjobsError | None]]]]


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
    ) -> None:
        """``redrive`` is :meth:`tjobs.service.tasks.TaskService.redrive`; ``app_of`` answers an app by id
        (:class:`NotFound` when it is gone)."""
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
        if job.kind != REDRIVE:
            await self._finish(job, "failed", f"this node does not know jobs of kind {job.kind}")
            return
        try:
            app = await self._app_of(job.app_id)
        except NotFound:
            await self._finish(job, "failed", f"app {job.app_id} no longer exists")
            return
        filters = FlowFilters.from_json(job.params["filters"])
        search = await self._search.flow_query(app.id, filters, changed_before_ms=int(job.params["dead_before_ms"]))
        current: OperatorJob | None = job
        while current is not None:
            if self._stopping.is_set():
                await self._jobs.save_operator_job(replace(current, lease_until_ms=0))  # resumed at once elsewhere
                return
            left = current.total - current.processed
            after = None if current.position is None else (int(current.position[0]), int(current.position[1]))
            page = await self._search.read_flows(search, after, min(self._batch, left)) if left > 0 else None
            if page is None or not page.items:
                await self._finish(current, "done")
                return
            results = await self._redrive(app, [flow.id for flow in page.items])
            failures = [f"{flow_id}: {error.message}" for flow_id, _, error in results if error is not None]
            now_ms = self._clock.now_ms()
            progressed = replace(
                current,
                processed=current.processed + len(results),
                failed=current.failed + len(failures),
                position=list(flow_position(page.items[-1])),
                errors=[*current.errors, *failures][-KEPT_ERRORS:],
                last_error=failures[-1] if failures else current.last_error,
                updated_at_ms=now_ms,
                lease_until_ms=now_ms + self._lease_ms,
            )
            current = await self._jobs.save_operator_job(progressed)
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
            if not page.more:
                await self._finish(current, "done")
                return

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
