"""The FastAPI receiver example verifies what tjobs signs, refuses anything else, and is idempotent."""

from __future__ import annotations

import time

import httpx
import pytest

from examples import fastapi_receiver
from tjobs.callbacks.signing import generate_secret, signature_header


def signed(secret: str, flow_id: str, body: bytes) -> dict[str, str]:
    now = int(time.time())
    return {"webhook-id": flow_id, "webhook-timestamp": str(now), "tjobs-task-id": "42",
            "tjobs-scheduled-at": "1000", "tjobs-attempt": "1",
            "webhook-signature": signature_header([secret], flow_id, now, body), "content-type": "application/json"}


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
