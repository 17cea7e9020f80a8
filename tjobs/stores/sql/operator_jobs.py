"""The SQL store's operator jobs (:class:`tjobs.stores.contracts.operator_jobs.OperatorJobs`):
``operator_jobs`` of the first logical database, over the engines of the
:class:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore` it is given (no pool of its own).

A claim reads the oldest claimable job, then takes it with an ``UPDATE`` conditional on the ``claims``
it read (compare-and-set): of two nodes claiming at once, one updates a row and the other none, and
that one reads the next candidate. A progress write is the same ``UPDATE ... WHERE claims = ?``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy import MetaData, insert, select, update
from sqlalchemy import exc as sa_exc

from tjobs.stores.contracts.operator_jobs import OperatorJob, OperatorJobs
from tjobs.stores.schema import dumps, loads
from tjobs.stores.schema_operator_jobs import JOB_ERROR_CHARS, operator_jobs_table
from tjobs.stores.sql.apps_records import AppsDatabaseRecords

_METADATA = MetaData()
JOBS = operator_jobs_table(_METADATA)  # unqualified: the apps database's options point it there
_UNFINISHED = ("queued", "running")
CLAIM_TRIES = 5  # candidates read per claim when other nodes keep taking them first
_JSON_FIELDS = frozenset({"params", "position", "errors"})
"""The fields kept as JSON text, each in the column ``<field>_json``; every other field is the column of its name."""
_FIELDS = tuple(field.name for field in fields(OperatorJob))
_PROGRESS = (
    "state",
    "processed",
    "failed",
    "position",
    "finished_at_ms",
    "lease_until_ms",
    "last_error",
    "errors",
    "updated_at_ms",
)
"""What a progress write sets (its condition is the claim's fence, ``claims``)."""


def _row(job: OperatorJob, names: Sequence[str] = _FIELDS) -> dict[str, Any]:
    """The columns of ``job``'s fields ``names`` (every field by default), ``last_error`` clipped."""
    row = {name: getattr(job, name) for name in names}
    for name in _JSON_FIELDS.intersection(names):
        row[f"{name}_json"] = dumps(row.pop(name))
    if row.get("last_error") is not None:
        row["last_error"] = row["last_error"][:JOB_ERROR_CHARS]
    return row


def _job(row: Mapping[Any, Any]) -> OperatorJob:
    return OperatorJob(**{name: loads(row[f"{name}_json"]) if name in _JSON_FIELDS else row[name] for name in _FIELDS})


class SqlOperatorJobs(AppsDatabaseRecords, OperatorJobs):
    async def create_operator_job(self, job: OperatorJob) -> tuple[OperatorJob, bool]:
        try:
            async with self._store._write(self._url) as conn:
                await conn.execute(insert(JOBS), [_row(job)], execution_options=self._options)
            return job, True
        except sa_exc.IntegrityError:
            stored = await self.get_operator_job(job.id)
            if stored is None:  # cannot be: ids are never deleted
                raise
            return stored, False

    async def get_operator_job(self, job_id: str) -> OperatorJob | None:
        async with self._store._connect(self._url) as conn:
            row = (
                (await conn.execute(select(JOBS).where(JOBS.c.id == job_id), execution_options=self._options))
                .mappings()
                .first()
            )
        return None if row is None else _job(row)

    async def list_operator_jobs(self, app_id: str | None, limit: int) -> list[OperatorJob]:
        statement = select(JOBS).order_by(JOBS.c.created_at_ms.desc(), JOBS.c.id.desc()).limit(limit)
        if app_id is not None:
            statement = statement.where(JOBS.c.app_id == app_id)
        async with self._store._connect(self._url) as conn:
            rows = (await conn.execute(statement, execution_options=self._options)).mappings().all()
        return [_job(row) for row in rows]

    async def claim_operator_job(self, node_id: str, now_ms: int, lease_ms: int) -> OperatorJob | None:
        c = JOBS.c
        candidates = (
            select(c.id, c.claims)
            .where(c.state.in_(_UNFINISHED), c.lease_until_ms < now_ms)
            .order_by(c.created_at_ms, c.id)
            .limit(CLAIM_TRIES)
        )
        async with self._store._connect(self._url) as conn:
            found = (await conn.execute(candidates, execution_options=self._options)).all()
        for job_id, claims in found:
            take = (
                update(JOBS)
                .where(c.id == job_id, c.claims == claims, c.state.in_(_UNFINISHED), c.lease_until_ms < now_ms)
                .values(
                    state="running",
                    owner=node_id,
                    lease_until_ms=now_ms + lease_ms,
                    claims=claims + 1,
                    updated_at_ms=now_ms,
                )
            )
            async with self._store._write(self._url) as conn:
                taken = (await conn.execute(take, execution_options=self._options)).rowcount
            if taken:
                return await self.get_operator_job(job_id)
        return None

    async def save_operator_job(self, job: OperatorJob) -> OperatorJob | None:
        c = JOBS.c
        statement = (
            update(JOBS)
            .where(c.id == job.id, c.claims == job.claims, c.state.in_(_UNFINISHED))
            .values(**_row(job, _PROGRESS))
        )
        async with self._store._write(self._url) as conn:
            saved = (await conn.execute(statement, execution_options=self._options)).rowcount
        return await self.get_operator_job(job.id) if saved else None

    async def cancel_operator_job(self, job_id: str, now_ms: int) -> OperatorJob | None:
        c = JOBS.c
        unclaimed = (
            update(JOBS)
            .where(c.id == job_id, c.claims == 0, c.state.in_(_UNFINISHED))
            .values(cancel_requested=True, state="cancelled", finished_at_ms=now_ms, updated_at_ms=now_ms)
        )
        claimed = (
            update(JOBS)
            .where(c.id == job_id, c.state.in_(_UNFINISHED))
            .values(cancel_requested=True, updated_at_ms=now_ms)
        )
        async with self._store._write(self._url) as conn:
            if not (await conn.execute(unclaimed, execution_options=self._options)).rowcount:
                await conn.execute(claimed, execution_options=self._options)
        return await self.get_operator_job(job_id)
