"""The records tjobs stores and passes between its parts: apps, tasks, flows, fire plans, attempt results.

Instants are UTC epoch milliseconds (``*_ms``) everywhere in this module; the API converts to and
from tz-aware datetimes at the edge. A task's ``schedule`` and ``callback`` are typed, immutable values
(:mod:`tjobs.specs`), parsed once at the edge and kept as JSON by the stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from tjobs.specs import CallbackSpec, ScheduleSpec
from tjobs.specs import ScheduleKind as ScheduleKind  # re-exported: it lives with the schedule specs


class MisfirePolicy(StrEnum):
    FIRE_NOW = "fire_now"
    FIRE_SOON = "fire_soon"
    SKIP = "skip"
    CATCH_UP = "catch_up"


class DeliveryMode(StrEnum):
    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


class TaskStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"


class FlowStatus(StrEnum):
    PENDING = "pending"  # committed; an attempt is due at next_attempt_at_ms
    SENDING = "sending"  # at-most-once: the single attempt is recorded before it is sent
    DELIVERED = "delivered"
    DEAD = "dead"  # gave up: attempts or age exhausted, or a permanent failure
    SKIPPED = "skipped"  # a misfire recorded under the skip policy; never sent
    CANCELLED = "cancelled"  # the task was deleted before delivery finished
    UNKNOWN = "unknown"  # at-most-once attempt whose outcome a crash lost; never resent
    RUNNING = "running"  # the target accepted the attempt as a run; its executor reports the end
    CANCELLING = "cancelling"  # a run asked to stop; the executor learns it from its next report's answer

    @property
    def terminal(self) -> bool:
        return self not in _OPEN_FLOW_STATUSES

    @property
    def deliverable(self) -> bool:
        """Whether delivery may send it (a run is not sent again: it ends by a report or its timeout)."""
        return self is FlowStatus.PENDING or self is FlowStatus.SENDING

    @property
    def running(self) -> bool:
        """A run is live: running, or cancelling."""
        return self is FlowStatus.RUNNING or self is FlowStatus.CANCELLING

    @property
    def triggers_children(self) -> bool:
        """An ending that triggers a task's children (README "Child tasks"): ``delivered`` its on_success,
        ``dead`` its on_failure. Such a flow's ``next_attempt_at_ms`` marks its children still due."""
        return self is FlowStatus.DELIVERED or self is FlowStatus.DEAD


_OPEN_FLOW_STATUSES = frozenset({FlowStatus.PENDING, FlowStatus.SENDING, FlowStatus.RUNNING, FlowStatus.CANCELLING})


class FlowKind(StrEnum):
    SCHEDULED = "scheduled"
    MISFIRE = "misfire"  # fired past the misfire threshold under a policy
    MANUAL = "manual"  # "trigger now"


@dataclass(slots=True)
class App:
    """A tenant. ``secrets`` sign callbacks (newest first; all listed ones are used while rotating)."""

    id: str
    name: str
    api_key_hash: str
    secrets: list[str]
    rate_limit_per_s: float = 1000.0
    max_concurrency: int = 100
    created_at_ms: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def disabled_at_ms(self) -> int | None:
        """When an operator disabled the app (``settings["disabled_at_ms"]``); ``None`` while enabled."""
        value = self.settings.get(DISABLED_AT)
        return int(value) if value is not None else None


DISABLED_AT = "disabled_at_ms"
"""The key of :attr:`App.settings` holding when the app was disabled (absent while it is enabled)."""


@dataclass(slots=True)
class Task:
    """A registered timer.

    ``version`` moves on every change of the row, fires included: the fire compare-and-set checks it.
    ``revision`` moves only on the owner's edits (update, pause, resume): it is the ``version`` the API
    shows and checks, so a fire never makes an owner's edit conflict.
    """

    id: int
    app_id: str
    name: str
    key: str | None
    schedule: ScheduleSpec
    callback: CallbackSpec
    payload: Any
    misfire_policy: MisfirePolicy
    delivery: DeliveryMode
    status: TaskStatus
    next_run_at_ms: int | None
    version: int
    fire_count: int
    created_at_ms: int
    updated_at_ms: int
    revision: int = 1
    children: TaskChildren | None = None  # the tasks its flows' endings trigger; None: none


