"""The SDK without a server: retries (only idempotent calls), error mapping, schedule builders, verify.

Requests go to an ``httpx.MockTransport`` that scripts answers and counts calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tjobs.client import (
    AsyncClient,
    BadRequest,
    Client,
    NotFound,
    QuotaExceeded,
    ServerError,
    TransportError,
    VersionConflict,
    WebhookVerificationError,
    at,
    cron,
    delay,
    every,
    verify,
)
from tjobs.delivery.signing import generate_secret, signature_header

TASK = {
    "id": "42",
    "name": "t",
    "key": None,
    "status": "active",
    "schedule": {"kind": "delay", "delay_ms": 1},
    "callback": {"urls": ["https://x.example/"], "method": "POST"},
    "payload": None,
    "misfire_policy": "fire_now",
    "delivery": "at_least_once",
    "next_run_at": "2026-11-21T00:00:00.000Z",
    "next_run_at_ms": 1795219200000,
    "version": 1,
    "fire_count": 0,
    "created_at": "2026-11-21T00:00:00.000Z",
    "updated_at": "2026-11-21T00:00:00Z",
}


def scripted(*answers: httpx.Response | Exception) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handle), seen


def error(status: int, code: str, field: str | None = None, **headers: str) -> httpx.Response:
    body: dict[str, Any] = {"code": code, "message": f"{field}: bad" if field else "bad"}
    if field:
        body["field"] = field
    return httpx.Response(status, json={"error": body}, headers=headers)


def client(transport: httpx.MockTransport) -> Client:
    return Client("http://tjobs.test", "tjk_x", transport=transport, backoff_s=0.001)


def test_reads_are_retried_after_a_lost_connection_and_a_503() -> None:
    transport, seen = scripted(
        httpx.ConnectError("down"), error(503, "storage_unavailable"), httpx.Response(200, json=TASK)
    )
    with client(transport) as sdk:
        assert sdk.get_task("42").id == "42"
    assert len(seen) == 3
    assert seen[0].headers["authorization"] == "Bearer tjk_x"


def test_a_create_without_a_key_is_sent_once() -> None:
    transport, seen = scripted(httpx.ConnectError("down"))
    with client(transport) as sdk, pytest.raises(TransportError):
        sdk.create_task("t", delay(seconds=1), "https://x.example/")
    assert len(seen) == 1


def test_a_create_with_a_key_is_retried_because_the_key_makes_it_idempotent() -> None:
    transport, seen = scripted(error(502, "bad_gateway"), httpx.Response(201, json=TASK))
    with client(transport) as sdk:
        sdk.create_task("t", delay(seconds=1), "https://x.example/", key="k1")
    assert len(seen) == 2 and all(r.read() == seen[0].read() for r in seen)


def test_a_delete_whose_answer_was_lost_is_done_when_the_retry_finds_nothing() -> None:
    transport, seen = scripted(httpx.ReadError("lost"), error(404, "not_found"))
    with client(transport) as sdk:
        sdk.delete_task("42")  # no NotFound: the lost first attempt deleted it
    assert [r.method for r in seen] == ["DELETE", "DELETE"]


FLOW = {
    "id": "42-1795219200000",
    "task_id": "42",
    "scheduled_at": "2026-11-21T00:00:00.000Z",
    "scheduled_at_ms": 1795219200000,
    "kind": "manual",
    "status": "pending",
    "attempts": 0,
    "created_at": "2026-11-21T00:00:00.000Z",
    "updated_at": "2026-11-21T00:00:00.000Z",
}


def test_a_trigger_sends_a_payload_override_only_when_one_is_given_and_is_sent_once() -> None:
    transport, seen = scripted(httpx.Response(201, json=FLOW))
    with client(transport) as sdk:
        sdk.trigger_task("42")
        sdk.trigger_task("42", payload=None)
        sdk.trigger_task("42", payload={"n": 2})
    assert [r.read() for r in seen] == [b"", b'{"payload":null}', b'{"payload":{"n":2}}']
    transport, seen = scripted(error(503, "storage_unavailable"))
    with client(transport) as sdk, pytest.raises(ServerError):
        sdk.trigger_task("42", payload=1)
    assert len(seen) == 1  # a resend could fire a second manual flow


def test_retries_give_up_after_the_budget() -> None:
    transport, seen = scripted(error(503, "storage_unavailable"))
    with client(transport) as sdk, pytest.raises(ServerError):
        sdk.get_task("42")
    assert len(seen) == 3


def test_a_quota_429_is_final_but_a_429_with_retry_after_is_retried() -> None:
    transport, seen = scripted(error(429, "quota_exceeded"))
    with client(transport) as sdk, pytest.raises(QuotaExceeded):
        sdk.get_task("42")
    assert len(seen) == 1
    transport, seen = scripted(error(429, "slow_down", **{"retry-after": "0"}), httpx.Response(200, json=TASK))
    with client(transport) as sdk:
        sdk.get_task("42")
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (error(422, "invalid_input", "schedule.expr"), BadRequest),
        (error(404, "not_found"), NotFound),
        (error(409, "version_conflict"), VersionConflict),
    ],
)
def test_errors_map_to_types_carrying_code_and_field(answer: httpx.Response, kind: type[Exception]) -> None:
    transport, _ = scripted(answer)
    with client(transport) as sdk, pytest.raises(kind) as raised:
        sdk.update_task("42", version=1, name="x")
    assert raised.value.code == answer.json()["error"]["code"]  # type: ignore[attr-defined]
    assert raised.value.field == answer.json()["error"].get("field")  # type: ignore[attr-defined]


def test_iter_tasks_follows_cursors_to_the_end() -> None:
    pages = [
        httpx.Response(200, json={"items": [TASK], "next_cursor": "c1"}),
        httpx.Response(200, json={"items": [], "next_cursor": "c2"}),
        httpx.Response(200, json={"items": [TASK, TASK], "next_cursor": None}),
    ]
    transport, seen = scripted(*pages, pages[-1])
    with client(transport) as sdk:
        assert len(list(sdk.iter_tasks(status="active", page_size=2))) == 3
    assert [r.url.params.get("cursor") for r in seen] == [None, "c1", "c2"]
    assert seen[0].url.params["status"] == "active"


async def test_the_async_client_retries_the_same_way() -> None:
    calls: list[httpx.Request] = []
    answers: list[Callable[[], httpx.Response]] = [lambda: error(503, "x"), lambda: httpx.Response(200, json=TASK)]

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return answers.pop(0)()

    async with AsyncClient("http://tjobs.test", "k", transport=httpx.MockTransport(handle), backoff_s=0.001) as sdk:
        assert (await sdk.get_task("42")).version == 1
    assert len(calls) == 2


def test_schedule_builders_make_the_api_shapes() -> None:
    start = datetime(2026, 11, 21, tzinfo=UTC)
    assert delay(minutes=30) == {"kind": "delay", "delay_ms": 1_800_000}
    assert delay(timedelta(seconds=1), ms=5) == {"kind": "delay", "delay_ms": 1005}
    assert at(start) == {"kind": "at", "at": "2026-11-21T00:00:00+00:00"}
    assert at(1_795_219_200_000) == {"kind": "at", "at_ms": 1_795_219_200_000}
    assert cron("0 9 * * *", timezone="Asia/Shanghai")["timezone"] == "Asia/Shanghai"
    assert every(seconds=30, start_at=start, max_fires=3) == {
        "kind": "interval",
        "every_ms": 30_000,
        "start_at": "2026-11-21T00:00:00+00:00",
        "max_fires": 3,
    }
    with pytest.raises(ValueError):
        at(datetime(2026, 1, 1))  # naive


def test_verify_accepts_what_tjobs_signs_with_any_current_secret_and_nothing_else() -> None:
    old, new = generate_secret(), generate_secret()
    body = b'{"order": 123}'
    now = int(time.time())
    headers = {
        "Webhook-Id": "42-1000",
        "Webhook-Timestamp": str(now),
        "tjobs-task-id": "42",
        "tjobs-scheduled-at": "1000",
        "tjobs-attempt": "2",
        "Webhook-Signature": signature_header([new, old], "42-1000", now, body),
    }
    for secret in (old, new, [generate_secret(), new]):
        verified = verify(body, headers, secret)
        assert (verified.flow_id, verified.task_id, verified.scheduled_at_ms, verified.attempt) == (
            "42-1000",
            "42",
            1000,
            2,
        )
    with pytest.raises(WebhookVerificationError):
        verify(body, headers, generate_secret())
    with pytest.raises(WebhookVerificationError):
        verify(body + b" ", headers, new)
    with pytest.raises(WebhookVerificationError):
        verify(body, {**headers, "Webhook-Timestamp": str(now - 301)}, new)
    with pytest.raises(WebhookVerificationError):
        verify(body, {k: v for k, v in headers.items() if k != "Webhook-Signature"}, new)
    with pytest.raises(WebhookVerificationError):  # str.isdigit() admits '²'; it is not a timestamp
        verify(body, {**headers, "Webhook-Timestamp": "²"}, new)
