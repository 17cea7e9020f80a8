"""The documented shapes of the ``/v1`` API (OpenAPI components).

The request shapes of tasks (schedules, callbacks, create and update bodies, an app's callback
defaults) are :mod:`tjobs.wire`'s, published here as they are: validation reads its field names,
bounds and choices from the same models (field-named errors, one handler). Responses are built by
:mod:`tjobs.api.render` and documented here; ``tests/api/test_schemathesis.py`` checks the two agree.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from tjobs.wire import (
    KEY_PATTERN,
    NAME_PATTERN,
    TARGET_NAME_PATTERN,
    CallbackDefaults,
    DeliveryName,
    JsonValue,
    MisfirePolicyName,
    RequestShape,
    Schedule,
    StoredCallback,
)

TaskStatusName = Literal["active", "paused", "completed"]
FlowStatusName = Literal[
    "pending", "sending", "delivered", "dead", "skipped", "cancelled", "unknown", "running", "cancelling"
]
FlowKindName = Literal["scheduled", "misfire", "manual"]
LAST_ANSWER_PATTERN = r"^(none|[1-5][xX][xX]|[1-5][0-9]{2})$"
# documented as validation judges them (its own 422 names the field): a task id is digits, 1..2^63-1;
# an instant is ISO-8601 with an offset from 1970 on, or epoch ms in digits
TASK_ID_FILTER_PATTERN = r"^(?=0*[1-9])([0-9]{1,18}|[0-8][0-9]{18})$"  # not 0
# (No leading \s* in the date-time form's pattern: RFC 3339 allows none, so it admitted nothing more, and
# schemathesis' coverage phase spent ~4 s of CPU per filter per operation searching for a 40-character
# match of both.)
INSTANT_FORMS: list[dict[str, Any]] = [
    {"format": "date-time", "pattern": r"^(19[7-9][0-9]|[2-9][0-9]{3})-"},
    {"pattern": r"^\s*[0-9]{1,14}\s*$"},
]
INSTANT_FILTER: dict[str, Any] = {"allOf": [{"anyOf": INSTANT_FORMS}]}
FlowFilterName = Literal[
    "pending", "retrying", "sending", "delivered", "dead", "skipped", "cancelled", "unknown", "running", "cancelling"
]


_Strict = RequestShape
MAX_INSTANT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last instant ISO-8601 can name


# ---- errors ------------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable code, e.g. invalid_input, not_found")
    message: str = Field(description="human-readable; names the offending field")
    field: str | None = Field(default=None, description="dotted path of the offending field")


class Error(BaseModel):
    error: ErrorDetail


# ---- tasks --------------------------------------------------------------------------------------


class BatchCreate(_Strict):
    tasks: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=1000,
        description=(
            "each item a TaskCreate, validated on its own: an invalid item gets its error in the result, at its "
            "index, and does not stop the others (an item that is not an object refuses the whole batch)"
        ),
    )


MASKED_FOR_VIEWERS = "read with a viewer's token (which may change nothing)"


class Task(BaseModel):
    id: str
    name: str
    key: str | None
    status: TaskStatusName
    schedule: dict[str, Any] = Field(description="the canonical stored schedule")
    callback: StoredCallback = Field(
        description=f"as stored; {MASKED_FOR_VIEWERS}: the value of each secret-looking header as [masked]"
    )
    payload: JsonValue = Field(description=f"as stored; {MASKED_FOR_VIEWERS}: secret-looking keys' values [masked]")
    misfire_policy: MisfirePolicyName
    delivery: DeliveryName
    next_run_at: str | None
    next_run_at_ms: int | None
    version: int = Field(description="grows by one on each edit (update, pause, resume), never on a fire")
    fire_count: int
    created_at: str
    updated_at: str
    children: dict[str, list[str]] | None = Field(
        default=None, description="the task ids its flows trigger when they end: on_success, on_failure; null: none"
    )
    parents: dict[str, list[str]] | None = Field(
        default=None,
        description="GET /v1/tasks/{id} only: the task ids that name it among their children (on_success, "
        "on_failure); null: none (README 'Child tasks')",
    )
    health: TaskHealthFigures | None = Field(default=None, description="with health=true on GET /v1/tasks only")


class TaskHealthFigures(BaseModel):
    last_status: FlowStatusName | None = Field(description="the newest flow's status; null: it never fired")
    last_scheduled_at: str | None
    last_changed_at: str | None = Field(description="when the newest flow last changed (its outcome, if any)")
    last_changed_at_ms: int | None
    last_attempts: int
    window_s: int = Field(description="the window the counts cover: the last 86,400 s")
    delivered: int
    failed: int = Field(description="dead flows of the window")
    open: int = Field(description="flows of the window still pending or sending")
    counted: int = Field(description="flows of the window counted (skipped and cancelled ones included)")
    capped: bool = Field(description="the task fired more often: only its newest 2,000 flows were counted")
    success_rate: float | None = Field(description="delivered / (delivered + failed); null when none finished")


class TaskPage(BaseModel):
    items: list[Task]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null at the end")


class BatchItem(BaseModel):
    index: int
    status: int = Field(description="201 created, 200 existing (same key), or the error's status")
    id: str | None = Field(default=None, description="the task's id (created or existing)")
    task: Task | None = None
    error: ErrorDetail | None = None


class BatchResult(BaseModel):
    created: int
    existing: int
    failed: int
    items: list[BatchItem]


# ---- flows ----------------------------------------------------------------------------------------


class Flow(BaseModel):
    id: str
    task_id: str
    scheduled_at: str
    scheduled_at_ms: int
    kind: FlowKindName
    status: FlowStatusName
    attempts: int
    missed: int
    next_attempt_at: str | None
    last_status_code: int | None
    last_error: str | None
    created_at: str
    updated_at: str
    routes: list[FlowRoute] | None = Field(
        default=None, description="a pool flow's sends: which executor got which attempt (newest last)"
    )
    payload: Any = Field(
        default=None,
        description="a manual flow's own payload (a trigger's override), sent instead of the task's; "
        f"{MASKED_FOR_VIEWERS}: secret-looking keys' values [masked]",
    )
    attempt_history: list[FlowAttempt] = Field(
        default_factory=list,
        description="what each send of each attempt gave, oldest first: the newest 25 only (attempt_total counts all)",
    )
    attempt_total: int = Field(default=0, description="sends recorded over the flow's life, kept or not")
    run: FlowRun | None = Field(
        default=None, description="the flow's newest run: an attempt its target accepted as a job run (202)"
    )


RunStatusName = Literal["running", "cancelling", "succeeded", "failed", "timed_out", "cancelled"]


class FlowRun(BaseModel):
    status: RunStatusName
    attempt: int = Field(description="the attempt the target accepted as this run")
    started_at: str
    deadline: str | None = Field(description="when it times out without a final report")
    reported_at: str | None = Field(description="its executor's last report")
    ended_at: str | None
    progress: int | str | None = Field(description="0..100, or a short text, as last reported")
    result: Any = Field(default=None, description="the final report's result (JSON, capped)")
    message: str | None = Field(description="the executor's last message (a failure's reason)")
    cancel_requested: bool
    cancel_requested_at: str | None


class RunLogLine(BaseModel):
    at: str
    attempt: int
    line: str


class RunReport(_Strict):
    """``POST /v1/flows/{id}/report``: an executor's report on the run it accepted."""

    NULLABLE = frozenset({"attempt", "progress", "result", "message"})  # null: not given (a result: JSON null)
    RULES = ({"if": {"properties": {"status": {"const": "running"}}}, "then": {"not": {"required": ["result"]}}},)

    status: Literal["running", "succeeded", "failed"] = Field(
        description="running: progress (a heartbeat); succeeded or failed: the run's end"
    )
    attempt: int | None = Field(
        default=None, ge=1, le=1_000_000, description="the tjobs-attempt header of the request that started the run"
    )
    progress: Annotated[int, Field(ge=0, le=100)] | Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="0..100, or a text of 1..200 characters"
    )
    result: Any = Field(default=None, description="JSON, a final report's only (runs.max_result_bytes: 413 past it)")
    message: str | None = Field(default=None, max_length=1000)


