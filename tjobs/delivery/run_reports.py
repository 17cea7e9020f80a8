"""What a run report, a cancel or a run's deadline does to a flow: pure, ``now`` passed in (README "Job
runs", docs/targets.md "Runs").

A report names the ``attempt`` it reports (the ``tjobs-attempt`` header of the request that started the
run); a report without one reports the flow's current run. Where the flow is:

- a live run (``running`` / ``cancelling``) of that attempt: ``running`` updates its progress (the answer
  says whether a cancel was asked); ``succeeded`` ends it ``delivered``; ``failed`` ends the attempt,
  retried by the task's policy (``pending``, handed to delivery, which sends the next attempt or gives
  up ``dead``; ``dead`` at once for an at-most-once task); a failed or cancelled report after a cancel
  ends it ``cancelled``;
- still being delivered (``pending``/``sending``), with the report naming the attempt in flight: the
  executor answered the request and reported before the deliverer wrote the run's start; the report
  starts the run (and may end it) there;
- a run that ended: the same final report again changes nothing and is answered as before (a retried
  report is idempotent); anything else is ``409 run_finished``.

A run past its deadline ends ``timed_out`` (:func:`expire`), retried like a failed report; a cancelled
run whose executor confirmed nothing within its grace ends ``cancelled``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson

from tjobs.errors import FieldTooLarge, InvalidInput, RunConflict, known_object
from tjobs.model import DeliveryMode, Flow, FlowKind, FlowRun, FlowStatus, FlowUpdate, Reschedule, RunStatus, Task
from tjobs.model import TaskStatus as _TaskStatus
from tjobs.settings import RunSettings
from tjobs.specs import FixedDelaySpec

REPORT_FIELDS = frozenset({"status", "attempt", "progress", "result", "message"})
REPORTED = (RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED)
MAX_PROGRESS_CHARS = 200
MAX_MESSAGE_CHARS = 1000
_UNSET = object()


@dataclass(frozen=True, slots=True)
class RunReport:
    """One report of an executor, validated: ``result`` is ``_UNSET`` when the report gave none."""

    status: RunStatus
    attempt: int | None = None
    progress: int | str | None = None
    result: Any = _UNSET
    message: str | None = None

    @property
    def has_result(self) -> bool:
        return self.result is not _UNSET


@dataclass(frozen=True, slots=True)
class Transition:
    """A change to write where the flow is still ``expected`` with ``expected_attempts``; ``redrive``:
    hand the flow to delivery once written (a retry of a failed or timed-out run)."""

    expected: FlowStatus
    expected_attempts: int
    update: FlowUpdate
    redrive: bool = False


def parse_report(body: Any, settings: RunSettings) -> RunReport:
    """A report body: 422 naming the field that is wrong, 413 naming ``result`` past its cap."""
    known_object(body, REPORT_FIELDS)
    names = ", ".join(s.value for s in REPORTED)
    given = body.get("status")
    status = next((s for s in REPORTED if s.value == given), None)
    if status is None:
        raise InvalidInput("status", f"must be one of {names}")
    attempt = body.get("attempt")
    if attempt is not None and (type(attempt) is not int or not 1 <= attempt <= 1_000_000):
        raise InvalidInput("attempt", "must be the attempt number (the tjobs-attempt header), 1 or more")
    progress = body.get("progress")
    if progress is not None:
        if type(progress) is int:
            if not 0 <= progress <= 100:
                raise InvalidInput("progress", "must be a percentage 0..100 or a short text")
        elif not isinstance(progress, str) or not 1 <= len(progress) <= MAX_PROGRESS_CHARS:
            raise InvalidInput(
                "progress", f"must be a percentage 0..100 or a text of 1..{MAX_PROGRESS_CHARS} characters"
            )
    message = body.get("message")
    if message is not None and (not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS):
        raise InvalidInput("message", f"must be a text of at most {MAX_MESSAGE_CHARS} characters")
    result: Any = _UNSET
    if "result" in body:
        if status is RunStatus.RUNNING:
            raise InvalidInput("result", "only a final report (succeeded or failed) carries a result")
        result = body["result"]
        if len(orjson.dumps(result)) > settings.max_result_bytes:
            raise FieldTooLarge("result", settings.max_result_bytes, "runs.max_result_bytes")
    return RunReport(status, attempt, progress, result, message)


def report_transition(
    flow: Flow, task: Task | None, report: RunReport, now_ms: int, run_timeout_ms: int
) -> Transition | None:
    """What ``report`` does to ``flow`` (``None``: it repeats the report that ended the run; nothing to
    write). Raises :class:`RunConflict` where the flow's run cannot take it."""
    run = flow.run
    if flow.status.running:
        assert run is not None
        if report.attempt is not None and report.attempt != run.attempt:
            raise _stale(flow, run, report.attempt)
        return _apply(flow, run, task, report, now_ms, flow.status, run.attempt)
    if run is not None and run.status.ended and report.attempt in (None, run.attempt):
        if report.status is not RunStatus.RUNNING and _repeats(report.status, run.status):
            return None
        raise RunConflict(
            "run_finished",
            f"the run of flow {flow.id} (attempt {run.attempt}) ended {run.status.value}; no report changes it",
            _where(flow, run),
        )
    if flow.status.deliverable and report.attempt is not None:
        in_flight = flow.attempts if flow.status is FlowStatus.SENDING else flow.attempts + 1
        if report.attempt == in_flight:  # the run's start is not written yet: the report starts it
            started = FlowRun(RunStatus.RUNNING, in_flight, now_ms, _deadline(task, now_ms, run_timeout_ms))
            return _apply(flow, started, task, report, now_ms, flow.status, flow.attempts)
    if run is not None and report.attempt is not None and report.attempt != run.attempt:
        raise _stale(flow, run, report.attempt)
    raise RunConflict(
        "not_running",
        f"flow {flow.id} is {flow.status.value}: no run of it is live"
        + ("" if report.attempt is None else f" for attempt {report.attempt}"),
        _where(flow, run),
    )