@dataclass(frozen=True, slots=True)
class TaskChildren:
    """The tasks a task's flow triggers when it ends (README "Child tasks"): ``on_success`` when it ends
    ``delivered`` (a delivery answered 2xx, or a run reported succeeded), ``on_failure`` when it ends
    ``dead``; ids of tasks of the same app, in the order given."""

    on_success: tuple[int, ...] = ()
    on_failure: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.on_success or self.on_failure)

    @property
    def all(self) -> tuple[int, ...]:
        """Every child, each once, ``on_success`` first."""
        return tuple(dict.fromkeys(self.on_success + self.on_failure))


@dataclass(frozen=True, slots=True)
class DueTask:
    """The few columns a cycle load reads: enough to place a task in the wheel, nothing more."""

    task_id: int
    next_run_at_ms: int
    version: int
    app_id: str
    misfire_policy: MisfirePolicy | None = None  # lets the runner pace overdue fire_soon/catch_up loads


@dataclass(slots=True)
class Flow:
    """The durable record of one fire. ``(task_id, scheduled_at_ms)`` is unique."""

    task_id: int
    scheduled_at_ms: int
    app_id: str
    kind: FlowKind
    status: FlowStatus
    attempts: int
    next_attempt_at_ms: int | None
    created_at_ms: int
    updated_at_ms: int
    missed: int = 0  # occurrences this fire stands for beyond its own (collapsed or skipped misfires)
    last_status_code: int | None = None
    last_error: str | None = None
    routes: tuple[FlowRoute, ...] = ()  # a pool flow's sends, newest last (tjobs.delivery.pool_dispatcher)
    # the flow's own payload as JSON text (a trigger's override, sent on every attempt); None: the task's payload
    payload_json: str | None = None
    attempt_log: AttemptLog | None = None  # the recent attempts' outcomes; None: none recorded yet
    answers: tuple[AttemptAnswer, ...] | None = None  # the newest sends' answers, oldest first; None: none yet
    run: FlowRun | None = None  # the newest run of the flow (an attempt a target accepted as a run); None: none
    run_log: str | None = None  # the runs' log lines, one JSON object a line (tjobs.service.run_log)
    run_log_lines: int = 0  # how many lines run_log holds (or held, when its app's log retention purged it)

    @property
    def id(self) -> str:
        return flow_id(self.task_id, self.scheduled_at_ms)

    @property
    def run_log_purged(self) -> bool:
        """The app's run log retention (``run_log_retention_days``) cleared the log: lines were counted,
        none is kept. An empty log that never had a line is not purged."""
        return self.run_log is None and self.run_log_lines > 0


class RunStatus(StrEnum):
    """Where a run is: live (``running``, ``cancelling``) or how it ended."""

    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self is not RunStatus.RUNNING and self is not RunStatus.CANCELLING


@dataclass(frozen=True, slots=True)
class FlowRun:
    """One run of a flow: the attempt a target accepted as a run (an HTTP ``202`` with ``tjobs-run:
    accepted``, docs/targets.md "Runs") and what its executor reported since. ``deadline_ms`` is when it
    times out (``None``: never); ``progress`` is 0..100 or a short text; ``result`` is the final report's
    JSON value (``None``: none given); ``message`` the executor's last words (a failure's reason)."""

    status: RunStatus
    attempt: int
    started_at_ms: int
    deadline_ms: int | None = None
    reported_at_ms: int | None = None
    ended_at_ms: int | None = None
    progress: int | str | None = None
    result: Any = None
    message: str | None = None
    cancel_requested_at_ms: int | None = None


MAX_ATTEMPT_RECORDS = 25
"""How many attempt records a flow keeps (the newest); :attr:`AttemptLog.total` still counts them all."""


class AttemptRecord(NamedTuple):
    """What one send of one attempt of a flow gave: ``attempt`` number, when it started and how long it
    took, the receiver's ``status_code`` (``None``: no answer), the error (``None`` once delivered; capped
    as ``last_error``) and the ``destination`` (URL, ``target:<name>`` or ``pool:…``) with the executor
    id that got it (pool flows; ``None`` otherwise). Immutable like the dataclasses here, but a
    ``NamedTuple``: the deliverer makes one per send, and a frozen dataclass is dearer to make
    (docs/benchmarks.md, "The attempt history's cost")."""

    attempt: int
    started_at_ms: int
    duration_ms: int
    status_code: int | None
    error: str | None
    destination: str
    executor: str | None = None


class AttemptLog(NamedTuple):
    """A flow's attempt history: the newest :data:`MAX_ATTEMPT_RECORDS` records, oldest first, and how
    many were ever recorded (``total`` ≥ ``len(records)``). A ``NamedTuple`` (one per outcome that
    made a send), like :class:`AttemptRecord`."""

    records: tuple[AttemptRecord, ...]
    total: int

    def appended(self, new: Sequence[AttemptRecord]) -> AttemptLog:
        kept = (*self.records, *new)[-MAX_ATTEMPT_RECORDS:]
        return AttemptLog(kept, self.total + len(new))