class RunReportAnswer(BaseModel):
    flow_id: str
    status: FlowStatusName = Field(description="the flow's status after the report")
    run: FlowRun
    cancel_requested: bool = Field(description="the run was asked to stop: stop, then report failed")
    repeated: bool = Field(description="the report repeated the one that ended the run: nothing changed")


class RunLog(_Strict):
    """``POST /v1/flows/{id}/log``: log lines of a run."""

    NULLABLE = frozenset({"attempt"})

    lines: list[str] = Field(
        min_length=1, max_length=500, description="at most runs.max_log_lines_per_call lines (500 by default)"
    )
    attempt: int | None = Field(default=None, ge=1, le=2**63 - 1)  # a larger integer: 422 out_of_range


class RunLogAnswer(BaseModel):
    appended: int
    dropped: int = Field(description="lines past runs.max_log_lines (over all the flow's runs), not kept")
    truncated: int = Field(description="lines cut to runs.max_log_line_bytes")
    log_lines: int = Field(description="the flow's log lines now")


class FlowDetail(Flow):
    answers: list[FlowAnswer] = Field(
        default_factory=list,
        description=(
            "what the receiver answered to the newest 5 sends that got an HTTP answer, oldest first: "
            "headers masked and capped, the body's first 4 KiB"
        ),
    )
    log: list[RunLogLine] | None = Field(
        default=None, description="a flow that ran: its run log, oldest first (runs.max_log_lines over all its runs)"
    )
    log_lines: int | None = Field(default=None, description="how many lines the run log holds, or held if purged")
    log_purged: bool | None = Field(
        default=None,
        description="the app's run log retention (run_log_retention_days) purged the log after the flow ended: "
        "log is empty, log_lines counts what it held; the run and its result stay",
    )
    child_flows: list[str] = Field(
        default_factory=list,
        description="the ids of the child flows this flow's ending triggered (README 'Child tasks')",
    )
    parent_flows: list[str] = Field(
        default_factory=list,
        description="the ids of the parent flows whose endings triggered this (child) flow (README 'Child tasks')",
    )


