"""A flow's document columns as JSON text and back: its newest run (``run``), its answers (``answers``),
its attempt history (``attempt_log``) and its executors' routes (``routes``), for the columns
:mod:`tjobs.stores.schema` defines. ``None`` (or an empty route list) is SQL NULL.
"""

from __future__ import annotations

import orjson

from tjobs.model import AttemptAnswer, AttemptLog, AttemptRecord, FlowRoute, FlowRun, RunStatus

MAX_ERROR_CHARS = 500  # a flow's error texts are kept to this many characters (``last_error``, attempt records)


_RUN_FIELDS = (
    "status",
    "attempt",
    "started_at",
    "deadline",
    "reported_at",
    "ended_at",
    "progress",
    "result",
    "message",
    "cancel_requested_at",
)


def run_to_text(run: FlowRun | None) -> str | None:
    """``{"status": ..., "attempt": n, "started_at": ms, ...}``: the fields of :class:`FlowRun` (the
    ``_ms`` dropped), those unset left out."""
    if run is None:
        return None
    values = (
        run.status.value,
        run.attempt,
        run.started_at_ms,
        run.deadline_ms,
        run.reported_at_ms,
        run.ended_at_ms,
        run.progress,
        run.result,
        run.message,
        run.cancel_requested_at_ms,
    )
    return orjson.dumps({k: v for k, v in zip(_RUN_FIELDS, values, strict=True) if v is not None}).decode()


def run_from_text(text: str | None) -> FlowRun | None:
    if not text:
        return None
    data = orjson.loads(text)

    def instant(name: str) -> int | None:
        value = data.get(name)
        return None if value is None else int(value)

    return FlowRun(
        RunStatus(data["status"]),
        int(data["attempt"]),
        int(data["started_at"]),
        instant("deadline"),
        instant("reported_at"),
        instant("ended_at"),
        data.get("progress"),
        data.get("result"),
        data.get("message"),
        instant("cancel_requested_at"),
    )


def answers_to_text(answers: tuple[AttemptAnswer, ...] | None) -> str | None:
    if answers is None:
        return None
    return orjson.dumps(  # plain tuples: orjson writes them as arrays (a NamedTuple it refuses)
        [(a.attempt, a.destination, a.status_code, a.headers, a.body, a.body_bytes, a.task_revision) for a in answers]
    ).decode()


def answers_from_text(text: str | None) -> tuple[AttemptAnswer, ...] | None:
    if not text:
        return None
    return tuple(
        AttemptAnswer(
            int(attempt),
            str(destination),
            int(code),
            tuple((str(n), str(v)) for n, v in headers),
            body,
            int(size),
            int(revision),
        )
        for attempt, destination, code, headers, body, size, revision in orjson.loads(text)
    )


def attempt_log_to_text(log: AttemptLog | None) -> str | None:
    if log is None:
        return None
    records = [  # once per outcome on the fire path: tuples (JSON arrays too), the error clipped only if long
        (
            r.attempt,
            r.started_at_ms,
            r.duration_ms,
            r.status_code,
            r.error if r.error is None or len(r.error) <= MAX_ERROR_CHARS else r.error[:MAX_ERROR_CHARS],
            r.destination,
            r.executor,
        )
        for r in log.records
    ]
    return orjson.dumps({"total": log.total, "records": records}).decode()


def attempt_log_from_text(text: str | None) -> AttemptLog | None:
    if not text:
        return None
    data = orjson.loads(text)
    records = tuple(
        AttemptRecord(
            int(a), int(started), int(duration), None if code is None else int(code), error, str(dest), executor
        )
        for a, started, duration, code, error, dest, executor in data["records"]
    )
    return AttemptLog(records, int(data["total"]))


def routes_to_text(routes: tuple[FlowRoute, ...] | None) -> str | None:
    return None if not routes else orjson.dumps([list(route) for route in routes]).decode()


def routes_from_text(text: str | None) -> tuple[FlowRoute, ...]:
    if not text:
        return ()
    return tuple(
        (int(attempt), str(destination), str(executor)) for attempt, destination, executor in orjson.loads(text)
    )
