"""Two nodes on one store fire an app's tasks between them; each adds its minutes to the store, and
``GET /v1/slo?window=`` answers the same numbers on both (the cluster's, not the node's)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from testkit import NodeParts, RunningNode, run_node
from tests.e2e.conftest import FAST_SETTINGS
from tests.receiver import Receiver
from tjobs.model import FlowStatus
from tjobs.settings import Settings, load_settings
from tjobs.stores import create_store

pytestmark = pytest.mark.asyncio

ADMIN_KEY = "tja_test_admin_key_cluster_slo"
TASKS = 12


@pytest.fixture
async def pair(storage: dict[str, Any]) -> AsyncIterator[tuple[RunningNode, RunningNode]]:
    settings: Settings = load_settings(None, storage=storage, api={"admin_key": ADMIN_KEY}, **FAST_SETTINGS)
    if storage["urls"][0].startswith("sqlite"):  # MariaDB's came migrated (tests/e2e/conftest.py)
        from tjobs.stores.migrate import migrate

        await migrate(settings.storage)
    shared = create_store(settings.storage) if storage["urls"][0].startswith("memory:") else None
    async with contextlib.AsyncExitStack() as nodes:
        a = await nodes.enter_async_context(
            run_node(settings.model_copy(update={"node_id": "node-a"}), NodeParts(store=shared))
        )
        b = await nodes.enter_async_context(
            run_node(settings.model_copy(update={"node_id": "node-b"}), NodeParts(store=shared))
        )
        yield a, b


async def test_every_node_answers_the_same_cluster_numbers(
    pair: tuple[RunningNode, RunningNode], receiver: Receiver
) -> None:
    a, b = pair
    app, key = await a.create_app("cluster-slo", allowed_callback_hosts=["127.0.0.1"])
    other, other_key = await a.create_app("cluster-slo-other")
    body = {"schedule": {"kind": "delay", "delay_ms": 300}, "callback": {"url": receiver.url("/slo")}}
    async with (
        httpx.AsyncClient(base_url=a.base_url, headers={"authorization": f"Bearer {key}"}) as on_a,
        httpx.AsyncClient(base_url=b.base_url, headers={"authorization": f"Bearer {key}"}) as on_b,
        httpx.AsyncClient(base_url=b.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as admin_b,
    ):
        ids = []
        for i in range(TASKS):  # created on either node; both fire them (the compare-and-set picks one)
            client = on_a if i % 2 else on_b
            ids.append(int((await client.post("/v1/tasks", json={**body, "name": f"t{i}"})).json()["id"]))
        async with asyncio.timeout(15):
            while True:
                flows = [f for task_id in ids for f in await a.node.store.list_flows(task_id, 10)]
                if len(flows) == TASKS and all(f.status is FlowStatus.DELIVERED for f in flows):
                    break
                await asyncio.sleep(0.05)
        await a.node.slo_recorder.run_once()
        await b.node.slo_recorder.run_once()

        for _ in range(3):  # the window ends at the minute under way: asked again if a minute began between them
            seen_a = (await on_a.get("/v1/slo", params={"window": "5m"})).json()
            seen_b = (await on_b.get("/v1/slo", params={"window": "5m"})).json()
            if seen_a["from"] == seen_b["from"]:
                break
        assert seen_a == seen_b, (seen_a, seen_b)
        assert seen_a["scope"] == "cluster" and seen_a["app_id"] == app.id
        assert seen_a["fires"] == TASKS and seen_a["reach"]["delivered"] == TASKS and seen_a["reach"]["met"] is True
        assert seen_a["commit_lateness"]["count"] == TASKS and seen_a["commit_lateness"]["p99_s"] is not None
        delivery = seen_a["delivery_lateness"]  # each flow's first attempt, at the receiver's answer
        assert delivery["count"] == TASKS and delivery["at_send"]["count"] == TASKS, delivery
        assert delivery["p99_s"] is not None and delivery["p99_s"] >= seen_a["commit_lateness"]["p50_s"], seen_a
        node_fires = [(await c.get("/v1/slo")).json() for c in (on_a, on_b)]  # without a window: each node's own
        assert {n["scope"] for n in node_fires} == {"node"}

        every_app = (await admin_b.get("/v1/slo", params={"window": "1h"})).json()
        assert every_app["app_id"] is None and every_app["fires"] >= TASKS
        one = (await admin_b.get("/v1/slo", params={"window": "1h", "app_id": app.id})).json()
        assert one["fires"] == TASKS
        foreign = await on_a.get("/v1/slo", params={"window": "5m", "app_id": other.id})
        assert foreign.status_code == 404
        for params in ({"window": "2h"}, {}):
            refused = await admin_b.get("/v1/slo", params=params)
            assert refused.status_code == 422 and refused.json()["error"]["field"] == "window"
        assert other_key