EMPTY_ATTEMPT_LOG = AttemptLog((), 0)

MAX_ANSWER_RECORDS = 5
"""How many sends' answers a flow keeps (the newest; its attempt history keeps more, without answers)."""
ANSWER_BODY_BYTES = 4096
"""How much of an answer's body a flow keeps: its first 4 KiB (``body_bytes`` says how long it was)."""
ANSWER_HEADERS_KEPT = 32
"""How many of an answer's headers a flow keeps (the first, in the order they came)."""
ANSWER_HEADER_CHARS = 256
"""How much of each kept header's value a flow keeps."""


class ReceivedAnswer(NamedTuple):
    """What a receiver answered to one HTTP send, as a transport hands it over: the ``headers`` in the
    order they came (at most :data:`ANSWER_HEADERS_KEPT`, each value cut at :data:`ANSWER_HEADER_CHARS`,
    secrets already masked: :func:`tjobs.delivery.answers.received_answer`), the ``body``'s first
    :data:`ANSWER_BODY_BYTES` and how many bytes of it were read (``body_bytes``; the transport reads
    no further than its cap, ``tjobs.delivery.transport.MAX_BODY_BYTES``)."""

    headers: tuple[tuple[str, str], ...]
    body: bytes
    body_bytes: int


class AttemptAnswer(NamedTuple):
    """One send's answer as a flow keeps it (its newest :data:`MAX_ANSWER_RECORDS`, sends that got an
    HTTP answer only): the attempt and destination it answers, the ``status_code``, the headers and body of
    :class:`ReceivedAnswer` (the body as UTF-8 text, invalid bytes replaced), and the ``task_revision``
    whose callback and payload made the request (so a page can tell whether the task's current version
    would send the same)."""

    attempt: int
    destination: str
    status_code: int
    headers: tuple[tuple[str, str], ...]
    body: str
    body_bytes: int
    task_revision: int

    @property
    def truncated(self) -> bool:
        """The body kept is the answer's first bytes only."""
        return self.body_bytes > ANSWER_BODY_BYTES


FlowRoute = tuple[int, str, str]
"""One send of a pool flow: ``(attempt, destination, executor id)`` — which executor got which attempt."""


def flow_id(task_id: int, scheduled_at_ms: int) -> str:
    """The flow's public id and callback idempotency key; it routes by its task id."""
    return f"{task_id}-{scheduled_at_ms}"


@dataclass(frozen=True, slots=True)
class TaskHealth:
    """A task's recent results, for its row in a list (:meth:`tjobs.stores.contracts.TaskRecords.task_health`):
    its newest flow's status, instant, last change and attempts (``None``: it never fired), and of its flows
    scheduled in a window, the newest ``counted`` (at most the read's cap) by outcome: ``delivered``,
    ``dead`` and still ``open`` (pending, sending, or a live run; skipped and cancelled count in ``counted`` only)."""

    last_status: FlowStatus | None = None
    last_scheduled_at_ms: int | None = None
    last_changed_at_ms: int | None = None
    last_attempts: int = 0
    delivered: int = 0
    dead: int = 0
    open: int = 0
    counted: int = 0

    @classmethod
    def of(cls, newest: tuple[FlowStatus, int, int, int] | None, counts: dict[FlowStatus, int]) -> TaskHealth:
        """From the newest flow's ``(status, scheduled_at_ms, updated_at_ms, attempts)`` and the window's
        flows counted per status."""
        open_ = sum(n for status, n in counts.items() if not status.terminal)
        counted = sum(counts.values())
        delivered, dead = counts.get(FlowStatus.DELIVERED, 0), counts.get(FlowStatus.DEAD, 0)
        if newest is None:
            return cls(delivered=delivered, dead=dead, open=open_, counted=counted)
        status, scheduled_at_ms, changed_at_ms, attempts = newest
        return cls(status, scheduled_at_ms, changed_at_ms, attempts, delivered, dead, open_, counted)

    @property
    def success_rate(self) -> float | None:
        """Delivered of the window's finished flows (delivered or dead); ``None`` when none finished."""
        finished = self.delivered + self.dead
        return None if finished == 0 else self.delivered / finished


MAX_ID = (1 << 63) - 1  # ids and instants are signed 64-bit in every store


def _digits(text: str) -> bool:
    # isdigit() alone admits '²', which int() refuses; more than 19 digits is beyond 64 bits
    return text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= MAX_ID


