"""One flow being delivered (:class:`Delivery`: its message, the destinations not delivered yet, its
retry budget, attempt history and the newest answers), as the deliverer (:mod:`tjobs.delivery.deliverer`) keeps it
in memory between the commit of a fire and its outcome; the apps' queues of them are :mod:`tjobs.delivery.lanes`.
Its message (headers and body, three fifths of a queued delivery's memory) is built at its first attempt, not
while it waits in a queue (``python -m benchmarks queue_memory``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from sharding import shard_of_task_id
from tjobs.delivery.answers import answers_appended, attempt_answers
from tjobs.delivery.foreign_flows import OwnerWindow
from tjobs.delivery.lookup import CallbackJob
from tjobs.delivery.message import CallbackMessage, destinations_of
from tjobs.delivery.pool_dispatcher import PoolFlow, hash_key_of
from tjobs.delivery.transport import AttemptResult, Outcome
from tjobs.model import (
    EMPTY_ATTEMPT_LOG,
    MAX_ATTEMPT_RECORDS,
    AttemptAnswer,
    AttemptLog,
    AttemptRecord,
    DeliveryMode,
    Flow,
    FlowStatus,
    FlowUpdate,
)
from tjobs.settings import CallbackSettings
from tjobs.targets.model import GrpcTarget, HttpTarget, RetryBudget, Target, retry_budget, tracking_key

logger = logging.getLogger(__name__)


class Delivery:
    """One flow being delivered: in a queue, in an attempt, or waiting for its retry timer."""

    __slots__ = (
        "_message",
        "_timeout_ms",
        "answers",
        "at_most_once",
        "attempt",
        "attempt_log",
        "backoff_base_ms",
        "backoff_max_ms",
        "deadline_ms",
        "flow_id",
        "job",
        "last_error",
        "last_status",
        "lost",
        "max_attempts",
        "named",
        "pool",
        "queued",
        "queued_mono_ms",
        "recheck",
        "record_sending",
        "retry_at_ms",
        "targets",
        "timer",
        "turn",
        "window",
    )

    def __init__(self, job: CallbackJob, flow_id: str, settings: CallbackSettings) -> None:
        task, flow = job.task, job.flow
        callback = task.callback
        self.job = job
        self.flow_id = flow_id
        self._message: CallbackMessage | None = None  # built at its first attempt (the module)
        self._timeout_ms = settings.timeout_ms
        self.targets: list[str] = destinations_of(callback)  # the destinations not delivered yet
        # name -> the target as last read, for a task naming targets (None: inline URLs)
        self.named: dict[str, Target | None] | None = None
        if callback.targets:
            if job.targets is None:
                raise ValueError("the callback names targets and no target directory was given")
            self.named = dict(job.targets)
        pool = callback.pool  # an executor pool: the dispatcher's state of this flow (tjobs.delivery.pool_dispatcher)
        self.pool = None
        if pool is not None:  # its route log and failover go on from what is stored (a re-drive, a run's retry)
            self.pool = PoolFlow(job.app.id, pool, hash_key_of(pool, task.id, task.key), routes=list(flow.routes))
            for _, destination, executor_id in flow.routes:  # the executors it tried are passed over while others live
                self.pool.tried.setdefault(destination, []).append(executor_id)
        self.at_most_once = task.delivery is DeliveryMode.AT_MOST_ONCE
        # A `sending` flow already counts its single attempt; otherwise this is the next one.
        self.record_sending = self.at_most_once and flow.status is not FlowStatus.SENDING
        self.attempt = flow.attempts if flow.status is FlowStatus.SENDING else flow.attempts + 1
        if self.named is None:  # inline URLs: the task's values, else the node's
            max_attempts = settings.max_attempts if callback.max_attempts is None else callback.max_attempts
            self.max_attempts = 1 if self.at_most_once else max_attempts
            max_age_s = settings.max_age_s if callback.max_age_s is None else callback.max_age_s
            self.deadline_ms = flow.scheduled_at_ms + max_age_s * 1000
            self.backoff_base_ms = settings.backoff_base_ms
            self.backoff_max_ms = settings.backoff_max_ms
        else:
            self.budget(settings)
        self.last_status: int | None = flow.last_status_code
        self.last_error: str | None = flow.last_error
        self.attempt_log: AttemptLog | None = flow.attempt_log  # None until this delivery sends something
        self.answers: tuple[AttemptAnswer, ...] | None = flow.answers  # None until an answer comes
        self.timer: asyncio.TimerHandle | None = None
        self.retry_at_ms: int | None = None  # waits for its retry (its timer, then its turn in the queue)
        self.queued = False  # waits in its lane for one of the app's max_concurrency workers
        self.turn = -1  # while in its lane's queue, how many were queued there before it (tjobs.delivery.lanes)
        self.queued_mono_ms = 0  # when it was last queued there, by its lanes' monotonic clock
        self.recheck = False  # a retry, or one long in its queue: read the stored status before sending it
        self.lost = False  # its shard was handed over: nothing more of it is sent from here
        self.window: OwnerWindow | None = None  # its shard is not this node's (tjobs.delivery.foreign_flows)

    @property
    def message(self) -> CallbackMessage:
        """The flow's callback message, built on first use (its first attempt) and kept for its retries."""
        if self._message is None:
            job = self.job
            self._message = CallbackMessage(job.task, job.flow, job.app, self.flow_id, self._timeout_ms)
        return self._message

    def budget(self, settings: CallbackSettings) -> None:
        """Set the retry budget of a flow naming targets: the task's explicit values, else its targets'
        retry policies (the largest over several targets), else the node's defaults."""
        callback = self.job.task.callback
        assert self.named is not None
        policies = tuple(t.retry for t in self.named.values() if t is not None)
        defaults = RetryBudget(
            settings.max_attempts, settings.max_age_s, settings.backoff_base_ms, settings.backoff_max_ms
        )
        budget = retry_budget(callback.max_attempts, callback.max_age_s, policies, defaults)
        self.max_attempts = 1 if self.at_most_once else budget.max_attempts
        self.deadline_ms = self.job.flow.scheduled_at_ms + budget.max_age_s * 1000
        self.backoff_base_ms = budget.backoff_base_ms
        self.backoff_max_ms = budget.backoff_max_ms

    def spent(self, now_ms: int) -> str | None:
        """Why a re-driven flow may not be sent again (its attempts or its age spent); ``None``: it may. An
        at-most-once flow's single attempt is already counted: never spent here."""
        if self.at_most_once:
            return None
        if self.attempt > self.max_attempts:
            return f"gave up after {self.attempt - 1} attempts"
        return "max_age_s exceeded" if now_ms > self.deadline_ms else None

    def update(self, status: FlowStatus, attempts: int, next_attempt_at_ms: int | None) -> FlowUpdate:
        flow = self.job.flow
        routes = None if self.pool is None else tuple(self.pool.routes)
        return FlowUpdate(
            flow.task_id,
            flow.scheduled_at_ms,
            status,
            attempts,
            next_attempt_at_ms,
            self.last_status,
            self.last_error,
            routes,
            self.attempt_log,
            self.answers,
        )

    def log_attempts(self, results: Sequence[AttemptResult]) -> None:
        """Add what this attempt's sends gave to the flow's attempt history (written with its outcome).
        Once per send on the fire path: a flow's first history is made as it is, not appended to an
        empty one, and only a pool flow looks up executors."""
        pool = self.pool
        executors = None if pool is None else {(a, d): e for a, d, e in pool.routes}
        records = tuple(
            [
                AttemptRecord(
                    r.attempt,
                    r.started_ms,
                    max(0, round(r.duration_s * 1000)),
                    r.status,
                    r.error,
                    r.url,
                    None if executors is None else executors.get((r.attempt, r.url)),
                )
                for r in results
            ]
        )
        log = self.attempt_log
        if log is None and len(records) <= MAX_ATTEMPT_RECORDS:
            self.attempt_log = AttemptLog(records, len(records))
        else:
            self.attempt_log = (log or EMPTY_ATTEMPT_LOG).appended(records)
        answers = attempt_answers(results, self.job.task.revision)
        if answers:
            self.answers = answers_appended(self.answers, answers)


