"""The Deliverer against a real aiohttp receiver on loopback: outcomes, retries, limits and recorded flows.

No HTTP is mocked: every callback crosses a real socket to :mod:`receiver`, and every request it
receives is checked with the independent ``standardwebhooks`` library.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from email.utils import formatdate
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.delivery_fakes import ManualTime
from tests.observers import RecordingObserver
from tests.receiver import Received, Receiver, Reply, unused_port
from tjobs.clock import SystemClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.http import HttpTransport
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.signing import generate_secret
from tjobs.delivery.transport import CallbackRequest, Outcome
from tjobs.model import (
    App,
    DeliveryMode,
    Flow,
    FlowKind,
    FlowStatus,
    FlowUpdate,
    MisfirePolicy,
    Task,
    TaskStatus,
)
from tjobs.settings import CallbackSettings
from tjobs.specs import AtSpec, callback_from_json

CLOCK = SystemClock()
SECRET = generate_secret()
FAST = CallbackSettings(backoff_base_ms=100, backoff_max_ms=2000, max_attempts=5, timeout_ms=2000)


class MemoryRecorder:
    """Applies flow updates like a store would (terminal rows never change) and logs every call."""

    def __init__(self) -> None:
        self.calls: list[list[FlowUpdate]] = []
        self.history: dict[str, list[FlowUpdate]] = {}
        self.state: dict[str, FlowUpdate] = {}
        self.fail_next = 0
        self.changed = asyncio.Event()

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("database unavailable")
        self.calls.append(list(updates))
        for update in updates:
            key = f"{update.task_id}-{update.scheduled_at_ms}"
            current = self.state.get(key)
            if current is not None and current.status.terminal:
                continue
            self.state[key] = update
            self.history.setdefault(key, []).append(update)
        self.changed.set()

    async def wait_terminal(self, flow_ids: Sequence[str], timeout_s: float = 10.0) -> dict[str, FlowUpdate]:
        async with asyncio.timeout(timeout_s):
            while not all(f in self.state and self.state[f].status.terminal for f in flow_ids):
                self.changed.clear()
                await self.changed.wait()
        return {f: self.state[f] for f in flow_ids}


class Fixed(random.Random):
    """Jitter pinned to the top of the range, so backoff delays are exactly base, 2·base, 4·base…"""

    def random(self) -> float:
        return 0.999_999


_task_ids = iter(range(1_000_000, 2_000_000))


def make_job(
    callback: dict[str, Any],
    *,
    app: App | None = None,
    delivery: DeliveryMode = DeliveryMode.AT_LEAST_ONCE,
    status: FlowStatus | None = None,
    attempts: int | None = None,
    scheduled_at_ms: int | None = None,
    payload: Any = None,
) -> CallbackJob:
    task_id = next(_task_ids)
    now_ms = CLOCK.now_ms()
    scheduled = now_ms if scheduled_at_ms is None else scheduled_at_ms
    app = app or App("shop", "shop", "", [SECRET])
    at_most_once = delivery is DeliveryMode.AT_MOST_ONCE
    if status is None:
        status = FlowStatus.SENDING if at_most_once else FlowStatus.PENDING
    if attempts is None:
        attempts = 1 if status is FlowStatus.SENDING else 0
    task = Task(
        task_id,
        app.id,
        f"task-{task_id}",
        None,
        AtSpec(scheduled),
        callback_from_json(callback),
        payload,
        MisfirePolicy.FIRE_NOW,
        delivery,
        TaskStatus.COMPLETED,
        None,
        2,
        1,
        now_ms,
        now_ms,
    )
    flow = Flow(task_id, scheduled, app.id, FlowKind.SCHEDULED, status, attempts, now_ms, now_ms, now_ms)
    return CallbackJob(task, flow, app)


def verified(requests: Sequence[Received], secrets: Sequence[str] = (SECRET,)) -> None:
    """Every request carries a valid Standard Webhooks signature (for each of the app's secrets)."""
    for request in requests:
        for secret in secrets:
            Webhook(secret).verify(request.body, request.headers, json_parse=False)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as server:
        yield server


@pytest.fixture
def recorder() -> MemoryRecorder:
    return MemoryRecorder()


DelivererFactory = Callable[..., Deliverer]


@pytest.fixture
async def make_deliverer(recorder: MemoryRecorder) -> AsyncIterator[DelivererFactory]:
    built: list[tuple[Deliverer, HttpTransport]] = []

    def build(settings: CallbackSettings = FAST, **kwargs: Any) -> Deliverer:
        sender = HttpTransport(settings, policy=kwargs.pop("policy", None))
        limiter = kwargs.pop("limiter", None) or AppLimiter(settings.global_max_in_flight)
        kwargs.setdefault("rng", Fixed())
        deliverer = Deliverer(kwargs.pop("recorder", recorder), sender, limiter, settings, CLOCK, **kwargs)
        built.append((deliverer, sender))
        return deliverer

    yield build
    for deliverer, sender in built:
        await deliverer.stop(1.0)
        await sender.close()


async def started(deliverer: Deliverer) -> Deliverer:
    await deliverer.start()
    return deliverer


# ---- outcomes ------------------------------------------------------------------------------------


async def test_a_callback_is_delivered_first_time_signed_and_recorded(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")], "headers": {"X-Order": "123"}}, payload={"order": 123})
    deliverer.submit(job)
    assert job.flow.id in deliverer.in_flight()
    final = await recorder.wait_terminal([job.flow.id])
    (request,) = receiver.for_path("/hook")
    verified([request])
    assert request.method == "POST"
    assert request.headers["webhook-id"] == job.flow.id
    assert request.headers["tjobs-task-id"] == str(job.task.id)
    assert request.headers["tjobs-scheduled-at"] == str(job.flow.scheduled_at_ms)
    assert request.headers["tjobs-attempt"] == "1"
    assert request.headers["x-order"] == "123"
    assert request.headers["user-agent"] == FAST.user_agent
    assert Webhook(SECRET).verify(request.body, request.headers)["payload"] == {"order": 123}
    outcome = final[job.flow.id]
    assert outcome == FlowUpdate(
        job.task.id,
        job.flow.scheduled_at_ms,
        FlowStatus.DELIVERED,
        1,
        None,
        200,
        None,
        None,
        outcome.attempt_log,
        answers=outcome.answers,
    )
    (answer,) = outcome.answers or ()  # what the receiver answered, kept (issue 27)
    assert (answer.attempt, answer.destination, answer.status_code) == (1, receiver.url("/hook"), 200)
    assert (answer.body, answer.body_bytes, answer.task_revision) == ("", 0, job.task.revision)
    assert outcome.attempt_log is not None
    (record,) = outcome.attempt_log.records
    assert outcome.attempt_log.total == 1
    assert (record.attempt, record.status_code, record.error) == (1, 200, None)
    assert (record.destination, record.executor) == (receiver.url("/hook"), None)
    assert record.duration_ms >= 0
    assert job.flow.id not in deliverer.in_flight()


@pytest.mark.timing  # wall-clock bounds on the backoff (each retry within 50 ms of its recorded time)
async def test_500_500_200_is_delivered_on_attempt_3_after_growing_backoff(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", Reply(500), Reply(500, body=b"database is down"))
    deliverer = await started(make_deliverer(flush_interval_s=0.01))
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    final = await recorder.wait_terminal([job.flow.id])

    requests = receiver.for_path("/hook")
    assert [r.attempt for r in requests] == [1, 2, 3]
    assert {r.flow_id for r in requests} == {job.flow.id}
    verified(requests)
    first_gap = requests[1].received_mono_s - requests[0].received_mono_s
    second_gap = requests[2].received_mono_s - requests[1].received_mono_s
    assert 0.095 <= first_gap < 0.3  # base 100 ms
    assert 0.195 <= second_gap < 0.45  # then 200 ms
    assert second_gap > first_gap
    assert final[job.flow.id].status is FlowStatus.DELIVERED
    assert final[job.flow.id].attempts == 3
    # Between attempts the flow was recorded pending, with the time of its next attempt.
    pending = [u for u in recorder.history[job.flow.id] if u.status is FlowStatus.PENDING]
    assert [u.attempts for u in pending] == [1, 2]
    assert pending[1].last_status_code == 500 and pending[1].last_error == "HTTP 500: database is down"
    for update, next_request in zip(pending, requests[1:], strict=True):
        assert update.next_attempt_at_ms is not None
        assert abs(next_request.received_at_ns // 1_000_000 - update.next_attempt_at_ms) < 50


async def test_503_with_retry_after_seconds_waits_that_long(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", Reply(503, retry_after="1"))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    final = await recorder.wait_terminal([job.flow.id])
    first, second = receiver.for_path("/hook")
    assert second.received_mono_s - first.received_mono_s >= 1.0
    assert final[job.flow.id].attempts == 2


async def test_429_with_an_http_date_waits_until_that_date(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    retry_at_s = int(time.time()) + 2
    receiver.script("/hook", Reply(429, retry_after=formatdate(retry_at_s, usegmt=True)))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    final = await recorder.wait_terminal([job.flow.id])
    first, second = receiver.for_path("/hook")
    assert second.received_at_ns >= retry_at_s * 1_000_000_000 - 5_000_000
    assert second.received_mono_s - first.received_mono_s >= 1.0
    assert final[job.flow.id].status is FlowStatus.DELIVERED


async def test_retry_after_is_capped_by_max_retry_after_s(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    settings = FAST.model_copy(update={"max_retry_after_s": 0})
    receiver.script("/hook", Reply(503, retry_after="3600"))
    deliverer = await started(make_deliverer(settings, rng=random.Random(1)))
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    final = await recorder.wait_terminal([job.flow.id], timeout_s=3)
    assert final[job.flow.id].attempts == 2


async def test_a_permanent_4xx_is_dead_after_one_attempt(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", then=Reply(400, body=b"unknown order"))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert final.status is FlowStatus.DEAD
    assert final.attempts == 1
    assert final.last_status_code == 400
    assert final.last_error is not None and "unknown order" in final.last_error
    await asyncio.sleep(0.3)
    assert len(receiver.for_path("/hook")) == 1


async def test_a_redirect_is_not_followed_and_is_permanent(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/old", then=Reply(307, headers={"Location": receiver.url("/new")}))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/old")]})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts, final.last_status_code) == (FlowStatus.DEAD, 1, 307)
    assert receiver.for_path("/new") == []


async def test_an_always_failing_target_is_dead_after_the_tasks_max_attempts(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", then=Reply(502))
    deliverer = await started(make_deliverer(rng=random.Random(3)))
    job = make_job({"urls": [receiver.url("/hook")], "max_attempts": 4})  # the task overrides settings (5)
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts, final.last_status_code) == (FlowStatus.DEAD, 4, 502)
    assert final.last_error == "HTTP 502 (gave up after 4 attempts)"
    requests = receiver.for_path("/hook")
    assert [r.attempt for r in requests] == [1, 2, 3, 4]
    verified(requests)


async def test_a_retry_past_max_age_goes_to_the_dead_letter(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    # Scheduled 1.5 s ago with max_age 2 s: the receiver asks for 1 s, which would be past the age.
    receiver.script("/hook", then=Reply(503, retry_after="1"))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")], "max_age_s": 2}, scheduled_at_ms=CLOCK.now_ms() - 1500)
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts) == (FlowStatus.DEAD, 1)
    assert final.last_error is not None and "max_age_s exceeded" in final.last_error


async def test_a_redriven_flow_past_its_limits_dies_unsent(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    deliverer = await started(make_deliverer())
    too_old = make_job(
        {"urls": [receiver.url("/hook")], "max_age_s": 1}, attempts=2, scheduled_at_ms=CLOCK.now_ms() - 5000
    )
    too_many = make_job({"urls": [receiver.url("/hook")], "max_attempts": 3}, attempts=3)
    deliverer.submit(too_old)
    deliverer.submit(too_many)
    final = await recorder.wait_terminal([too_old.flow.id, too_many.flow.id])
    assert (final[too_old.flow.id].status, final[too_old.flow.id].attempts) == (FlowStatus.DEAD, 2)
    assert (final[too_many.flow.id].status, final[too_many.flow.id].attempts) == (FlowStatus.DEAD, 3)
    assert receiver.requests == []


async def test_a_redriven_flow_continues_its_attempt_count(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")]}, attempts=2)
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert final.attempts == 3
    assert receiver.requests[0].attempt == 3


async def test_a_timeout_is_retried(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", Reply(200, delay_s=1.0))
    deliverer = await started(make_deliverer(flush_interval_s=0.01))
    job = make_job({"urls": [receiver.url("/hook")], "timeout_ms": 200})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)
    first_failure = recorder.history[job.flow.id][0]
    assert first_failure.status is FlowStatus.PENDING
    assert first_failure.last_error == "timeout after 200 ms"
    assert first_failure.last_status_code is None


async def test_a_refused_connection_is_retried(recorder: MemoryRecorder, make_deliverer: DelivererFactory) -> None:
    deliverer = await started(make_deliverer(flush_interval_s=0.01))
    job = make_job({"urls": [f"http://127.0.0.1:{unused_port()}/hook"], "max_attempts": 3})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts) == (FlowStatus.DEAD, 3)
    assert [u.attempts for u in recorder.history[job.flow.id]] == [1, 2, 3]
    assert final.last_error is not None and "ClientConnectorError" in final.last_error


async def test_a_reset_connection_is_retried(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", Reply(reset=True))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)
    assert [r.attempt for r in receiver.for_path("/hook")] == [1, 2]


async def test_multicast_retries_only_the_failing_target(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/b", Reply(500), Reply(503))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/a"), receiver.url("/b"), receiver.url("/c")]})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 3)
    assert [r.attempt for r in receiver.for_path("/a")] == [1]
    assert [r.attempt for r in receiver.for_path("/c")] == [1]
    assert [r.attempt for r in receiver.for_path("/b")] == [1, 2, 3]
    assert {r.flow_id for r in receiver.requests} == {job.flow.id}
    verified(receiver.requests)


async def test_multicast_with_one_permanently_refusing_target_is_dead(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/b", then=Reply(404))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/a"), receiver.url("/b")]})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts, final.last_status_code) == (FlowStatus.DEAD, 1, 404)
    assert final.last_error is not None and final.last_error.startswith(receiver.url("/b"))


