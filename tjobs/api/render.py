"""JSON shapes of API responses: one function per record, instants as ISO-8601 UTC plus epoch ms.

A task's callback and payload, and a manual flow's own payload, may hold credentials (an
``Authorization`` header, a token in the body). For a reader who may not change the task (a viewer:
:func:`tjobs.api.principal.reads_masked`) they are rendered with ``masked=True``: the value of every
secret-looking header or JSON key replaced as the console shows them (:func:`tjobs.delivery.answers.masked_json`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

import orjson

from tjobs.clock import iso_ms
from tjobs.delivery.answers import masked_json
from tjobs.delivery.run_log import log_entries
from tjobs.errors import TjobsError
from tjobs.model import DISABLED_AT, App, Flow, FlowRun, Task, TaskChildren, TaskHealth
from tjobs.schedules.preview import Preview
from tjobs.service.task_health import HEALTH_CAP, HEALTH_WINDOW_MS
from tjobs.specs import RenderedOnce, ScheduleSpec, callback_to_json, schedule_to_json

# Instants repeat (a batch's tasks share created_at/updated_at, many share next_run_at), and
# formatting one was a tenth of a batch create's CPU in the profile.
_cached_iso_ms = lru_cache(maxsize=4096)(iso_ms)
_INTERNAL_SETTINGS = frozenset({"retiring_secrets", DISABLED_AT})  # shown otherwise, or never


def _instant(ms: int | None) -> str | None:
    return None if ms is None else _cached_iso_ms(ms)


def task_json(
    task: Task, *, masked: bool = False, callbacks: RenderedOnce[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A task; ``masked``: its callback's and payload's secret-looking values masked (see the module docstring).
    ``callbacks``: the callbacks of one answer, each spec rendered once (``RenderedOnce(callback_to_json)``)."""
    callback = callback_to_json(task.callback) if callbacks is None else callbacks(task.callback)
    return {
        "id": str(task.id),
        "name": task.name,
        "key": task.key,
        "status": task.status._value_,  # an enum's value as an attribute: ``.value`` is a property, 4x slower
        "schedule": schedule_to_json(task.schedule),
        "callback": masked_json(callback) if masked else callback,
        "payload": masked_json(task.payload) if masked else task.payload,
        "misfire_policy": task.misfire_policy._value_,
        "delivery": task.delivery._value_,
        "next_run_at": _instant(task.next_run_at_ms),
        "next_run_at_ms": task.next_run_at_ms,
        "version": task.revision,  # the owner's edits only: a fire never makes a PATCH conflict
        "fire_count": task.fire_count,
        "created_at": _instant(task.created_at_ms),
        "updated_at": _instant(task.updated_at_ms),
        "children": children_json(task.children),
    }


def children_json(children: TaskChildren | None) -> dict[str, list[str]] | None:
    """A task's children (or its parents, the same shape) as the API shows them; ``None``: none."""
    if not children:
        return None
    return {"on_success": [str(i) for i in children.on_success], "on_failure": [str(i) for i in children.on_failure]}


def flow_json(flow: Flow, *, masked: bool = False) -> dict[str, Any]:
    """A flow; ``masked``: a manual flow's own payload with its secret-looking values masked."""
    return {
        "id": flow.id,
        "task_id": str(flow.task_id),
        "scheduled_at": _instant(flow.scheduled_at_ms),
        "scheduled_at_ms": flow.scheduled_at_ms,
        "kind": flow.kind.value,
        "status": flow.status.value,
        "attempts": flow.attempts,
        "missed": flow.missed,
        "next_attempt_at": _instant(
            None if flow.status.terminal else flow.next_attempt_at_ms
        ),  # ended: marks its children due
        "last_status_code": flow.last_status_code,
        "last_error": flow.last_error,
        "created_at": _instant(flow.created_at_ms),
        "updated_at": _instant(flow.updated_at_ms),
        **(
            {"routes": [{"attempt": a, "destination": d, "executor": e} for a, d, e in flow.routes]}
            if flow.routes
            else {}
        ),
        **({"payload": _payload(flow.payload_json, masked)} if flow.payload_json is not None else {}),
        "attempt_history": attempt_history_json(flow),
        "attempt_total": 0 if flow.attempt_log is None else flow.attempt_log.total,
        **({"run": run_json(flow.run, masked=masked)} if flow.run is not None else {}),
    }


def run_json(run: FlowRun, *, masked: bool = False) -> dict[str, Any]:
    """A flow's run (README "Job runs"): its status, attempt, times, progress, result and message;
    ``masked``: the result's secret-looking values masked (a viewer's read, as a payload's)."""
    return {
        "status": run.status.value,
        "attempt": run.attempt,
        "started_at": _instant(run.started_at_ms),
        "deadline": _instant(run.deadline_ms),
        "reported_at": _instant(run.reported_at_ms),
        "ended_at": _instant(run.ended_at_ms),
        "progress": run.progress,
        "result": masked_json(run.result) if masked else run.result,
        "message": run.message,
        "cancel_requested": run.cancel_requested_at_ms is not None,
        "cancel_requested_at": _instant(run.cancel_requested_at_ms),
    }


def run_log_json(flow: Flow) -> list[dict[str, Any]]:
    """The flow's run log, oldest first: each line's instant, attempt and text."""
    return [
        {"at": _instant(entry["at"]), "attempt": entry["attempt"], "line": entry["line"]}
        for entry in log_entries(flow.run_log)
    ]


