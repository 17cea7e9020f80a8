"""A fire-path observer that records what it is told, for tests of the parts that report to one."""

from __future__ import annotations

from collections.abc import Sequence

from tjobs.delivery.transport import AttemptResult
from tjobs.model import FireOutcome, FlowUpdate
from tjobs.observability.observer import FireObserver


class RecordingObserver(FireObserver):
    """Every event, in order of arrival, per kind."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[FireOutcome], int, float]] = []
        self.attempts: list[tuple[str, AttemptResult]] = []
        self.protocols: list[str] = []
        self.updates: list[tuple[str, FlowUpdate]] = []
        self.throttled_calls: list[tuple[str, str]] = []
        self.lags_s: list[float] = []
        self.first_attempts: list[tuple[str, float, float]] = []  # app, send and answer lateness (s)

    def fires_committed(self, outcomes: Sequence[FireOutcome], now_ms: int, duration_s: float) -> None:
        self.batches.append((list(outcomes), now_ms, duration_s))

    def attempt(self, app_id: str, result: AttemptResult, protocol: str = "http") -> None:
        self.attempts.append((app_id, result))
        self.protocols.append(protocol)

    def first_attempt(self, app_id: str, send_lateness_s: float, answer_lateness_s: float) -> None:
        self.first_attempts.append((app_id, send_lateness_s, answer_lateness_s))

    def flow_update(self, app_id: str, update: FlowUpdate) -> None:
        self.updates.append((app_id, update))

    def throttled(self, app_id: str, reason: str) -> None:
        self.throttled_calls.append((app_id, reason))

    def hot_tier_lag(self, tier: str, lag_s: float) -> None:
        self.lags_s.append(lag_s)


class FailingObserver(FireObserver):
    """An observer with a bug: every event raises."""

    def attempt(self, app_id: str, result: AttemptResult, protocol: str = "http") -> None:
        raise ValueError("observer bug")

    def flow_update(self, app_id: str, update: FlowUpdate) -> None:
        raise ValueError("observer bug")
