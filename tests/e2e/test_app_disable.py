"""An operator disables an app: its key answers 403 and its tasks stop firing; enabled again, they resume
under their misfire policy. Deleting it (with its id as confirmation) takes its tasks with it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from testkit import RunningNode, run_node
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.model import FlowKind
from tjobs.settings import load_settings

pytestmark = pytest.mark.asyncio

ADMIN_KEY = "tja_test_admin_key_disable"


@pytest.fixture
async def node(storage: dict[str, Any]) -> AsyncIterator[RunningNode]:
    # a 1 s misfire threshold: fires missed while disabled come back as misfires
    scheduler = {**FAST_SETTINGS["scheduler"], "misfire_threshold_s": 1.0}
    settings = load_settings(
        None, storage=storage, api={"admin_key": ADMIN_KEY}, **{**FAST_SETTINGS, "scheduler": scheduler}
    )
    if storage["urls"][0].startswith("sqlite"):  # MariaDB's came migrated (tests/e2e/conftest.py)
        from tjobs.stores.migrate import migrate

        await migrate(settings.storage)
    async with run_node(settings) as running:
        yield running


async def flow_count(node: RunningNode, task_id: int) -> int:
    return len(await node.node.store.list_flows(task_id, 1000))


async def wait_flows(node: RunningNode, task_id: int, at_least: int, timeout_s: float = 10) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if await flow_count(node, task_id) >= at_least:
                return
            await asyncio.sleep(0.05)


async def test_a_disabled_app_fires_nothing_and_resumes_under_its_misfire_policy(node: RunningNode) -> None:
    app, key = await node.create_app("to-disable", allowed_callback_hosts=["127.0.0.1"])
    body = {
        "name": "every-second",
        "schedule": {"kind": "interval", "every_ms": 1000},
        "callback": {"url": "http://127.0.0.1:9/hook"},
        "misfire_policy": "fire_now",
    }
    async with (
        httpx.AsyncClient(base_url=node.base_url, headers={"authorization": f"Bearer {key}"}) as tenant,
        httpx.AsyncClient(base_url=node.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as admin,
    ):
        created = await tenant.post("/v1/tasks", json=body)
        assert created.status_code == 201, created.text
        task_id = int(created.json()["id"])
        await wait_flows(node, task_id, 2)

        disabled = await admin.post(f"/v1/apps/{app.id}/disable")
        assert disabled.status_code == 200 and disabled.json()["disabled"] is True
        before = await flow_count(node, task_id)
        refused = await tenant.get(f"/v1/tasks/{task_id}")
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "app_disabled" and app.id in refused.json()["error"]["message"]

        await asyncio.sleep(3)  # three instants, each past the 1 s misfire threshold before it is enabled
        assert await flow_count(node, task_id) == before

        enabled = await admin.post(f"/v1/apps/{app.id}/enable")
        assert enabled.status_code == 200 and enabled.json()["disabled"] is False
        await wait_flows(node, task_id, before + 1)
        flows = sorted(await node.node.store.list_flows(task_id, 1000), key=lambda f: f.scheduled_at_ms)
        resumed = flows[before]
        assert resumed.kind is FlowKind.MISFIRE and resumed.missed >= 1  # fire_now: one fire for the missed ones
        assert (await tenant.get(f"/v1/tasks/{task_id}")).status_code == 200


async def test_deleting_an_app_needs_its_id_and_takes_its_tasks(node: RunningNode) -> None:
    app, key = await node.create_app("to-delete")
    other, other_key = await node.create_app("to-keep")
    body = {
        "name": "t",
        "schedule": {"kind": "delay", "delay_ms": 3_600_000},
        "callback": {"url": "https://e.example/"},
    }
    async with (
        httpx.AsyncClient(base_url=node.base_url, headers={"authorization": f"Bearer {key}"}) as tenant,
        httpx.AsyncClient(base_url=node.base_url, headers={"authorization": f"Bearer {other_key}"}) as keeper,
        httpx.AsyncClient(base_url=node.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as admin,
    ):
        created = await tenant.post("/v1/tasks:batch", json={"tasks": [{**body, "name": f"t{i}"} for i in range(30)]})
        ids = [int(item["id"]) for item in created.json()["items"]]
        kept = int((await keeper.post("/v1/tasks", json=body)).json()["id"])

        for params in ({}, {"confirm": other.id}):
            refused = await admin.delete(f"/v1/apps/{app.id}", params=params)
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["field"] == "confirm" and app.id in refused.json()["error"]["message"]
        assert (await admin.delete("/v1/apps/app_nope", params={"confirm": "app_nope"})).status_code == 404

        deleted = await admin.delete(f"/v1/apps/{app.id}", params={"confirm": app.id})
        assert deleted.status_code == 200, deleted.text
        assert deleted.json() == {"id": app.id, "deleted_tasks": 30}
        assert (await admin.get(f"/v1/apps/{app.id}")).status_code == 404
        assert (await tenant.get("/v1/tasks")).status_code == 401
        for task_id in ids:
            assert await node.node.store.get_task(task_id) is None
        assert await node.node.store.get_task(kept) is not None