class FlowAnswer(BaseModel):
    attempt: int = Field(description="the attempt this answers")
    destination: str = Field(description="the URL, target:<name> or pool:… destination that answered")
    status_code: int
    headers: list[list[str]] = Field(
        description=(
            "[name, value] in the order they came: the first 32, each value cut at 256 characters; "
            "the values of secret-looking ones (Set-Cookie, Authorization, tokens, keys) as [masked]"
        )
    )
    body: str = Field(description="the body's first 4,096 bytes as UTF-8 (invalid bytes replaced)")
    body_bytes: int = Field(description="how many bytes of body were read (the transport reads at most 64 KiB)")
    body_truncated: bool = Field(description="body_bytes is more than the 4,096 kept")
    task_version: int = Field(description="the task's version whose callback and payload made the request")


class FlowAttempt(BaseModel):
    attempt: int = Field(description="the attempt number (a multicast attempt has one entry per destination)")
    started_at: str = Field(description="ISO-8601, when the send started")
    started_at_ms: int
    duration_ms: int = Field(description="from the send's start to its answer or failure")
    status_code: int | None = Field(description="the receiver's status; null when there was no answer")
    error: str | None = Field(description="why it failed (capped as last_error); null once delivered")
    destination: str = Field(description="the URL, target:<name> or pool:… destination that got it")
    executor: str | None = Field(description="the executor id that got it (pool flows)")
    lateness_ms: int = Field(description="started_at − scheduled_at; the first attempt's is the flow's lateness")


class FlowRoute(BaseModel):
    attempt: int
    destination: str = Field(
        description="pool:<name>, pool:<name>@<zone>, pool:<name>/<executor> or pool:<name>#<item>"
    )
    executor: str


class FlowList(BaseModel):
    items: list[Flow]


class FlowPage(BaseModel):
    items: list[Flow]
    next_cursor: str | None


class Redrive(_Strict):
    flow_ids: list[str] = Field(min_length=1, max_length=1000)


class RedriveItem(BaseModel):
    flow_id: str
    status: int
    flow: Flow | None = None
    error: ErrorDetail | None = None


class RedriveResult(BaseModel):
    redriven: int
    failed: int
    items: list[RedriveItem]


class FlowCount(BaseModel):
    matched: int = Field(ge=0, description="flows that match; with more: the count stopped there")
    more: bool = Field(description="more than matched flows match (the count reads at most at_most)")
    at_most: int


class DeadLetterCount(FlowCount):
    dead_before: str = Field(description="the dead letters counted died before this instant")
    dead_before_ms: int