def cancel_transition(flow: Flow, now_ms: int, grace_ms: int) -> Transition | None:
    """Ask the flow's live run to stop: ``cancelling`` until its executor confirms, or the grace (or the
    run's deadline, if sooner) ends it ``cancelled``. ``None``: a cancel was asked already."""
    run = flow.run
    if flow.status is FlowStatus.CANCELLING:
        return None
    if flow.status is not FlowStatus.RUNNING or run is None:
        raise RunConflict(
            "not_running",
            f"flow {flow.id} is {flow.status.value}: only a running run can be cancelled",
            _where(flow, run),
        )
    until_ms = now_ms + grace_ms
    if run.deadline_ms is not None:
        until_ms = min(until_ms, run.deadline_ms)
    asked = replace(run, status=RunStatus.CANCELLING, cancel_requested_at_ms=now_ms)
    update = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.CANCELLING, flow.attempts, until_ms, run=asked)
    update = replace(update, last_error=flow.last_error, last_status_code=flow.last_status_code)
    return Transition(FlowStatus.RUNNING, flow.attempts, update)


def expire(flow: Flow, task: Task, now_ms: int) -> Transition:
    """A live run past its deadline (the compensator found it): ``timed_out`` and retried like a failed
    report, or, a cancel having been asked, ``cancelled``."""
    run = flow.run or FlowRun(RunStatus.RUNNING, flow.attempts, flow.updated_at_ms)
    if flow.status is FlowStatus.CANCELLING:
        ended = replace(run, status=RunStatus.CANCELLED, ended_at_ms=now_ms)
        reason = "cancelled; the executor did not confirm within the grace"
        return _terminal(flow, ended, task, FlowStatus.CANCELLED, reason, now_ms)
    ended = replace(run, status=RunStatus.TIMED_OUT, ended_at_ms=now_ms)
    took_s = (now_ms - run.started_at_ms) / 1000
    return _failed(flow, ended, task, f"run timed out after {took_s:.0f} s (attempt {run.attempt})", now_ms)


