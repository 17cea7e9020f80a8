"""Operator jobs behind the API and the console: start a redrive of every dead letter matching some
filters (a backfill is started by :mod:`tjobs.service.backfill`), read any job's progress, cancel it.
The work itself is done by :class:`tjobs.service.operator_job_runner.OperatorJobRunner` on whichever
node claims the job.

A redrive job takes the app's dead letters that match the filters and **died before** ``dead_before_ms``
(by default when the operator asked for the count): the operator confirms the count the server gave
(``confirm_count``), and the job is refused (422 ``count_changed`` naming ``confirm_count``) if the
count is no longer that, so what runs is what was confirmed. A flow the job redrives that dies again
dies after that instant, so the job never takes it twice, even when a node resumes a batch another
node had begun. At most :data:`MAX_REDRIVE_JOB` flows per job, the newest first (a larger set is
counted as "more than" that: confirming it redrives the newest :data:`MAX_REDRIVE_JOB`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tjobs.clock import Clock, iso_ms
from tjobs.errors import InvalidInput, NotFound
from tjobs.model import App, FlowStatus
from tjobs.service import audit_scope
from tjobs.service.flow_filters import FILTER_FIELDS, FlowFilters, parse_flow_filters, refuse_blank
from tjobs.service.schedule_preview import parse_instant
from tjobs.service.search import FlowCount, SearchService
from tjobs.stores.contracts.audit import AuditEntry
from tjobs.stores.contracts.operator_jobs import OperatorJob, OperatorJobs

REDRIVE = "redrive"
MAX_REDRIVE_JOB = 100_000
LIST_LIMIT = 100
JOB_ID_PATTERN = r"^job_[0-9a-f]{16}$"
_JOB_ID = re.compile(JOB_ID_PATTERN)


def new_job_id() -> str:
    return f"job_{secrets.token_hex(8)}"


def is_job_id(text: str) -> bool:
    return bool(_JOB_ID.fullmatch(text))


def dead_letter_filters(filters: FlowFilters) -> FlowFilters:
    """``filters`` for dead letters: a status other than dead is refused (422 naming ``status``)."""
    if filters.status not in (None, FlowStatus.DEAD.value):
        raise InvalidInput("status", "dead letters are dead: leave status out or give dead")
    return FlowFilters(**{**filters.to_json(), "status": FlowStatus.DEAD.value})


@dataclass(frozen=True, slots=True)
class RedriveRequest:
    """What starting a redrive job takes: the filters, the instant the dead letters died before, and
    the count the operator confirmed."""

    filters: FlowFilters
    dead_before_ms: int
    confirm_count: int


START_FIELDS = frozenset({"filters", "dead_before", "confirm_count"})


def parse_redrive_request(body: Mapping[str, Any], now_ms: int) -> RedriveRequest:
    """A redrive job's JSON body (``POST /v1/dead-letters/redrive-jobs``), each bad value a 422 naming
    its field (``filters.target``, ``confirm_count``); ``dead_before`` left out is ``now_ms``."""
    unknown = sorted(set(body) - START_FIELDS)
    if unknown:
        raise InvalidInput(unknown[0], "unknown field", "unknown_field")
    given = body.get("filters", {})
    if not isinstance(given, dict):
        raise InvalidInput("filters", "must be an object of the dead-letter search's filters")
    values: dict[str, str | None] = {}  # null is no filter's value: leave a filter out instead
    for name, value in given.items():
        if name not in FILTER_FIELDS:
            raise InvalidInput(f"filters.{name}", "unknown field", "unknown_field")
        if not isinstance(value, str):
            raise InvalidInput(f"filters.{name}", "must be a string", "invalid_type")
        values[name] = value
    refuse_blank(values, "filters.")
    try:
        filters = dead_letter_filters(parse_flow_filters(values, now_ms))
    except InvalidInput as refused:
        message = refused.message.removeprefix(f"{refused.field}: ")
        raise InvalidInput(f"filters.{refused.field}", message, refused.code) from None
    dead_before = body.get("dead_before")
    if isinstance(dead_before, bool) or ("dead_before" in body and dead_before is None):
        raise InvalidInput("dead_before", "must be an ISO-8601 instant or epoch ms", "invalid_type")
    dead_before_ms = parse_instant(dead_before, "dead_before")
    confirm_count = body.get("confirm_count")
    if not isinstance(confirm_count, int) or isinstance(confirm_count, bool):
        raise InvalidInput("confirm_count", "give the count of dead letters you confirm (an integer)", "invalid_type")
    if not 1 <= confirm_count <= MAX_REDRIVE_JOB:
        raise InvalidInput("confirm_count", f"must be within 1..{MAX_REDRIVE_JOB}", "out_of_range")
    return RedriveRequest(filters, now_ms if dead_before_ms is None else dead_before_ms, confirm_count)


class OperatorJobService:
    """Starts, reads and cancels an app's operator jobs. ``wake`` tells this node's runner that a job
    waits (it would find it at its next poll anyway)."""

    def __init__(
        self, jobs: OperatorJobs, search: SearchService, clock: Clock, wake: Callable[[], None] = lambda: None
    ) -> None:
        self._jobs = jobs
        self._search = search
        self._clock = clock
        self.wake = wake

    async def count_dead_letters(self, app: App, filters: FlowFilters, dead_before_ms: int) -> FlowCount:
        """The app's dead letters matching ``filters`` that died before ``dead_before_ms``, counted up
        to :data:`MAX_REDRIVE_JOB`."""
        self._check_dead_before(dead_before_ms)
        dead = dead_letter_filters(filters)
        return await self._search.count_flows(app.id, dead, MAX_REDRIVE_JOB, changed_before_ms=dead_before_ms)

    async def start_redrive(
        self,
        app: App,
        filters: FlowFilters,
        *,
        confirm_count: int,
        dead_before_ms: int,
        created_by: str,
        job_id: str | None = None,
    ) -> tuple[OperatorJob, bool]:
        """A redrive job of the confirmed dead letters, queued for the next runner to claim; with
        ``job_id`` an id already used answers that job instead (a form posted twice starts one job).
        The job, and whether it was created now."""
        count = await self.count_dead_letters(app, filters, dead_before_ms)
        if count.matched == 0:
            raise InvalidInput("confirm_count", "no dead letter matches these filters", "nothing_to_redrive")
        if confirm_count != count.matched:
            now = f"more than {count.matched:,}" if count.more else f"{count.matched:,}"
            raise InvalidInput(
                "confirm_count", f"{now} dead letters match now, not {confirm_count:,}: confirm again", "count_changed"
            )
        now_ms = self._clock.now_ms()
        params = {"filters": dead_letter_filters(filters).to_json(), "dead_before_ms": dead_before_ms}
        job = OperatorJob(job_id or new_job_id(), REDRIVE, app.id, params, count.matched, created_by, now_ms, now_ms)
        stored, created = await self._jobs.create_operator_job(job)
        if stored.app_id != app.id:
            raise NotFound("operator job", stored.id)
        if created:
            self.wake()
        return stored, created

    async def get(self, app_id: str | None, job_id: str) -> OperatorJob:
        """The job (``app_id`` ``None``: any app's, for the admin); 404 for another app's."""
        job = await self._jobs.get_operator_job(job_id) if is_job_id(job_id) else None
        if job is None or (app_id is not None and job.app_id != app_id):
            raise NotFound("operator job", job_id)
        return job

    async def list_jobs(self, app_id: str | None, limit: int = LIST_LIMIT) -> list[OperatorJob]:
        if not 1 <= limit <= LIST_LIMIT:
            raise InvalidInput("limit", f"must be within 1..{LIST_LIMIT}")
        return await self._jobs.list_operator_jobs(app_id, limit)

    async def cancel(self, app_id: str | None, job_id: str) -> OperatorJob:
        """Ask the job to stop (a finished job is answered as it is)."""
        audit_scope.saw_before("operator_job", job_id, await self.get(app_id, job_id))
        job = await self._jobs.cancel_operator_job(job_id, self._clock.now_ms())
        if job is None:
            raise NotFound("operator job", job_id)
        return job

    def _check_dead_before(self, dead_before_ms: int) -> None:
        if dead_before_ms > self._clock.now_ms():
            raise InvalidInput("dead_before", "must not be in the future", "in_future")


def job_json(job: OperatorJob) -> dict[str, Any]:
    """A job as the API answers it (and the audit log keeps it)."""
    return {
        "id": job.id,
        "kind": job.kind,
        "app_id": job.app_id,
        "state": job.state,
        "total": job.total,
        "processed": job.processed,
        "failed": job.failed,
        "cancel_requested": job.cancel_requested,
        "params": job.params,
        "created_by": job.created_by,
        "created_at": iso_ms(job.created_at_ms),
        "updated_at": iso_ms(job.updated_at_ms),
        "finished_at": None if job.finished_at_ms is None else iso_ms(job.finished_at_ms),
        "node": job.owner,
        "last_error": job.last_error,
        "errors": job.errors,
        "position": job.position,
    }


def finished_job_entry(job: OperatorJob, node_id: str) -> AuditEntry:
    """The audit entry of a job's end, by the node that ended it (``operator_job.done`` ...)."""
    return AuditEntry(
        at_ms=0,
        actor_kind="node",
        actor_name=node_id,
        app_id=job.app_id,
        action=f"operator_job.{job.state}",
        object_id=job.id,
        before=None,
        after=job_json(job),
        source=node_id,
        via="job",
    )