class RedriveFilters(_Strict):
    """A redrive job's filters, as the dead-letter search's query takes them."""

    status: Literal["dead"] | None = None
    task_id: Annotated[str | None, Field(max_length=19, json_schema_extra={"pattern": TASK_ID_FILTER_PATTERN})] = None
    task_name_prefix: Annotated[str, Field(min_length=1, max_length=200, pattern=KEY_PATTERN)] | None = None
    target: Annotated[str, Field(pattern=TARGET_NAME_PATTERN)] | None = None
    last_answer: Annotated[str, Field(pattern=LAST_ANSWER_PATTERN)] | None = None
    window: Literal["15m", "1h", "24h", "7d"] | None = None
    from_: Annotated[str | None, Field(alias="from", max_length=40, json_schema_extra=INSTANT_FILTER)] = None
    to: Annotated[str | None, Field(max_length=40, json_schema_extra=INSTANT_FILTER)] = None


class RedriveJobStart(_Strict):
    filters: RedriveFilters = Field(default_factory=RedriveFilters)
    dead_before: (
        Annotated[str, Field(max_length=40, json_schema_extra=INSTANT_FILTER)]
        | Annotated[int, Field(ge=0, le=MAX_INSTANT_MS)]
        | None
    ) = Field(default=None, description="the dead letters died before it (ISO-8601 or ms; default now)")
    confirm_count: int = Field(ge=1, le=100_000, description="the count GET /v1/dead-letters:count answered")


class BackfillStart(_Strict):
    from_: (
        Annotated[str, Field(max_length=40, json_schema_extra=INSTANT_FILTER)]
        | Annotated[int, Field(ge=0, le=MAX_INSTANT_MS)]
    ) = Field(alias="from", description="the range's start, included (ISO-8601 with an offset, or epoch ms)")
    to: (
        Annotated[str, Field(max_length=40, json_schema_extra=INSTANT_FILTER)]
        | Annotated[int, Field(ge=0, le=MAX_INSTANT_MS)]
    ) = Field(description="the range's end, excluded; not in the future")
    pace_per_s: int = Field(default=10, ge=1, le=1000, description="flows started per second at most")


OperatorJobState = Literal["queued", "running", "done", "cancelled", "failed"]


class OperatorJob(BaseModel):
    id: str
    kind: str
    app_id: str
    state: OperatorJobState
    total: int
    processed: int
    failed: int
    cancel_requested: bool
    params: dict[str, Any]
    created_by: str
    created_at: str
    updated_at: str
    finished_at: str | None
    node: str | None = Field(description="the node that runs it, or ran it last")
    last_error: str | None
    errors: list[str] = Field(description="the newest failures, 'flow id: why'")
    position: Any = Field(
        default=None, description="where the walk goes on from: a backfill's last instant done (ms), a redrive's flow"
    )


class OperatorJobList(BaseModel):
    items: list[OperatorJob]


# ---- apps -------------------------------------------------------------------------------------------


class AppCreate(_Strict):
    NULLABLE = frozenset(
        {"max_active_tasks", "api_rate_limit_per_s", "create_rate_limit_per_s", "run_log_retention_days"}
    )  # null: default

    name: str = Field(min_length=1, max_length=100, pattern=NAME_PATTERN)
    rate_limit_per_s: float | None = Field(default=None, gt=0, le=1_000_000)
    max_concurrency: int | None = Field(default=None, ge=1, le=10_000)
    allowed_callback_hosts: list[str] | None = Field(
        default=None,
        max_length=100,
        description="host names, *.suffix, addresses or networks admitted despite the SSRF policy",
    )
    callback_defaults: CallbackDefaults | None = None
    max_active_tasks: int | None = Field(
        default=None, ge=0, le=1_000_000_000_000, description="0: the node's default quota"
    )
    api_rate_limit_per_s: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="API requests per second on each node (429 beyond); null: rate_limits.app_requests_per_s",
    )
    create_rate_limit_per_s: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="tasks registered per second on each node (429 beyond); null: rate_limits.app_creates_per_s",
    )
    run_log_retention_days: float | None = Field(
        default=None,
        gt=0,
        le=36_500,
        description="days a run's log is kept after its flow ended, then purged (the flow, its run and result "
        "stay; GET /v1/flows/{id} says log_purged); at most the node's retention.days (422 beyond); "
        "null: the flow's retention",
    )