def parse_flow_id(text: str) -> tuple[int, int]:
    task_part, sep, scheduled_part = text.partition("-")
    if not sep or not _digits(task_part) or not _digits(scheduled_part):
        raise ValueError(f"not a flow id: {text!r}")
    return int(task_part), int(scheduled_part)


@dataclass(frozen=True, slots=True)
class FireIntent:
    """A wheel entry that came due: fire ``task_id`` if it is still at ``(scheduled_at_ms, version)``."""

    task_id: int
    scheduled_at_ms: int
    version: int


@dataclass(slots=True)
class NewFlow:
    scheduled_at_ms: int
    kind: FlowKind
    status: FlowStatus
    attempts: int = 0
    next_attempt_at_ms: int | None = None
    missed: int = 0

    def flow_of(self, task: Task, now_ms: int) -> Flow:
        """The flow a fire of ``task`` records for this, written at ``now_ms``."""
        return Flow(
            task.id,
            self.scheduled_at_ms,
            task.app_id,
            self.kind,
            self.status,
            self.attempts,
            self.next_attempt_at_ms,
            now_ms,
            now_ms,
            self.missed,
        )


@dataclass(slots=True)
class FirePlan:
    """What one fire does to its task, decided by a pure planner from the locked task row and ``now``.

    ``flows`` may be empty (nothing to record), ``next_run_at_ms`` ``None`` completes the task.
    """

    flows: list[NewFlow]
    next_run_at_ms: int | None
    status: TaskStatus
    fires_added: int


@dataclass(slots=True)
class FireOutcome:
    """What became of one intent of a fire batch: committed, rejected or failed.

    - committed: ``task`` is the row after the update, ``flows`` the rows inserted for it;
    - rejected: the CAS failed (or the planner declined): ``task`` is ``None``, no flow, the task untouched;
    - failed: the intent's transaction did not commit and ``error`` says why; ``task`` is ``None`` and
      no flow. The intent may be committed again as it stands (see ``TaskStore.commit_fires``).
    """

    intent: FireIntent
    task: Task | None
    flows: list[Flow]
    error: Exception | None = None

    @property
    def committed(self) -> bool:
        return self.task is not None

    @property
    def failed(self) -> bool:
        return self.error is not None


SLO_LATENESS_SLOTS = 15
"""Lateness histogram slots of the service levels: one per bucket bound of
:data:`tjobs.observability.metrics.LATENESS_BUCKETS_S`, plus one past the last."""

_NO_LATENESS = (0,) * SLO_LATENESS_SLOTS


@dataclass(frozen=True, slots=True)
class SloCounts:
    """What one app's fires and flows came to over some minutes: ``fires`` committed, flows finished
    ``delivered`` or ``dead``, ``misses`` (missed occurrences: misfires, collapsed or skipped),
    ``throttled`` callbacks, and three lateness histograms (a count per histogram slot), each against
    the flow's scheduled instant:

    - ``lateness``: the fire's *commit* lateness (its fire transaction committed);
    - ``first_send_lateness``: its first attempt's lateness when the request was written (one count
      per destination of the first attempt);
    - ``first_answer_lateness``: the same attempts' lateness when the receiver's answer came back
      (or the attempt ended without one): what a receiver sees, and what the SLO holds to its objective.
    """

    fires: int = 0
    delivered: int = 0
    dead: int = 0
    misses: int = 0
    throttled: int = 0
    lateness: tuple[int, ...] = _NO_LATENESS
    first_send_lateness: tuple[int, ...] = _NO_LATENESS
    first_answer_lateness: tuple[int, ...] = _NO_LATENESS

    def values(self) -> tuple[int, ...]:
        """Every count in one flat tuple: the five counts, then each histogram's slots in field order
        (the stores' column order: :data:`tjobs.stores.schema_slo.SLO_SUMMED_COLUMNS`)."""
        return (
            self.fires,
            self.delivered,
            self.dead,
            self.misses,
            self.throttled,
            *self.lateness,
            *self.first_send_lateness,
            *self.first_answer_lateness,
        )

    @classmethod
    def from_values(cls, values: Sequence[int]) -> SloCounts:
        """The inverse of :meth:`values`."""
        if len(values) != SLO_VALUES:
            raise ValueError(f"{len(values)} service-level values, not {SLO_VALUES}")
        slots = SLO_LATENESS_SLOTS
        histograms = [tuple(values[5 + k * slots : 5 + (k + 1) * slots]) for k in range(3)]
        return cls(values[0], values[1], values[2], values[3], values[4], *histograms)

    def added(self, other: SloCounts) -> SloCounts:
        """These counts and ``other``'s, summed count by count."""
        return SloCounts.from_values([a + b for a, b in zip(self.values(), other.values(), strict=True)])


