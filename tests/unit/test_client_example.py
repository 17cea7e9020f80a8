"""The FastAPI receiver example verifies what tjobs signs, refuses anything else, and is idempotent."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from examples import fastapi_receiver
from tjobs.delivery.signing import generate_secret, signature_header


def signed(secret: str, flow_id: str, body: bytes) -> dict[str, str]:
    now = int(time.time())
    return {
        "webhook-id": flow_id,
        "webhook-timestamp": str(now),
        "tjobs-task-id": "42",
        "tjobs-scheduled-at": "1000",
        "tjobs-attempt": "1",
        "webhook-signature": signature_header([secret], flow_id, now, body),
        "content-type": "application/json",
    }


async def test_the_example_receiver_accepts_signed_callbacks_once_and_refuses_forgeries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = generate_secret()
    monkeypatch.setenv("TJOBS_SIGNING_SECRETS", f"{generate_secret()},{secret}")
    transport = httpx.ASGITransport(app=fastapi_receiver.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver.test") as client:
        await check(client, secret)


async def check(client: httpx.AsyncClient, secret: str) -> None:
    body = b'{"order": 123}'
    first = await client.post("/tjobs/close-order", content=body, headers=signed(secret, "42-1000", body))
    assert first.status_code == 204 and "42-1000" in fastapi_receiver._done
    again = await client.post("/tjobs/close-order", content=body, headers=signed(secret, "42-1000", body))
    assert again.status_code == 204
    forged = await client.post("/tjobs/close-order", content=body, headers=signed(generate_secret(), "42-2000", body))
    assert forged.status_code == 401 and "42-2000" not in fastapi_receiver._done


async def test_the_example_receiver_accepts_a_signed_non_json_body(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = generate_secret()
    monkeypatch.setenv("TJOBS_SIGNING_SECRETS", secret)
    transport = httpx.ASGITransport(app=fastapi_receiver.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver.test") as client:
        body = b"order=123&action=close"  # a task's callback.body is sent as given, JSON or not
        headers = {**signed(secret, "42-3000", body), "content-type": "application/x-www-form-urlencoded"}
        answer = await client.post("/tjobs/close-order", content=body, headers=headers)
        assert answer.status_code == 204 and "42-3000" in fastapi_receiver._done
        # tjobs sends content-type: application/json unless the task sets one, whatever callback.body holds
        answer = await client.post("/tjobs/close-order", content=body, headers=signed(secret, "42-3001", body))
        assert answer.status_code == 204 and "42-3001" in fastapi_receiver._done


def readme_verify_call() -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    found = re.search(r"`(standardwebhooks\.Webhook\(secret\)\.verify\([^`]*\))`", readme)
    assert found, "the README's receiver example is gone"
    return found.group(1)


@pytest.mark.parametrize("body", [b'{"order": 123}', b"order=123", b"", "caf\u00e9 \u2713".encode()])
def test_the_readme_verify_call_accepts_any_signed_body(body: bytes) -> None:
    import standardwebhooks

    secret = generate_secret()
    headers = signed(secret, "42-4000", body)
    eval(
        readme_verify_call(), {"standardwebhooks": standardwebhooks, "secret": secret, "body": body, "headers": headers}
    )