class AppUpdate(_Strict):
    NULLABLE = AppCreate.NULLABLE

    name: str | None = Field(default=None, min_length=1, max_length=100, pattern=NAME_PATTERN)
    rate_limit_per_s: float | None = Field(default=None, gt=0, le=1_000_000)
    max_concurrency: int | None = Field(default=None, ge=1, le=10_000)
    allowed_callback_hosts: list[str] | None = Field(default=None, max_length=100)
    callback_defaults: CallbackDefaults | None = None
    max_active_tasks: int | None = Field(default=None, ge=0, le=1_000_000_000_000)
    api_rate_limit_per_s: float | None = Field(default=None, gt=0, le=1_000_000)
    create_rate_limit_per_s: float | None = Field(default=None, gt=0, le=1_000_000)
    run_log_retention_days: float | None = Field(default=None, gt=0, le=36_500)


class Rotate(_Strict):
    RULES = (  # something to rotate (both default to true)
        {
            "not": {
                "required": ["api_key", "secret"],
                "properties": {"api_key": {"const": False}, "secret": {"const": False}},
            }
        },
    )

    api_key: bool = True
    secret: bool = True
    grace_s: int = Field(
        default=86_400, ge=0, le=30 * 86_400, description="how long the old signing secret keeps signing beside the new"
    )


class AppOut(BaseModel):
    id: str
    name: str
    rate_limit_per_s: float
    max_concurrency: int
    created_at: str
    settings: dict[str, Any]
    api_key: str | None = Field(default=None, description="only in create and rotate answers; store it")
    secrets: list[str] | None = Field(
        default=None, description="signing secrets, newest first (create, rotate and show answers)"
    )
    disabled: bool = Field(description="an operator disabled it: its key answers 403, its tasks do not fire")
    disabled_at: str | None = Field(description="when it was disabled")


class AppPage(BaseModel):
    items: list[AppOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null at the end")


class AppDeleted(BaseModel):
    id: str
    deleted_tasks: int = Field(description="tasks deleted with it (their pending flows cancelled)")


class Lateness(BaseModel):
    count: int
    p50_s: float | None
    p90_s: float | None
    p99_s: float | None


class AppStats(BaseModel):
    app_id: str
    active_tasks: int
    paused_tasks: int
    completed_tasks: int
    dead_letters: int
    dead_letters_capped: bool = Field(description="always false: every dead letter is counted (kept for clients)")
    counted_at_ms: int | None = Field(
        description=(
            "when the read behind these task and dead-letter numbers started (epoch ms): they are read at "
            "the request, every node's writes committed before it included (never null; kept nullable for clients)"
        )
    )
    fires: int = Field(description="fires committed by this node since it started")
    callback_failures: int = Field(description="failed callback attempts on this node since it started")
    fire_lateness: Lateness = Field(description="this node, since it started (bucketed)")
    fire_lateness_recent: dict[str, Lateness] = Field(
        description="this node, over the last 1m, 5m and 1h (keys '1m', '5m', '1h')"
    )


# ---- schedules ----------------------------------------------------------------------------------

# an instant from 1970 on (epoch ms are never negative): ISO-8601 with an offset, or epoch ms in digits
PreviewFrom = Annotated[
    str,
    Field(
        json_schema_extra={"anyOf": INSTANT_FORMS},
    ),
]


class SchedulePreviewRequest(_Strict):
    NULLABLE = frozenset({"from"})  # null: now

    schedule: Schedule = Field(description="as in a task create; validated the same way")
    count: int = Field(default=10, ge=1, le=100, description="how many instants")
    from_: PreviewFrom | Annotated[int, Field(ge=0, le=MAX_INSTANT_MS)] | None = Field(
        default=None,
        alias="from",
        description="list instants at or after this one (ISO-8601 with an offset, or epoch ms); default: now",
    )
    task_id: int = Field(
        default=0, ge=0, le=(1 << 63) - 1, description="the task whose jitter fires_at shows (its id seeds it)"
    )


class PreviewInstant(BaseModel):
    at: str = Field(description="UTC, ISO-8601")
    at_ms: int = Field(description="UTC epoch milliseconds")
    local: str = Field(description="the wall time in the schedule's zone, with its UTC offset")
    utc_offset: str = Field(description="the zone's UTC offset at this instant, e.g. +02:00")
    fires_at: str | None = Field(default=None, description="with jitter_ms: when this instant fires (UTC)")
    fires_at_ms: int | None = Field(default=None, description="with jitter_ms: when it fires, epoch ms")


class SchedulePreview(BaseModel):
    schedule: dict[str, Any] = Field(description="the canonical schedule, as a task would store it")
    timezone: str = Field(description="the zone of local (a cron's own; UTC for the other kinds)")
    instants: list[PreviewInstant] = Field(description="the next instants, DST policies applied, oldest first")
    ended: bool = Field(description="true if the schedule has no instant after the last one listed")
    note: str | None = Field(
        default=None, description="a fixed_delay: only its first run is listed; each later one follows a run's end"
    )


# ---- calendars ----------------------------------------------------------------------------------


class CalendarSpan(_Strict):
    from_: str = Field(alias="from")
    to: str


class CalendarWrite(_Strict):
    """A calendar's rules (each list optional), and/or an iCalendar text whose VEVENTs are added."""

    dates: list[str] | None = Field(default=None, max_length=1000, description="local dates YYYY-MM-DD")
    ranges: list[CalendarSpan] | None = Field(default=None, max_length=1000, description="local dates, inclusive")
    weekdays: list[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]] | None = Field(
        default=None, max_length=1000
    )
    annual: list[str] | None = Field(default=None, max_length=1000, description="MM-DD, every year")
    periods: list[CalendarSpan] | None = Field(
        default=None, max_length=1000, description="local wall time YYYY-MM-DDTHH:MM:SS, [from, to)"
    )
    ical: str | None = Field(default=None, description="an iCalendar text (VEVENTs; simple yearly/weekly RRULEs)")
    timezone: str | None = Field(default=None, description="the zone iCalendar UTC times are read in (UTC)")


