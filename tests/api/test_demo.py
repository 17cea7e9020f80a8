"""``tjobs dev``: only the demo app may call loopback, and the demo echo receiver is private and robust.

The node runs with the settings ``tjobs dev`` builds (:func:`tjobs.cli.main.dev_settings`) on SQLite, its API
mounted with the demo routes and called in process.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from tjobs.api import create_api
from tjobs.api.app import create_app_record
from tjobs.api.demo import DEMO_APP_ID, ECHO_PATH, bootstrap_demo
from tjobs.cli.main import dev_settings
from tjobs.delivery.signing import signature_header
from tjobs.node import Node
from tjobs.stores.migrate import migrate

pytestmark = pytest.mark.asyncio(loop_scope="session")

DEMO_KEY = "tjk_demo_" + "k" * 32
ADMIN_KEY = "tja_" + "a" * 32
BASE_URL = "http://127.0.0.1:18080"


@dataclass
class Dev:
    node: Node
    client: httpx.AsyncClient  # no key


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def dev(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Dev]:
    data_dir: Path = tmp_path_factory.mktemp("dev")
    settings = dev_settings(18080, data_dir, {"admin_key": ADMIN_KEY, "demo_api_key": DEMO_KEY})
    await migrate(settings.storage)
    node = Node(settings)
    await node.start()
    try:
        await bootstrap_demo(node, DEMO_KEY, BASE_URL)
        transport = httpx.ASGITransport(app=create_api(node, demo_routes=True))
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield Dev(node, client)
    finally:
        await node.stop(drain_timeout_s=2.0)


def task(url: str) -> dict[str, object]:
    return {"name": "t", "schedule": {"kind": "delay", "delay_ms": 3_600_000}, "callback": {"url": url}}


async def test_in_dev_only_the_demo_app_may_call_loopback(dev: Dev) -> None:
    _, other_key = await create_app_record(dev.node, {"name": "other"})
    demo = await dev.client.post(
        "/v1/tasks", json=task(f"{BASE_URL}/hook"), headers={"authorization": f"Bearer {DEMO_KEY}"}
    )
    assert demo.status_code == 201, demo.text
    other = await dev.client.post(
        "/v1/tasks", json=task(f"{BASE_URL}/hook"), headers={"authorization": f"Bearer {other_key}"}
    )
    assert other.status_code == 422 and other.json()["error"]["field"] == "callback.url", other.text


async def test_the_echo_log_needs_the_demo_key(dev: Dev) -> None:
    assert (await dev.client.get(ECHO_PATH)).status_code == 401
    assert (await dev.client.get(ECHO_PATH, headers={"authorization": "Bearer nope"})).status_code == 401
    answer = await dev.client.get(ECHO_PATH, headers={"authorization": f"Bearer {DEMO_KEY}"})
    assert answer.status_code == 200 and "received" in answer.json()


async def test_the_echo_refuses_unsigned_and_malformed_callbacks_without_a_500(dev: Dev) -> None:
    body = b'{"hello": 1}'
    unsigned = await dev.client.post(ECHO_PATH, content=body, headers={"tjobs-scheduled-at": "soon"})
    assert unsigned.status_code == 401
    app = dev.node.apps.cached(DEMO_APP_ID)
    assert app is not None
    now_s = int(time.time())
    signed = {
        "webhook-id": "1-2",
        "webhook-timestamp": str(now_s),
        "webhook-signature": signature_header(app.secrets, "1-2", now_s, body),
    }
    bad = await dev.client.post(ECHO_PATH, content=body, headers={**signed, "tjobs-scheduled-at": "soon"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "tjobs-scheduled-at", bad.text
    good = await dev.client.post(ECHO_PATH, content=body, headers={**signed, "tjobs-scheduled-at": "1000"})
    assert good.status_code == 200


async def test_the_echo_accepts_a_signed_callback_after_the_app_left_the_nodes_cache(dev: Dev) -> None:
    """The app cache keeps an app for 10 s; a demo task every 10 s found it expired every other fire,
    and the echo refused its correctly signed callback (401 "signature BAD", the flow dead)."""
    app = await dev.node.apps.get(DEMO_APP_ID)
    dev.node.apps.invalidate(DEMO_APP_ID)
    body = b'{"hello": 2}'
    now_s = int(time.time())
    headers = {
        "webhook-id": "3-4",
        "webhook-timestamp": str(now_s),
        "webhook-signature": signature_header(app.secrets, "3-4", now_s, body),
        "tjobs-scheduled-at": str(now_s * 1000),
    }
    answer = await dev.client.post(ECHO_PATH, content=body, headers=headers)
    assert answer.status_code == 200, answer.text
