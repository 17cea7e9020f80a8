"""The memory twin's operator jobs (:class:`tjobs.stores.contracts.operator_jobs.OperatorJobs`): a dict
by id, the JSON values copied through JSON as a database would."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from tjobs.stores.contracts.operator_jobs import OperatorJob, OperatorJobs


def _copy(job: OperatorJob) -> OperatorJob:
    def through_json(value: Any) -> Any:
        return orjson.loads(orjson.dumps(value))

    return replace(
        job, params=through_json(job.params), position=through_json(job.position), errors=through_json(job.errors)
    )


class MemoryOperatorJobs(OperatorJobs):
    def __init__(self) -> None:
        self._jobs: dict[str, OperatorJob] = {}

    async def create_operator_job(self, job: OperatorJob) -> tuple[OperatorJob, bool]:
        stored = self._jobs.get(job.id)
        if stored is not None:
            return _copy(stored), False
        self._jobs[job.id] = _copy(job)
        return _copy(job), True

    async def get_operator_job(self, job_id: str) -> OperatorJob | None:
        job = self._jobs.get(job_id)
        return None if job is None else _copy(job)

    async def list_operator_jobs(self, app_id: str | None, limit: int) -> list[OperatorJob]:
        jobs = [job for job in self._jobs.values() if app_id is None or job.app_id == app_id]
        jobs.sort(key=lambda job: (job.created_at_ms, job.id), reverse=True)
        return [_copy(job) for job in jobs[:limit]]

    async def claim_operator_job(self, node_id: str, now_ms: int, lease_ms: int) -> OperatorJob | None:
        open_jobs = [job for job in self._jobs.values() if not job.finished and job.lease_until_ms < now_ms]
        if not open_jobs:
            return None
        oldest = min(open_jobs, key=lambda job: (job.created_at_ms, job.id))
        claimed = replace(
            oldest,
            state="running",
            owner=node_id,
            lease_until_ms=now_ms + lease_ms,
            claims=oldest.claims + 1,
            updated_at_ms=now_ms,
        )
        self._jobs[claimed.id] = claimed
        return _copy(claimed)

    async def save_operator_job(self, job: OperatorJob) -> OperatorJob | None:
        stored = self._jobs.get(job.id)
        if stored is None or stored.finished or stored.claims != job.claims:
            return None
        saved = replace(
            stored,
            state=job.state,
            processed=job.processed,
            failed=job.failed,
            position=job.position,
            finished_at_ms=job.finished_at_ms,
            lease_until_ms=job.lease_until_ms,
            last_error=job.last_error,
            errors=list(job.errors),
            updated_at_ms=job.updated_at_ms,
        )
        self._jobs[job.id] = _copy(saved)
        return _copy(saved)

    async def cancel_operator_job(self, job_id: str, now_ms: int) -> OperatorJob | None:
        stored = self._jobs.get(job_id)
        if stored is None:
            return None
        if not stored.finished:
            never_claimed = stored.claims == 0
            stored = replace(
                stored,
                cancel_requested=True,
                updated_at_ms=now_ms,
                state="cancelled" if never_claimed else stored.state,
                finished_at_ms=now_ms if never_claimed else None,
            )
            self._jobs[job_id] = stored
        return _copy(stored)
