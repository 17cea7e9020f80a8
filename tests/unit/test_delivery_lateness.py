"""A flow's first attempt is timed where the receiver is: its lateness against the scheduled instant when
the request was written and when the answer came back, folded per app and minute for the service levels
(issue 27: the SLO took lateness when the fire transaction started, 5/10/25 ms, while the first
attempts were 69/225/705 ms late)."""

from __future__ import annotations

import pytest

from tests.delivery_fakes import APP, SETTINGS, NoJitter, delivered_all, stored_flow
from tests.observers import RecordingObserver
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.transport import AttemptResult, CallbackRequest, Outcome, Transport
from tjobs.observability.metrics import LATENESS_BUCKETS_S, NullMetrics
from tjobs.observability.observer import MetricsObserver
from tjobs.observability.slo import ServiceLevels
from tjobs.stores.memory import MemoryTaskStore

pytestmark = pytest.mark.asyncio


class TimedTransport(Transport):
    """Answers ``statuses`` in order; every attempt writes its request ``write_ms`` after it starts and
    is answered ``answer_ms`` after it starts, on the test's clock."""

    def __init__(self, clock: ManualClock, *statuses: int, write_ms: int, answer_ms: int) -> None:
        self._clock = clock
        self._statuses = list(statuses)
        self._write_ms = write_ms
        self._answer_ms = answer_ms

    async def send(self, request: CallbackRequest) -> AttemptResult:
        status = self._statuses.pop(0) if self._statuses else 200
        started_ms = self._clock.now_ms()
        outcome = Outcome.DELIVERED if status < 300 else Outcome.RETRYABLE
        error = None if status < 300 else f"HTTP {status}"
        return AttemptResult(
            request.flow_id,
            request.url,
            request.attempt,
            outcome,
            status,
            error,
            None,
            started_ms,
            self._answer_ms / 1000,
            started_ms + self._write_ms,
        )

    async def close(self) -> None:
        return None


def slot_of(lateness_s: float) -> int:
    return next((i for i, bound in enumerate(LATENESS_BUCKETS_S) if lateness_s <= bound), len(LATENESS_BUCKETS_S))


async def test_the_first_attempt_is_timed_at_the_write_and_at_the_answer_and_retries_are_not() -> None:
    store = MemoryTaskStore()
    clock = ManualClock(1_800_000_000_000)
    observer = RecordingObserver()
    transport = TimedTransport(clock, 503, 200, write_ms=40, answer_ms=300)
    deliverer = Deliverer(
        store, transport, AppLimiter(10), SETTINGS, clock, NoJitter(), observer=observer, flush_batch=1
    )
    await deliverer.start()
    try:
        task, flow = await stored_flow(store, overdue_ms=700, clock=clock)  # scheduled 700 ms ago

        deliverer.submit(CallbackJob(task, flow, APP))
        await delivered_all(deliverer)
    finally:
        await deliverer.stop(1.0)

    assert [result.attempt for _, result in observer.attempts] == [1, 2]  # a retry, then delivered
    assert observer.first_attempts == [(APP.id, 0.74, 1.0)]  # 700 + 40 ms written, 700 + 300 ms answered


async def test_the_service_levels_fold_first_attempt_lateness_per_app_and_minute() -> None:
    clock = ManualClock(29_000_000 * 60_000)
    slo = ServiceLevels(clock.now_ms)
    observer = MetricsObserver(NullMetrics(), slo, clock.now_ms)

    observer.first_attempt("a", 0.07, 0.22)
    observer.first_attempt("a", 0.004, 0.7)
    observer.first_attempt("b", 3.0, 3.1)

    taken = {m.app_id: m.counts for m in slo.minutes.take()}
    a = taken["a"]
    assert a.fires == 0 and sum(a.lateness) == 0  # commit lateness is the fires', not these
    assert a.first_send_lateness[slot_of(0.07)] == 1 and a.first_send_lateness[0] == 1
    assert a.first_answer_lateness[slot_of(0.22)] == 1 and a.first_answer_lateness[slot_of(0.7)] == 1
    assert sum(a.first_send_lateness) == sum(a.first_answer_lateness) == 2
    assert taken["b"].first_answer_lateness[slot_of(3.1)] == 1
    assert slo.answer_lateness.windows("a")["1m"]["count"] == 2