def _apply(
    flow: Flow, run: FlowRun, task: Task | None, report: RunReport, now_ms: int, expected: FlowStatus, attempts: int
) -> Transition:
    progress = run.progress if report.progress is None else report.progress
    message = run.message if report.message is None else report.message
    reported = replace(run, reported_at_ms=now_ms, progress=progress, message=message)
    if report.has_result:
        reported = replace(reported, result=report.result)
    status = FlowStatus.CANCELLING if expected is FlowStatus.CANCELLING else FlowStatus.RUNNING
    if report.status is RunStatus.RUNNING:
        next_ms = flow.next_attempt_at_ms if expected is FlowStatus.CANCELLING else run.deadline_ms
        update = FlowUpdate(flow.task_id, flow.scheduled_at_ms, status, run.attempt, next_ms, run=reported)
        update = replace(update, last_error=flow.last_error if flow.status.running else None)
        return Transition(expected, attempts, update)
    ended = replace(reported, ended_at_ms=now_ms)
    if report.status is RunStatus.SUCCEEDED:
        ended = replace(ended, status=RunStatus.SUCCEEDED)
        transition = _terminal(flow, ended, task, FlowStatus.DELIVERED, None, now_ms)
    elif expected is FlowStatus.CANCELLING:
        ended = replace(ended, status=RunStatus.CANCELLED)
        transition = _terminal(flow, ended, task, FlowStatus.CANCELLED, "cancelled; the executor stopped", now_ms)
    else:
        ended = replace(ended, status=RunStatus.FAILED)
        reason = f"run failed (attempt {run.attempt})" + (f": {message}" if message else "")
        transition = _failed(flow, ended, task, reason, now_ms)
    return replace(transition, expected=expected, expected_attempts=attempts)


def _failed(flow: Flow, ended: FlowRun, task: Task | None, reason: str, now_ms: int) -> Transition:
    """An attempt's run that failed or timed out: retried (``pending`` now, handed to delivery, which
    applies the retry budget), or ``dead`` for an at-most-once task (never sent twice) or a deleted one."""
    if task is None or task.delivery is DeliveryMode.AT_MOST_ONCE:
        return _terminal(flow, ended, task, FlowStatus.DEAD, reason, now_ms)
    update = FlowUpdate(
        flow.task_id, flow.scheduled_at_ms, FlowStatus.PENDING, ended.attempt, now_ms, None, reason, run=ended
    )
    return Transition(flow.status, flow.attempts, update, redrive=True)


def _terminal(
    flow: Flow, ended: FlowRun, task: Task | None, status: FlowStatus, reason: str | None, now_ms: int
) -> Transition:
    update = FlowUpdate(flow.task_id, flow.scheduled_at_ms, status, ended.attempt, None, None, reason, run=ended)
    moved = _reschedule(task, flow, now_ms)
    if moved is not None:
        update = replace(update, reschedule=moved)
    return Transition(flow.status, flow.attempts, update)


def _reschedule(task: Task | None, flow: Flow, ended_ms: int) -> Reschedule | None:
    """A fixed_delay task's next run: a delay after its scheduled run ended (the run's end, not the
    answer that started it)."""
    if task is None or type(task.schedule) is not FixedDelaySpec or flow.kind is FlowKind.MANUAL:
        return None
    if task.status is not _TaskStatus.ACTIVE or task.next_run_at_ms is None:
        return None
    return Reschedule(task.app_id, task.next_run_at_ms, task.version, ended_ms + task.schedule.delay_ms)


def _deadline(task: Task | None, now_ms: int, run_timeout_ms: int) -> int:
    own = None if task is None else task.callback.run_timeout_ms
    return now_ms + (own or run_timeout_ms)


def _repeats(reported: RunStatus, ended: RunStatus) -> bool:
    return reported is ended or (reported is RunStatus.FAILED and ended is RunStatus.CANCELLED)


def _stale(flow: Flow, run: FlowRun, attempt: int) -> RunConflict:
    return RunConflict(
        "stale_attempt",
        f"flow {flow.id} runs attempt {run.attempt} ({run.status.value}); attempt {attempt} is over",
        _where(flow, run),
    )


def _where(flow: Flow, run: FlowRun | None) -> dict[str, object]:
    details: dict[str, object] = {"flow_id": flow.id, "flow_status": flow.status.value}
    if run is not None:
        details["run_status"] = run.status.value
        details["attempt"] = run.attempt
    return details
