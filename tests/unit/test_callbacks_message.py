"""What a callback carries: the default envelope, the task's own body and headers, and the signed headers."""

from __future__ import annotations

from typing import Any

import orjson
from standardwebhooks import Webhook

from tjobs.clock import SystemClock
from tjobs.delivery.message import CallbackMessage
from tjobs.delivery.signing import generate_secret
from tjobs.model import (
    App,
    DeliveryMode,
    Flow,
    FlowKind,
    FlowStatus,
    MisfirePolicy,
    Task,
    TaskStatus,
    flow_id,
)
from tjobs.specs import AtSpec, callback_from_json

SECRET = generate_secret()
TASK_ID = 7_340_032_123_456_789_012  # a 63-bit id: must survive as a string
SCHEDULED_MS = 1_795_770_000_000  # 2026-11-27T09:00:00Z
NOW_MS = SCHEDULED_MS + 1234


def _message(callback: dict[str, Any], payload: Any = None, secrets: list[str] | None = None) -> CallbackMessage:
    task = Task(
        TASK_ID,
        "shop",
        "close-order-123",
        None,
        AtSpec(SCHEDULED_MS),
        callback_from_json(callback),
        payload,
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.ACTIVE,
        None,
        1,
        1,
        0,
        0,
    )
    flow = Flow(TASK_ID, SCHEDULED_MS, "shop", FlowKind.SCHEDULED, FlowStatus.PENDING, 0, SCHEDULED_MS, 0, 0)
    app = App("shop", "shop", "", [SECRET] if secrets is None else secrets)
    return CallbackMessage(task, flow, app, flow_id(TASK_ID, SCHEDULED_MS), default_timeout_ms=3000)


def test_the_default_body_is_the_json_envelope_with_the_attempt() -> None:
    message = _message({"urls": ["https://orders.example/close"]}, payload={"order": 123})
    headers, body = message.signed(2, NOW_MS)
    assert body is not None
    assert orjson.loads(body) == {
        "flow_id": f"{TASK_ID}-{SCHEDULED_MS}",
        "task_id": str(TASK_ID),
        "task_name": "close-order-123",
        "scheduled_at": "2026-11-27T09:00:00.000Z",
        "scheduled_at_ms": SCHEDULED_MS,
        "attempt": 2,
        "payload": {"order": 123},
    }
    assert headers["content-type"] == "application/json"


def test_standard_webhook_and_tjobs_headers_are_set() -> None:
    message = _message({"urls": ["https://orders.example/close"]})
    headers, body = message.signed(3, NOW_MS)
    assert headers["webhook-id"] == f"{TASK_ID}-{SCHEDULED_MS}"
    assert headers["webhook-timestamp"] == str(NOW_MS // 1000)
    assert headers["tjobs-task-id"] == str(TASK_ID)
    assert headers["tjobs-scheduled-at"] == str(SCHEDULED_MS)
    assert headers["tjobs-attempt"] == "3"
    assert body is not None
    # The library checks freshness against the real clock; sign "now" to verify.
    headers, body = message.signed(3, SystemClock().now_ms())
    assert body is not None
    Webhook(SECRET).verify(body, headers)


def test_the_flow_id_is_the_same_on_every_attempt_and_the_signature_changes() -> None:
    message = _message({"urls": ["https://x.example/"]})
    first, _ = message.signed(1, NOW_MS)
    second, _ = message.signed(2, NOW_MS + 5000)
    assert first["webhook-id"] == second["webhook-id"]
    assert first["webhook-signature"] != second["webhook-signature"]


def test_a_custom_body_and_headers_are_sent_verbatim() -> None:
    message = _message(
        {
            "urls": ["https://x.example/"],
            "method": "PUT",
            "body": "order=123&close=1",
            "headers": {"X-Order": "123", "Content-Type": "application/x-www-form-urlencoded"},
        }
    )
    headers, body = message.signed(1, NOW_MS)
    assert body == b"order=123&close=1"
    assert headers["X-Order"] == "123"
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert "content-type" not in headers
    assert message.method == "PUT"


def test_a_custom_body_without_content_type_gets_a_sensible_one() -> None:
    assert _message({"urls": ["https://x/"], "body": ' {"a": 1}'}).signed(1, NOW_MS)[0]["content-type"] == (
        "application/json"
    )
    assert (
        _message({"urls": ["https://x/"], "body": "ping"}).signed(1, NOW_MS)[0]["content-type"].startswith("text/plain")
    )


def test_get_without_a_body_sends_none_and_signs_the_empty_body() -> None:
    message = _message({"urls": ["https://x.example/"], "method": "GET"})
    headers, body = message.signed(1, NOW_MS)
    assert body is None
    assert "content-type" not in headers


def test_unicast_url_timeout_and_multicast_urls() -> None:
    assert _message({"url": "https://a/"}).destinations == ["https://a/"]
    assert _message({"urls": ["https://a/", "https://b/"], "timeout_ms": 250}).timeout_ms == 250
    assert _message({"urls": ["https://a/"]}).timeout_ms == 3000


def test_every_rotating_secret_signs() -> None:
    other = generate_secret()
    headers, _ = _message({"urls": ["https://a/"]}, secrets=[SECRET, other]).signed(1, NOW_MS)
    assert len(headers["webhook-signature"].split(" ")) == 2
