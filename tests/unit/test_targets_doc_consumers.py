"""The HTTP consumer of docs/targets.md runs as written: it accepts a signed callback once per flow
and refuses a forged one."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from standardwebhooks import Webhook

from tjobs.delivery.signing import generate_secret

DOC = Path(__file__).resolve().parents[2] / "docs" / "targets.md"


def http_consumer() -> str:
    section = DOC.read_text().split("### HTTP", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


async def test_the_documented_http_consumer_verifies_and_deduplicates(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = generate_secret()
    monkeypatch.setattr(web, "run_app", lambda *args, **kwargs: None)  # the example serves forever
    example: dict[str, Any] = {"SIGNING_SECRET": secret}
    exec(compile(http_consumer(), str(DOC), "exec"), example)

    server = TestServer(example["app"])
    await server.start_server()
    try:
        body = b'{"flow_id": "7-1", "payload": {"order": 1}}'
        now = int(time.time())
        signature = Webhook(secret).sign("7-1", datetime.fromtimestamp(now, UTC), body.decode())
        headers = {"webhook-id": "7-1", "webhook-timestamp": str(now), "webhook-signature": signature}
        async with httpx.AsyncClient(base_url=str(server.make_url("/"))) as client:
            assert (await client.post("/hooks/due", content=body, headers=headers)).status_code == 204
            assert (await client.post("/hooks/due", content=body, headers=headers)).status_code == 204
            forged = {**headers, "webhook-signature": "v1,AAAA"}
            assert (await client.post("/hooks/due", content=body, headers=forged)).status_code == 401
        assert example["seen"] == {"7-1"}
    finally:
        await server.close()