SLO_VALUES = 5 + 3 * SLO_LATENESS_SLOTS
"""How many numbers :meth:`SloCounts.values` holds."""


@dataclass(frozen=True, slots=True)
class SloMinute:
    """One app's :class:`SloCounts` in one minute (``minute``: epoch ms // 60,000) on one node."""

    app_id: str
    minute: int
    counts: SloCounts


@dataclass(frozen=True, slots=True)
class FlowUpdate:
    """A delivery outcome to record on a flow (batched by the store)."""

    task_id: int
    scheduled_at_ms: int
    status: FlowStatus
    attempts: int
    next_attempt_at_ms: int | None
    last_status_code: int | None = None
    last_error: str | None = None
    routes: tuple[FlowRoute, ...] | None = None  # a pool flow's route log as it is now; None: unchanged
    attempt_log: AttemptLog | None = None  # the flow's attempt history as it is now; None: unchanged
    answers: tuple[AttemptAnswer, ...] | None = None  # the newest sends' answers as they are now; None: unchanged
    # a fixed_delay task's next run, set by the flow's final outcome in the same write (None: none)
    reschedule: Reschedule | None = None
    run: FlowRun | None = None  # the flow's run as it is now; None: unchanged
    # the child flows this ending triggers once it is written (README "Child tasks"); never stored
    children: ChildTrigger | None = None


@dataclass(frozen=True, slots=True)
class ChildTrigger:
    """The children a flow's ending triggers (:mod:`tjobs.delivery.child_triggers`): tasks ``task_ids`` of
    app ``app_id``, each sent ``payload_json`` (the parent's result as JSON text) in a manual flow at the
    parent's instant (:mod:`tjobs.service.child_flows`)."""

    app_id: str
    task_ids: tuple[int, ...]
    payload_json: str


@dataclass(frozen=True, slots=True)
class Reschedule:
    """A fixed_delay task's next run, set with its flow's final outcome (:mod:`tjobs.schedules.fixed_delay`):
    ``next_run_at = next_run_at_ms`` where the task is still active and parked where its fire put it
    (``next_run_at = parked_at_ms`` and ``version = version``); otherwise a pause, an edit, a delete or
    a later fire came first and nothing changes. The version is left as it is, so the change told to the
    task's owner (:class:`tjobs.hot_tier.base.TaskChange` at ``version``) never outranks theirs."""

    app_id: str
    parked_at_ms: int
    version: int
    next_run_at_ms: int


class Outcome(StrEnum):
    """What one attempt means for its flow (the classification table: :mod:`tjobs.delivery.retry`; the
    transport contract: :mod:`tjobs.delivery.transport`)."""

    DELIVERED = "delivered"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt to one target gave.

    ``status`` is the receiver's answer (``None`` when there was none: a timeout, a connection error,
    a vetoed target). ``retry_after_ms`` is the delay a ``429``/``503`` asked for, already capped by
    ``max_retry_after_s``; ``None`` when the receiver did not say. ``error`` is a short,
    human-readable reason for anything but a delivery.

    ``answer`` keeps what an HTTP receiver answered (headers, the body's first bytes) for the flow's page.

    ``started_ms`` is when the transport took the attempt; ``sent_ms`` when it had written the request
    (the lean HTTP transport; ``None`` where the transport cannot tell: then ``started_ms`` stands for
    it); the answer came ``duration_s`` after ``started_ms`` (:attr:`answered_ms`).
    """

    flow_id: str
    url: str
    attempt: int
    outcome: Outcome
    status: int | None
    error: str | None
    retry_after_ms: int | None
    started_ms: int
    duration_s: float
    sent_ms: int | None = None
    answer: ReceivedAnswer | None = None  # the answer's headers and first bytes (HTTP transports; None: no answer)

    @property
    def answered_ms(self) -> int:
        """When the answer came back (or the attempt ended without one)."""
        return self.started_ms + round(self.duration_s * 1000)


# A shard move's recorded steps (``MoveRow.state``, :mod:`tjobs.cluster.shard_move`), in order; ``done``
# once the shard map names the target.
COPYING, CATCHING_UP, CUTTING_OVER, DONE = "copying", "catching_up", "cutting_over", "done"
MOVE_STEPS = (COPYING, CATCHING_UP, CUTTING_OVER)  # the steps of a move in progress, in order
