"""Structured logs: every line written while serving a request carries its id; delivery lines their flow id."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI

from tests.observers import FailingObserver
from tjobs.api.metrics_middleware import MetricsMiddleware
from tjobs.clock import SystemClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.http import HttpTransport
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.signing import generate_secret
from tjobs.delivery.transport import CallbackRequest
from tjobs.model import App, DeliveryMode, Flow, FlowKind, FlowStatus, FlowUpdate, MisfirePolicy, Task, TaskStatus
from tjobs.observability.logs import configure_logging
from tjobs.observability.metrics import Metrics
from tjobs.settings import CallbackSettings
from tjobs.specs import AtSpec, CallbackSpec

logger = logging.getLogger("tjobs.tests.ops")


@pytest.fixture
def json_logs() -> Iterator[Any]:
    """The node's own logging set-up (JSON lines), its stream kept in memory; yields a reader of the records."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    configure_logging("DEBUG", json=True)
    (handler,) = root.handlers
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    handler.setStream(stream)

    def records() -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in stream.getvalue().splitlines()]

    try:
        yield records
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def _api() -> FastAPI:
    api = FastAPI()

    @api.get("/v1/things/{thing_id}")
    async def thing(thing_id: str) -> dict[str, str]:
        logger.info("serving %s", thing_id, extra={"action": "thing_served"})
        await asyncio.sleep(0)
        logger.info("served %s", thing_id, extra={"action": "thing_done"})
        return {"id": thing_id}

    @api.get("/v1/broken")
    async def broken() -> dict[str, str]:
        raise RuntimeError("boom")

    api.add_middleware(MetricsMiddleware, metrics=Metrics())
    return api


async def _get(api: FastAPI, *requests: tuple[str, Mapping[str, str] | Mapping[bytes, bytes]]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=api, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return [await client.get(path, headers=headers) for path, headers in requests]


async def test_every_log_line_written_while_serving_a_request_carries_its_request_id(json_logs: Any) -> None:
    # Given a node's JSON logging and two concurrent requests, one naming its id and one not
    api = _api()
    named, fresh = await asyncio.gather(
        _get(api, ("/v1/things/a", {"x-request-id": "req-7f3a"})), _get(api, ("/v1/things/b", {}))
    )
    logger.info("between requests", extra={"action": "idle"})
    records = json_logs()
    # Then each request's lines carry its own id, echoed in its response; lines outside carry none
    generated = fresh[0].headers["x-request-id"]
    assert named[0].headers["x-request-id"] == "req-7f3a"
    assert len(generated) == 32 and int(generated, 16) >= 0
    by_action = {(r["action"], r["message"].split()[-1]): r for r in records if r["logger"] == logger.name}
    assert by_action[("thing_served", "a")]["request_id"] == "req-7f3a"
    assert by_action[("thing_done", "a")]["request_id"] == "req-7f3a"
    assert by_action[("thing_served", "b")]["request_id"] == generated
    assert by_action[("thing_done", "b")]["request_id"] == generated
    assert "request_id" not in by_action[("idle", "requests")]


async def test_a_failed_request_is_logged_with_its_request_id(json_logs: Any) -> None:
    # Given a route with a bug
    (response,) = await _get(_api(), ("/v1/broken", {"x-request-id": "req-broken-1"}))
    # Then the caller gets the API's error shape and the id to quote; the log has both and the traceback
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "req-broken-1"
    assert response.json()["error"]["code"] == "internal_error"
    failed = [r for r in json_logs() if r.get("action") == "api_request_failed"]
    assert len(failed) == 1 and failed[0]["request_id"] == "req-broken-1"
    assert "RuntimeError: boom" in failed[0]["exception"]


@pytest.mark.parametrize(
    "insane",
    [
        b"two words",
        b"x" * 129,
        b"tab\there",
        "caf\u00e9".encode(),
        b'{"forged":"json"}\x00next',
    ],
)
async def test_an_insane_incoming_request_id_is_replaced_by_a_fresh_one(insane: bytes) -> None:
    (response,) = await _get(_api(), ("/v1/things/a", {b"x-request-id": insane}))
    echoed = response.headers["x-request-id"]
    assert echoed.encode() != insane and len(echoed) == 32 and int(echoed, 16) >= 0


async def test_the_longest_sane_request_id_is_kept_whole() -> None:
    sane = "A-z0.9_:/+=@~" * 9 + "abc"  # 120 visible ASCII characters
    (response,) = await _get(_api(), ("/v1/things/a", {"x-request-id": sane}))
    assert response.headers["x-request-id"] == sane


# ---- delivery lines ------------------------------------------------------------------------------


class _Recorder:
    def __init__(self) -> None:
        self.terminal = asyncio.Event()

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        if any(u.status.terminal for u in updates):
            self.terminal.set()


def _job() -> CallbackJob:
    clock = SystemClock()
    now_ms = clock.now_ms()
    app = App("shop", "shop", "", [generate_secret()])
    task = Task(
        4242,
        app.id,
        "task-4242",
        None,
        AtSpec(0),
        CallbackSpec(("http://127.0.0.1:9/cb",)),
        None,
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.COMPLETED,
        None,
        2,
        1,
        now_ms,
        now_ms,
    )
    flow = Flow(task.id, now_ms, app.id, FlowKind.SCHEDULED, FlowStatus.PENDING, 0, now_ms, now_ms, now_ms)
    return CallbackJob(task, flow, app)


async def test_every_delivery_log_line_carries_the_flow_id(json_logs: Any) -> None:
    # Given a target whose check fails unexpectedly once, then refuses it for good, and an observer that fails
    calls = 0

    async def policy(request: CallbackRequest) -> str | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("resolver bug")
        return "refused by policy"

    settings = CallbackSettings(backoff_base_ms=1, backoff_max_ms=5, max_attempts=3)
    sender = HttpTransport(settings, policy=policy)
    recorder = _Recorder()
    deliverer = Deliverer(
        recorder,
        sender,
        AppLimiter(10),
        settings,
        SystemClock(),
        observer=FailingObserver(),
        flush_interval_s=0.01,
    )
    job = _job()
    await deliverer.start()
    try:
        # When its flow is delivered: an unexpected error, a retry, a permanent refusal, dead
        deliverer.submit(job)
        await asyncio.wait_for(recorder.terminal.wait(), 5)
    finally:
        await deliverer.stop(1.0)
        await sender.close()
    lines = [r for r in json_logs() if r["logger"].startswith("tjobs.delivery")]
    # Then every line it caused names the flow
    actions = {r["action"] for r in lines}
    assert {"callback_unexpected_error", "callback_retry_scheduled", "hook_failed", "flow_dead"} <= actions
    assert all(r.get("flow_id") == job.flow.id for r in lines), [r for r in lines if "flow_id" not in r]
