"""Typed records the API answers with (unknown fields are ignored, so newer servers stay readable)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from tjobs.wire import StoredCallback, StoredTarget

T = TypeVar("T")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Callback(StoredCallback):
    """A task's callback: the shape :mod:`tjobs.wire` declares for the server and the SDK alike."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class Target(StoredTarget):
    """A named target as the API answers it: its credentials by key only, each value ``***``."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class TaskHealth(_Model):
    """A task's last result and its last 24 h (``window_s``), answered with ``list_tasks(health=True)``:
    its flows of the window delivered, ``failed`` (dead) and ``open``, and the success rate of the finished
    ones (``None`` when none finished; ``capped``: only its newest 2,000 flows were counted)."""

    last_status: str | None
    last_scheduled_at: datetime | None = None
    last_changed_at: datetime | None = None
    last_changed_at_ms: int | None = None
    last_attempts: int
    window_s: int
    delivered: int
    failed: int
    open: int
    counted: int
    capped: bool
    success_rate: float | None


class Task(_Model):
    id: str
    name: str
    key: str | None
    status: Literal["active", "paused", "completed"]
    schedule: dict[str, Any]
    callback: Callback
    payload: Any = None
    misfire_policy: str
    delivery: str
    next_run_at: datetime | None
    next_run_at_ms: int | None
    version: int
    fire_count: int
    created_at: datetime
    updated_at: datetime
    children: dict[str, list[str]] | None = None
    """The task ids its flows trigger when they end (``on_success``, ``on_failure``); ``None``: none."""
    parents: dict[str, list[str]] | None = None
    """The task ids that name it among their children (``on_success``, ``on_failure``); ``None``: none
    (:meth:`~tjobs.client.Client.get_task` only)."""
    health: TaskHealth | None = None
    """With ``list_tasks(health=True)`` / ``iter_tasks(health=True)`` only."""


class Flow(_Model):
    id: str
    task_id: str
    scheduled_at: datetime
    scheduled_at_ms: int
    kind: str
    status: str
    attempts: int
    missed: int = 0
    next_attempt_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    created_at: datetime
    updated_at: datetime
    payload: Any = None
    """A manual flow's own payload (a trigger's override), sent instead of the task's. Absent (not in
    ``model_fields_set``) when the flow sends the task's payload; ``None`` there is a JSON null override."""
    attempt_history: list[FlowAttempt] = []
    """What each send gave, oldest first: the newest 25 (``attempt_total`` counts them all)."""
    attempt_total: int = 0
    run: FlowRun | None = None
    """The flow's newest run: an attempt its target accepted as a job run (``None``: none)."""
    log: list[RunLogLine] = []
    """The run log, oldest first (:meth:`~tjobs.client.Client.get_flow` only)."""
    log_lines: int = 0
    log_purged: bool = False
    """The app's run log retention (``run_log_retention_days``) purged the log: ``log`` is empty,
    ``log_lines`` counts the lines it held."""
    child_flows: list[str] = []
    """The ids of the child flows this flow's ending triggered (:meth:`~tjobs.client.Client.get_flow` only)."""
    parent_flows: list[str] = []
    """The ids of the parent flows whose endings triggered this one (:meth:`~tjobs.client.Client.get_flow` only)."""


class FlowRun(_Model):
    """A job run: ``status`` is ``running``, ``cancelling``, ``succeeded``, ``failed``, ``timed_out`` or
    ``cancelled``; ``progress`` 0..100 or a text; ``result`` the final report's JSON."""

    status: str
    attempt: int
    started_at: datetime
    deadline: datetime | None = None
    reported_at: datetime | None = None
    ended_at: datetime | None = None
    progress: int | str | None = None
    result: Any = None
    message: str | None = None
    cancel_requested: bool = False
    cancel_requested_at: datetime | None = None


class RunLogLine(_Model):
    at: datetime
    attempt: int
    line: str


class RunReportAnswer(_Model):
    """The answer to a report or a cancel: the flow's status and run after it; ``cancel_requested``: stop
    the work, then report ``failed``; ``repeated``: the report repeated the one that ended the run."""

    flow_id: str
    status: str
    run: FlowRun
    cancel_requested: bool = False
    repeated: bool = False


class RunLogged(_Model):
    appended: int
    dropped: int = 0
    truncated: int = 0
    log_lines: int


class FlowAttempt(_Model):
    attempt: int
    started_at: datetime
    started_at_ms: int
    duration_ms: int
    status_code: int | None = None
    error: str | None = None
    destination: str
    executor: str | None = None
    lateness_ms: int


class Page(_Model, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


class ErrorDetail(_Model):
    code: str
    message: str
    field: str | None = None


class BatchItem(_Model):
    index: int
    status: int
    id: str | None = None
    task: Task | None = None
    error: ErrorDetail | None = None


class BatchResult(_Model):
    created: int
    existing: int
    failed: int
    items: list[BatchItem]


class RedriveItem(_Model):
    flow_id: str
    status: int
    flow: Flow | None = None
    error: ErrorDetail | None = None


class RedriveResult(_Model):
    redriven: int
    failed: int
    items: list[RedriveItem]


class FlowCount(_Model):
    """A bounded count: ``matched`` flows, or with ``more``, more than that (the count stops at ``at_most``)."""

    matched: int
    more: bool
    at_most: int


class DeadLetterCount(FlowCount):
    """The dead letters that died before ``dead_before_ms``: confirm ``matched`` to redrive them."""

    dead_before: datetime
    dead_before_ms: int


class OperatorJob(_Model):
    """A server-side job (a redrive of every matching dead letter, or a backfill of a task's past range) and
    its progress; ``position`` is where its walk goes on from (a backfill's last instant done, in ms)."""

    id: str
    kind: str
    app_id: str
    state: Literal["queued", "running", "done", "cancelled", "failed"]
    total: int
    processed: int
    failed: int
    cancel_requested: bool
    params: dict[str, Any]
    created_by: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    node: str | None = None
    last_error: str | None = None
    errors: list[str] = []
    position: Any = None

    @property
    def finished(self) -> bool:
        return self.state in ("done", "cancelled", "failed")


class App(_Model):
    id: str
    name: str
    rate_limit_per_s: float
    max_concurrency: int
    created_at: datetime
    settings: dict[str, Any]
    api_key: str | None = None
    secrets: list[str] | None = None
    disabled: bool = False
    disabled_at: datetime | None = None


class AppDeleted(_Model):
    id: str
    deleted_tasks: int


class PreviewInstant(_Model):
    at: datetime
    at_ms: int
    local: datetime  # the wall time in the schedule's zone, carrying that zone's UTC offset
    utc_offset: str
    fires_at: datetime | None = None  # with jitter: when the task fires for this instant
    fires_at_ms: int | None = None


class SchedulePreview(_Model):
    schedule: dict[str, Any]
    timezone: str
    instants: list[PreviewInstant]
    ended: bool
    note: str | None = None  # a fixed_delay: only its first run is listed


class Lateness(_Model):
    count: int
    p50_s: float | None = None
    p90_s: float | None = None
    p99_s: float | None = None


class AppStats(_Model):
    app_id: str
    active_tasks: int
    paused_tasks: int
    completed_tasks: int
    dead_letters: int
    dead_letters_capped: bool = False
    fires: int
    callback_failures: int
    fire_lateness: Lateness
    fire_lateness_recent: dict[str, Lateness] = {}
