"""Operator jobs: long work an operator starts once and the cluster carries out in bounded batches (a
redrive of every matching dead letter, a backfill of a task's past range), beside the apps in the first
logical database.

A job is one row: what it does (``kind``, ``params``), what the operator confirmed (``total``), how far
it got (``processed``, ``failed``, and ``position``, where its walk resumes) and who runs it. A node
runs a job only while it holds the job's lease: :meth:`OperatorJobs.claim_operator_job` takes an
unfinished job whose lease has run out (or that never had one) and moves ``claims`` on; every later
write names that ``claims`` value and is refused once another node has claimed the job since. So
however many nodes look for work, and whatever restarts, one node at a time advances a job, and a
job whose node died is resumed from its last saved position by the next claim.

The role stands beside :class:`tjobs.stores.base.TaskStore`, over the same databases:
:func:`tjobs.stores.operator_job_store.operator_jobs_of` gives a store's (the SQL store's shares its
engines; the memory twin's is a dict of its own).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

JobState = Literal["queued", "running", "done", "cancelled", "failed"]
FINISHED_STATES: frozenset[str] = frozenset({"done", "cancelled", "failed"})


@dataclass(frozen=True, slots=True)
class OperatorJob:
    """One operator job. ``params`` and ``position`` are JSON values the store keeps as given (the
    job's kind gives them their meaning); ``processed`` counts the items handled, ``failed`` those of
    them that could not be. ``owner`` and ``lease_until_ms`` name the node running it and until when;
    ``claims`` counts the claims so far (the fence of every progress write)."""

    id: str
    kind: str
    app_id: str
    params: dict[str, Any]
    total: int
    created_by: str
    created_at_ms: int
    updated_at_ms: int
    state: JobState = "queued"
    processed: int = 0
    failed: int = 0
    position: Any = None
    finished_at_ms: int | None = None
    cancel_requested: bool = False
    owner: str | None = None
    lease_until_ms: int = 0
    claims: int = 0
    last_error: str | None = None
    errors: list[str] = field(default_factory=list)  # a few of the failures, newest last

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


class OperatorJobs(ABC):
    @abstractmethod
    async def create_operator_job(self, job: OperatorJob) -> tuple[OperatorJob, bool]:
        """Store ``job`` (queued, never claimed); with its id taken, the job stored under it instead.
        The job as stored, and whether it was created now."""

    @abstractmethod
    async def get_operator_job(self, job_id: str) -> OperatorJob | None:
        """The job, or ``None``."""

    @abstractmethod
    async def list_operator_jobs(self, app_id: str | None, limit: int) -> list[OperatorJob]:
        """The app's jobs (every app's with ``None``), newest first (``created_at_ms``, then id), at
        most ``limit``."""

    @abstractmethod
    async def claim_operator_job(self, node_id: str, now_ms: int, lease_ms: int) -> OperatorJob | None:
        """Take the oldest unfinished job whose lease ended before ``now_ms`` (a queued job has none):
        owner ``node_id``, lease until ``now_ms + lease_ms``, ``claims`` + 1, state ``running``. ``None``
        when there is none. Two nodes claiming at once never both get the same job."""

    @abstractmethod
    async def save_operator_job(self, job: OperatorJob) -> OperatorJob | None:
        """Write ``job``'s progress (``state``, ``processed``, ``failed``, ``position``,
        ``finished_at_ms``, ``lease_until_ms``, ``last_error``, ``errors``, ``updated_at_ms``) if it
        is still unfinished and its ``claims`` is still ``job.claims``; the job as stored (its
        ``cancel_requested`` as set meanwhile), or ``None`` when the claim was lost (nothing written)."""

    @abstractmethod
    async def cancel_operator_job(self, job_id: str, now_ms: int) -> OperatorJob | None:
        """Ask an unfinished job to stop: ``cancel_requested``; a job never claimed ends ``cancelled``
        at once (a running one ends at its node's next batch, or at its next claim). A finished job
        is left as it is. The job as stored, ``None`` when there is none."""