async def test_at_most_once_failing_is_dead_after_exactly_one_attempt(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", then=Reply(500))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")], "max_attempts": 10}, delivery=DeliveryMode.AT_MOST_ONCE)
    assert job.flow.status is FlowStatus.SENDING and job.flow.attempts == 1  # as the fire wrote it
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts) == (FlowStatus.DEAD, 1)
    await asyncio.sleep(0.5)
    assert [r.attempt for r in receiver.for_path("/hook")] == [1]
    assert [u.status for u in recorder.history[job.flow.id]] == [FlowStatus.DEAD]


async def test_at_most_once_arriving_pending_is_recorded_sending_before_it_is_sent(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    deliverer = await started(make_deliverer())
    job = make_job(
        {"urls": [receiver.url("/hook")]}, delivery=DeliveryMode.AT_MOST_ONCE, status=FlowStatus.PENDING, attempts=0
    )  # e.g. a manual trigger
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert [(u.status, u.attempts) for u in recorder.history[job.flow.id]] == [
        (FlowStatus.SENDING, 1),
        (FlowStatus.DELIVERED, 1),
    ]
    assert final.status is FlowStatus.DELIVERED
    assert [r.attempt for r in receiver.requests] == [1]


async def test_at_most_once_is_not_sent_when_sending_cannot_be_recorded(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    deliverer = await started(make_deliverer())
    recorder.fail_next = 1
    job = make_job(
        {"urls": [receiver.url("/hook")]}, delivery=DeliveryMode.AT_MOST_ONCE, status=FlowStatus.PENDING, attempts=0
    )
    deliverer.submit(job)
    await asyncio.sleep(0.3)
    assert receiver.requests == []
    assert job.flow.id not in deliverer.in_flight()  # left pending for the compensator


async def test_a_vetoed_target_is_never_connected_and_dies(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    async def no_hook(request: CallbackRequest) -> str | None:
        return "not allowed by policy" if request.url.endswith("/hook") else None

    deliverer = await started(make_deliverer(policy=no_hook))
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts, final.last_status_code) == (FlowStatus.DEAD, 1, None)
    assert final.last_error is not None and "not allowed by policy" in final.last_error
    assert receiver.requests == []


async def test_every_attempt_is_reported_to_the_observer(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", Reply(500))
    observer = RecordingObserver()
    deliverer = await started(make_deliverer(observer=observer))
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    await recorder.wait_terminal([job.flow.id])
    results = [r for _, r in observer.attempts]
    updates = [u for _, u in observer.updates]
    assert [(r.attempt, r.outcome, r.status) for r in results] == [
        (1, Outcome.RETRYABLE, 500),
        (2, Outcome.DELIVERED, 200),
    ]
    assert [u.status for u in updates] == [FlowStatus.PENDING, FlowStatus.DELIVERED]


# ---- in flight, batching, failures of the recorder -------------------------------------------------


async def test_a_flow_waiting_for_its_retry_is_in_flight_and_a_duplicate_submit_is_ignored(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", Reply(503, retry_after="1"))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    await receiver.wait_for(1)
    await asyncio.sleep(0.3)  # now waiting in memory for its retry
    assert job.flow.id in deliverer.in_flight()
    deliverer.submit(job)  # e.g. a compensator racing the retry
    await recorder.wait_terminal([job.flow.id])
    await asyncio.sleep(0.1)
    assert [r.attempt for r in receiver.requests] == [1, 2]


async def test_flow_updates_are_batched(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    deliverer = await started(make_deliverer())
    jobs = [make_job({"urls": [receiver.url("/hook")]}) for _ in range(300)]
    for job in jobs:
        deliverer.submit(job)
    final = await recorder.wait_terminal([j.flow.id for j in jobs])
    assert all(u.status is FlowStatus.DELIVERED and u.attempts == 1 for u in final.values())
    assert len(receiver.requests) == 300
    assert len(recorder.calls) <= 10  # not one write per callback
    assert sum(len(c) for c in recorder.calls) == 300
    verified(receiver.requests[::37])


async def test_a_failed_write_is_kept_and_retried_and_the_flow_stays_in_flight(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    recorder.fail_next = 2
    deliverer = await started(make_deliverer())
    jobs = [make_job({"urls": [receiver.url("/hook")]}) for _ in range(20)]
    for job in jobs:
        deliverer.submit(job)
    await receiver.wait_for(20)
    await asyncio.sleep(0.15)  # the first flush failed: delivered, but not yet written
    assert recorder.state == {}
    assert {j.flow.id for j in jobs} <= deliverer.in_flight()
    final = await recorder.wait_terminal([j.flow.id for j in jobs])
    assert all(u.status is FlowStatus.DELIVERED for u in final.values())
    assert deliverer.flush_failures == 2
    assert deliverer.in_flight() == set()
    assert deliverer.in_flight_count() == 0


async def test_stop_finishes_attempts_under_way_and_writes_their_outcome(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/slow", then=Reply(200, delay_s=0.3))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/slow")]})
    deliverer.submit(job)
    await receiver.wait_for(1)
    await deliverer.stop(drain_timeout_s=2.0)
    assert recorder.state[job.flow.id].status is FlowStatus.DELIVERED
    deliverer.submit(make_job({"urls": [receiver.url("/slow")]}))  # refused once stopped
    assert deliverer.in_flight() == set()


async def test_stop_leaves_waiting_retries_pending_for_the_compensator(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", Reply(503, retry_after="30"))
    deliverer = await started(make_deliverer())
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    await receiver.wait_for(1)
    await asyncio.sleep(0.05)
    await deliverer.stop(drain_timeout_s=1.0)
    update = recorder.state[job.flow.id]
    assert (update.status, update.attempts) == (FlowStatus.PENDING, 1)
    assert update.next_attempt_at_ms is not None and update.next_attempt_at_ms >= CLOCK.now_ms() + 25_000


# ---- tenants --------------------------------------------------------------------------------------


async def test_a_slow_app_does_not_slow_another_app(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    # Given app A whose receiver takes 2 s per callback, with concurrency 2 and 10 fires queued
    receiver.script("/a", then=Reply(200, delay_s=2.0))
    slow_app = App("A", "A", "", [SECRET], rate_limit_per_s=1000.0, max_concurrency=2)
    fast_app = App("B", "B", "", [SECRET], rate_limit_per_s=1000.0, max_concurrency=2)
    settings = FAST.model_copy(update={"timeout_ms": 5000, "global_max_in_flight": 10})
    deliverer = await started(make_deliverer(settings))
    for _ in range(10):
        deliverer.submit(make_job({"urls": [receiver.url("/a")]}, app=slow_app))
    await receiver.wait_for(2, path="/a")
    # When app B fires 40 callbacks
    b_jobs = [make_job({"urls": [receiver.url("/b")]}, app=fast_app) for _ in range(40)]
    for job in b_jobs:
        deliverer.submit(job)
    await receiver.wait_for(40, path="/b", timeout_s=5)
    # Then B's callbacks all arrive while A still has only its 2 in flight (its first two answers,
    # 2 s each, have not come back: a third A request would be sent as soon as one did)
    assert len(receiver.for_path("/a")) == 2
    await recorder.wait_terminal([j.flow.id for j in b_jobs])


async def test_a_rate_limited_app_is_delivered_later_not_dropped(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    # The limiter runs on a manual clock: its time moves only to the next throttled callback's turn.
    limiter_time = ManualTime()
    limiter = AppLimiter(FAST.global_max_in_flight, monotonic=limiter_time.monotonic, sleep=limiter_time.sleep)
    app = App("slowrate", "slowrate", "", [SECRET], rate_limit_per_s=20.0, max_concurrency=5)
    deliverer = await started(make_deliverer(limiter=limiter))
    jobs = [make_job({"urls": [receiver.url("/hook")]}, app=app) for _ in range(40)]
    for job in jobs:
        deliverer.submit(job)

    async def run_limiter_time() -> None:
        while True:
            await limiter_time.run()
            await asyncio.sleep(0.005)  # throttled callers reach the limiter as HTTP answers come back

    driver = asyncio.create_task(run_limiter_time())
    try:
        final = await recorder.wait_terminal([j.flow.id for j in jobs])
    finally:
        driver.cancel()
    assert all(u.status is FlowStatus.DELIVERED for u in final.values())
    assert len(receiver.for_path("/hook")) == 40
    # a 1 s burst of 20 went at once, then 20 more at 20/s: the last one's turn came at 1 s
    assert sum(1 for delay_s in limiter_time.slept if delay_s > 1e-9) == 20  # (float rounding: one ~1e-16 s)
    assert limiter_time.now_s == pytest.approx(1.0)


async def test_an_unreadable_callback_spec_is_a_dead_letter_not_a_crash_of_the_fire_path(
    recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    deliverer = await started(make_deliverer())
    job = make_job({"method": "POST"})  # no url at all: a corrupted row, say
    deliverer.submit(job)  # must not raise into the caller
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert final.status is FlowStatus.DEAD
    assert final.last_error is not None and final.last_error.startswith("unusable callback spec")


async def test_a_retry_beyond_the_memory_horizon_is_left_to_the_compensator(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", Reply(503, retry_after="2"))
    deliverer = await started(make_deliverer(retry_horizon_s=1.0))
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    await receiver.wait_for(1)
    async with asyncio.timeout(2):
        while job.flow.id not in recorder.state:
            await recorder.changed.wait()
            recorder.changed.clear()
    update = recorder.state[job.flow.id]
    assert (update.status, update.attempts) == (FlowStatus.PENDING, 1)
    assert update.next_attempt_at_ms is not None and update.next_attempt_at_ms >= CLOCK.now_ms() + 1500
    assert job.flow.id not in deliverer.in_flight()  # the compensator will take it at its time
    await asyncio.sleep(2.5)
    assert len(receiver.requests) == 1


async def test_waiting_retries_are_capped_in_memory(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    receiver.script("/hook", then=Reply(503, retry_after="5"))
    deliverer = await started(make_deliverer(max_waiting_retries=3))
    jobs = [make_job({"urls": [receiver.url("/hook")]}) for _ in range(10)]
    for job in jobs:
        deliverer.submit(job)
    await receiver.wait_for(10)
    await asyncio.sleep(0.3)
    assert len(deliverer.in_flight() & {j.flow.id for j in jobs}) == 3
    assert all(recorder.state[j.flow.id].status is FlowStatus.PENDING for j in jobs)


async def test_a_policy_that_cannot_decide_yet_makes_the_attempt_retryable(
    receiver: Receiver, recorder: MemoryRecorder, make_deliverer: DelivererFactory
) -> None:
    calls = 0

    async def flaky_dns(request: CallbackRequest) -> str | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TimeoutError("resolver timed out")
        return None

    deliverer = await started(make_deliverer(policy=flaky_dns))
    job = make_job({"urls": [receiver.url("/hook")]})
    deliverer.submit(job)
    final = (await recorder.wait_terminal([job.flow.id]))[job.flow.id]
    assert (final.status, final.attempts) == (FlowStatus.DELIVERED, 2)
    assert [r.attempt for r in receiver.requests] == [2]
