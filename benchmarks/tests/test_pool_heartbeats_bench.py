"""The heartbeat bench's client: every heartbeat sent is answered and counted, failures by status."""

from __future__ import annotations

import httpx

from benchmarks.pool_heartbeats import POOL, _heartbeats
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.settings import load_settings
from tjobs.testing import run_node


async def test_the_lean_client_sends_each_heartbeat_on_schedule_and_counts_the_answers() -> None:
    settings = load_settings(None, storage={"urls": ["memory://"], "topology": "1x1x4"}, **FAST_SETTINGS)
    async with run_node(settings) as running:
        _, key = await running.create_app("beats")
        async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
            for name in ("e0", "e1"):
                made = await client.post(
                    f"/v1/pools/{POOL}/executors", json={"id": name, "address": "http://127.0.0.1:9"}
                )
                assert made.status_code == 201
        # three ids every 0.3 s for 0.85 s over two connections: nine heartbeats, the unknown one's 404
        beats = await _heartbeats(running.base_url, key, ["e0", "e1", "nobody"], 0.3, 0.85, connections=2)
        assert beats["heartbeats"] == 9
        assert beats["failures"] == {"404": 3}
        assert running.api.state.lean_heartbeats.served == 9