def _payload(payload_json: str, masked: bool) -> Any:
    payload = orjson.loads(payload_json)
    return masked_json(payload) if masked else payload


def attempt_history_json(flow: Flow) -> list[dict[str, Any]]:
    """The flow's kept attempt records, oldest first; ``lateness_ms``: the send's start − ``scheduled_at``."""
    if flow.attempt_log is None:
        return []
    return [
        {
            "attempt": r.attempt,
            "started_at": _instant(r.started_at_ms),
            "started_at_ms": r.started_at_ms,
            "duration_ms": r.duration_ms,
            "status_code": r.status_code,
            "error": r.error,
            "destination": r.destination,
            "executor": r.executor,
            "lateness_ms": r.started_at_ms - flow.scheduled_at_ms,
        }
        for r in flow.attempt_log.records
    ]


def flow_detail_json(flow: Flow, *, masked: bool = False) -> dict[str, Any]:
    """One flow as ``GET /v1/flows/{id}`` shows it: :func:`flow_json`, its newest sends' answers and its
    run log (``log_purged``: the app's run log retention cleared it; ``log_lines`` counts what it held)."""
    detail = {**flow_json(flow, masked=masked), "answers": answers_json(flow)}
    if flow.run is not None or flow.run_log_lines:
        detail["log"] = run_log_json(flow)
        detail["log_lines"] = flow.run_log_lines
        detail["log_purged"] = flow.run_log_purged
    return detail


def answers_json(flow: Flow) -> list[dict[str, Any]]:
    """The flow's kept answers, oldest first (headers masked and capped, the body's first bytes)."""
    return [
        {
            "attempt": a.attempt,
            "destination": a.destination,
            "status_code": a.status_code,
            "headers": [[name, value] for name, value in a.headers],
            "body": a.body,
            "body_bytes": a.body_bytes,
            "body_truncated": a.truncated,
            "task_version": a.task_revision,
        }
        for a in flow.answers or ()
    ]


def task_health_json(health: TaskHealth) -> dict[str, Any]:
    """A task's health over the last 24 hours (:mod:`tjobs.service.task_health`): its newest flow, and its
    window's flows delivered, failed (dead) and open, with the success rate of the finished ones."""
    rate = health.success_rate
    return {
        "last_status": None if health.last_status is None else health.last_status.value,
        "last_scheduled_at": _instant(health.last_scheduled_at_ms),
        "last_changed_at": _instant(health.last_changed_at_ms),
        "last_changed_at_ms": health.last_changed_at_ms,
        "last_attempts": health.last_attempts,
        "window_s": HEALTH_WINDOW_MS // 1000,
        "delivered": health.delivered,
        "failed": health.dead,
        "open": health.open,
        "counted": health.counted,
        "capped": health.counted >= HEALTH_CAP,
        "success_rate": None if rate is None else round(rate, 4),
    }


def app_json(app: App, api_key: str | None = None, *, with_secrets: bool | None = None) -> dict[str, Any]:
    """An app; its API key only when just minted, its signing secrets on create/rotate/show."""
    body: dict[str, Any] = {
        "id": app.id,
        "name": app.name,
        "rate_limit_per_s": app.rate_limit_per_s,
        "max_concurrency": app.max_concurrency,
        "created_at": _instant(app.created_at_ms),
        "settings": {k: v for k, v in app.settings.items() if k not in _INTERNAL_SETTINGS},
        "disabled": app.disabled_at_ms is not None,
        "disabled_at": _instant(app.disabled_at_ms),
    }
    if api_key is not None:
        body["api_key"] = api_key
    if with_secrets or (with_secrets is None and api_key is not None):
        body["secrets"] = app.secrets
    return body


def error_json(error: TjobsError) -> dict[str, Any]:
    detail: dict[str, Any] = {"code": error.code, "message": error.message}
    field = getattr(error, "field", None)
    if field is not None:
        detail["field"] = field
    details = getattr(error, "details", None)  # e.g. storage_outcome_unknown: the task id it may have
    if details is not None:
        detail["details"] = details
    return detail


def preview_json(spec: ScheduleSpec, preview: Preview) -> dict[str, Any]:
    """A schedule preview: each instant in UTC (ISO and epoch ms) and as the schedule's zone shows it."""
    return {
        "schedule": schedule_to_json(spec),
        "timezone": preview.timezone,
        "instants": [
            {
                "at": _instant(o.at_ms),
                "at_ms": o.at_ms,
                "local": local_iso(o.at_ms, o.utc_offset_ms),
                "utc_offset": _offset_text(o.utc_offset_ms),
                **(
                    {} if o.fires_at_ms is None else {"fires_at": _instant(o.fires_at_ms), "fires_at_ms": o.fires_at_ms}
                ),
            }
            for o in preview.occurrences
        ],
        "ended": preview.ended,
        **({} if preview.note is None else {"note": preview.note}),
    }


def local_iso(instant_ms: int, utc_offset_ms: int) -> str:
    """``2026-03-29T03:00:00.000+02:00``: the instant as a clock at that UTC offset shows it."""
    zone = timezone(timedelta(milliseconds=utc_offset_ms))
    return datetime.fromtimestamp(instant_ms / 1000, tz=UTC).astimezone(zone).isoformat(timespec="milliseconds")


def _offset_text(utc_offset_ms: int) -> str:
    sign = "-" if utc_offset_ms < 0 else "+"
    minutes, seconds = divmod(abs(utc_offset_ms) // 1000, 60)
    text = f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return f"{text}:{seconds:02d}" if seconds else text