class StoredCalendar(BaseModel):
    name: str
    dates: list[str] | None = None
    ranges: list[dict[str, str]] | None = None
    weekdays: list[str] | None = None
    annual: list[str] | None = None
    periods: list[dict[str, str]] | None = None
    version: int
    created_at: str
    updated_at: str


class CalendarList(BaseModel):
    items: list[StoredCalendar]


# ---- operations ---------------------------------------------------------------------------------------


class Health(BaseModel):
    status: str
    node: str


class Ready(BaseModel):
    status: Literal["ready"]


# ---- the shard map (admin) ------------------------------------------------------------------------------


class ShardServer(BaseModel):
    server: str = Field(description="host:port")
    databases: list[int] = Field(description="the logical databases it holds")


class ShardDatabase(BaseModel):
    database: int = Field(description="the logical database's index")
    server: str = Field(description="host:port of the server holding it")
    tasks: int
    flows: int


class Shards(BaseModel):
    epoch: int = Field(description="the shard map's epoch: grows with every change")
    servers: list[ShardServer]
    databases: list[ShardDatabase]


class ShardPlanRequest(_Strict):
    servers: list[str] = Field(
        min_length=1, description="the server list to spread the logical databases over (host:port), first unchanged"
    )


class ShardMove(BaseModel):
    database: int
    from_: str = Field(alias="from", description="host:port it is on")
    to: str = Field(description="host:port it would move to")


class ShardMoveRecord(BaseModel):
    database: int = Field(description="the logical database moved")
    from_: str = Field(alias="from", description="host:port it is moved from (no credentials)")
    to: str = Field(description="host:port it is moved to (no credentials)")
    step: Literal["copying", "catching_up", "cutting_over", "done"]
    outcome: Literal["in_progress", "moved"] = Field(
        description="moved once the map names the target (listed until drop-old); an abort leaves no record"
    )
    rows_copied: int = Field(description="rows the bulk copy copied")
    tables_copied: int = Field(description="tables the bulk copy finished (a rerun of the move skips them)")
    lag_rows: int = Field(description="changed rows the target is behind the source, last measured (0 once moved)")
    started_at: str | None = Field(description="ISO-8601")
    finished_at: str | None = Field(description="ISO-8601, when the map named the target")
    cut_over_pause_s: float | None = Field(description="how long writes to the database were refused at the cut-over")
    epoch: int | None = Field(description="the map epoch that names the target")


class ShardMoves(BaseModel):
    moves: list[ShardMoveRecord] = Field(description="in database order")


class ShardPlan(BaseModel):
    epoch: int = Field(description="the epoch of the map the plan was made from")
    moves: list[ShardMove] = Field(description="in database order; empty when the spread is already even")