def target_timeout_ms(target: Target) -> int | None:
    """The target's own timeout: an HTTP target's ``timeout_ms``, a gRPC target's ``deadline_ms``."""
    settings = target.settings
    if isinstance(settings, HttpTarget):
        return settings.timeout_ms
    if isinstance(settings, GrpcTarget):
        return settings.deadline_ms
    return None


async def missing_target(flow_id: str, name: str, attempt: int, now_ms: int) -> AttemptResult:
    """The result of an attempt to a target the app no longer has: permanent, naming it."""
    return AttemptResult(
        flow_id,
        tracking_key(name),
        attempt,
        Outcome.PERMANENT,
        None,
        f"target {name!r} no longer exists (deleted while tasks still name it)",
        None,
        now_ms,
        0.0,
    )


def unusable(flow: Flow, error: Exception) -> FlowUpdate:
    """The dead letter of a flow whose stored callback spec cannot be read: it can never be delivered."""
    reason = f"unusable callback spec: {type(error).__name__}: {error}"[:240]
    return FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.DEAD, flow.attempts, None, None, reason)


def let_go(active: dict[str, Delivery], shards: frozenset[int]) -> tuple[list[Delivery], int]:
    """Let go of the deliveries in ``active`` whose shard is in ``shards`` (handed over: another node's
    compensator re-drives them from what is stored, or from what :mod:`tjobs.delivery.hand_back` writes): each is
    marked ``lost`` (nothing more of it is sent from here: an at-most-once one is left ``pending`` without its
    ``sending`` record, which the new owner would close ``unknown``; one under way sends no retry) and leaves
    ``active``. Returns them, and how many of them waited on a retry timer (cancelled here)."""
    gone = [d for d in active.values() if shard_of_task_id(d.job.flow.task_id) in shards]
    timers = 0
    for delivery in gone:
        delivery.lost = True
        del active[delivery.flow_id]
        if delivery.timer is not None:
            delivery.timer.cancel()
            delivery.timer = None
            timers += 1
    if gone:
        logger.warning(
            "shards handed over: %d flows in delivery here left to their new owner",
            len(gone),
            extra={"action": "delivery_handed_over", "flows": len(gone)},
        )
    return gone, timers


def retry_may_go(
    active: dict[str, Delivery], delivery: Delivery, now_ms: int, release: Callable[[Delivery], None]
) -> bool:
    """The outcome of ``delivery``'s attempt is written, seen at ``now_ms``: whether its retry may go from
    here. A flow of a shard this node does not own may not once the owner could have leased it
    (:mod:`tjobs.delivery.foreign_flows`): it is marked ``lost`` (its retry timer, if set, sends nothing)
    and, if still in ``active``, ``release`` is told (it leaves ``active``, for the owner's compensator, and
    no longer runs here: a fire of its task waiting behind it in the overlap gate goes)."""
    window = delivery.window
    if window is None or window.written(now_ms):
        return True
    delivery.lost = True
    if active.get(delivery.flow_id) is delivery:
        release(delivery)
    return False
