"""One observer for what the fire path reports as it goes: the node's metrics and service levels hang off it.

The runner, the deliverer, the limiter and the hot tier each take a :class:`FireObserver` and tell it
what happened (fires committed, an attempt and, for a flow's first, its lateness, a flow outcome
recorded, a callback throttled, a task change's hot-tier lag). :class:`FireObserver` itself does
nothing, so a part built without one (a unit test) pays one empty call; an observer overrides the
events it cares about (the shape of dramatiq's middleware). :class:`MetricsObserver` is the node's:
it feeds the Prometheus metrics (:mod:`tjobs.observability.metrics`) and the service levels
(:mod:`tjobs.observability.slo`).

The calls run inline on the event loop, some once per fire: an observer must be quick, must not
allocate per fire (the per-app figures are plain numbers), and should not raise (the deliverer logs
and survives an observer's error; the runner and the limiter do not guard against one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tjobs.model import AttemptResult, FireOutcome, FlowKind, FlowStatus, FlowUpdate

if TYPE_CHECKING:
    from tjobs.observability.metrics import Metrics
    from tjobs.observability.slo import ServiceLevels


class FireObserver:
    """What the fire path reports; every event is a no-op here (override the ones you need)."""

    __slots__ = ()

    def fires_committed(self, outcomes: Sequence[FireOutcome], now_ms: int, duration_s: float) -> None:
        """A fire transaction batch ended with at least one transaction committed (``outcomes``: one
        per intent, committed, rejected or failed) at ``now_ms`` after ``duration_s`` seconds."""

    def attempt(self, app_id: str, result: AttemptResult, protocol: str = "http") -> None:
        """One callback attempt to one destination came back (``protocol``: an inline URL and an HTTP
        target are ``http``; a named target's protocol otherwise)."""

    def first_attempt(self, app_id: str, send_lateness_s: float, answer_lateness_s: float) -> None:
        """A flow's first attempt to one destination came back: how late it was, against the flow's
        scheduled instant, when the request was written and when the answer came (or the attempt
        ended without one). Reported after :meth:`attempt` for the same result."""

    def flow_update(self, app_id: str, update: FlowUpdate) -> None:
        """A delivery outcome was recorded: ``pending`` with a retry time, ``delivered`` or ``dead``; for
        a job run, ``running`` at its start (its ``202``) and its end when written (a report, a cancel or
        its timeout: ``delivered``, ``dead``, ``cancelled``, or ``pending`` for its retry)."""

    def flow_redriven(self, app_id: str, task_id: int, scheduled_at_ms: int) -> None:
        """A dead letter was put back to ``pending`` and handed to delivery (its death was counted
        already: the service levels count a flow dead once, whatever its re-drives come to)."""

    def throttled(self, app_id: str, reason: str) -> None:
        """A callback the app's own limits delayed (``reason`` ``rate`` or ``concurrency``; see
        :mod:`tjobs.delivery.limiter`)."""

    def hot_tier_lag(self, tier: str, lag_s: float) -> None:
        """A task change published on another node was applied here ``lag_s`` after its publish."""


NO_OBSERVER = FireObserver()


def _delivered_by_answer(update: FlowUpdate) -> bool:
    """Delivered by the receiver's answer; a run that ended delivered reached its executor at its start."""
    return update.status is FlowStatus.DELIVERED and update.run is None


class MetricsObserver(FireObserver):
    """The node's observer: Prometheus metrics (``metrics``, swappable while the node runs: a
    :class:`tjobs.observability.metrics.NullMetrics` turns them off) and the service levels, which
    are fed whether or not metrics are on."""

    __slots__ = ("_now_ms", "last_hot_tier_lag_s", "metrics", "slo")

    def __init__(self, metrics: Metrics, slo: ServiceLevels, now_ms: Callable[[], int]) -> None:
        self.metrics = metrics
        self.slo = slo
        self._now_ms = now_ms
        self.last_hot_tier_lag_s: float | None = None  # the last change's, for the node's figures

    def fires_committed(self, outcomes: Sequence[FireOutcome], now_ms: int, duration_s: float) -> None:
        metrics, slo = self.metrics, self.slo
        metrics.fire_tx_duration.observe(duration_s)
        metrics.fire_tx_batch.observe(len(outcomes))
        for outcome in outcomes:
            task = outcome.task
            if task is None:
                continue
            lateness_s = max((now_ms - outcome.intent.scheduled_at_ms) / 1000, 0.0)
            metrics.observe_fire(task.app_id, lateness_s)
            slo.observe_fire(task.app_id, lateness_s)
            for flow in outcome.flows:
                if flow.kind is FlowKind.MISFIRE or flow.missed:
                    missed = flow.missed + (flow.kind is FlowKind.MISFIRE)
                    metrics.misfires.labels(flow.app_id, str(task.misfire_policy)).inc(missed)
                    slo.observe_misses(flow.app_id, missed)

    def attempt(self, app_id: str, result: AttemptResult, protocol: str = "http") -> None:
        self.metrics.observe_attempt(app_id, str(result.outcome), result.status, result.duration_s, protocol)

    def first_attempt(self, app_id: str, send_lateness_s: float, answer_lateness_s: float) -> None:
        self.slo.observe_first_attempt(app_id, send_lateness_s, answer_lateness_s)

    def flow_update(self, app_id: str, update: FlowUpdate) -> None:
        lateness_s = None
        if update.attempts <= 1 and (update.status is FlowStatus.RUNNING or _delivered_by_answer(update)):
            lateness_s = max((self._now_ms() - update.scheduled_at_ms) / 1000, 0.0)
        self.metrics.observe_flow_update(app_id, update.status.value, lateness_s)
        self.slo.observe_outcome(app_id, update.status.value, (update.task_id, update.scheduled_at_ms))

    def flow_redriven(self, app_id: str, task_id: int, scheduled_at_ms: int) -> None:
        self.slo.observe_redrive((task_id, scheduled_at_ms))

    def throttled(self, app_id: str, reason: str) -> None:
        self.metrics.observe_throttled(app_id, reason)
        self.slo.observe_throttled(app_id)

    def hot_tier_lag(self, tier: str, lag_s: float) -> None:
        self.metrics.observe_hot_tier_lag(tier, lag_s)
        self.last_hot_tier_lag_s = lag_s
