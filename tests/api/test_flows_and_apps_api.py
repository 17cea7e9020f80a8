"""Dead letters and their redrive, app management and key rotation, and stats, over HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_tenancy import wait_status
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def dead_flow(tenant: Tenant, receiver: Receiver, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    receiver.script(path, Reply(400))  # a permanent failure: dead at once; the next reply is 200
    task = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url(path)}))).json()
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    return task, await wait_status(tenant.client, flow["id"], "dead")


async def test_a_dead_flow_is_listed_and_redrive_delivers_it_keeping_its_attempts(
    tenant: Tenant, receiver: Receiver
) -> None:
    _, dead = await dead_flow(tenant, receiver, "/redrive-one")
    assert dead["attempts"] == 1 and dead["last_status_code"] == 400
    listed = (await tenant.client.get("/v1/dead-letters")).json()
    assert [f["id"] for f in listed["items"]] == [dead["id"]] and listed["next_cursor"] is None

    redriven = await tenant.client.post(f"/v1/flows/{dead['id']}/redrive")
    assert redriven.status_code == 200, redriven.text
    assert redriven.json()["status"] == "pending" and redriven.json()["attempts"] == 1
    delivered = await wait_status(tenant.client, dead["id"], "delivered")
    assert delivered["attempts"] == 2
    assert [r.attempt for r in receiver.for_flow(dead["id"])] == [1, 2]
    assert (await tenant.client.get("/v1/dead-letters")).json()["items"] == []

    again = await tenant.client.post(f"/v1/flows/{dead['id']}/redrive")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"


async def test_redrive_many_answers_per_id_and_dead_letters_page(tenant: Tenant, receiver: Receiver) -> None:
    flows = [(await dead_flow(tenant, receiver, f"/redrive-many-{i}"))[1] for i in range(3)]
    first = (await tenant.client.get("/v1/dead-letters", params={"limit": 2})).json()
    rest = (await tenant.client.get("/v1/dead-letters", params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert {f["id"] for f in first["items"] + rest["items"]} == {f["id"] for f in flows}
    ids = [f["id"] for f in flows]
    result = (await tenant.client.post("/v1/dead-letters/redrive", json={"flow_ids": [*ids, "1-2", "garbage"]})).json()
    assert (result["redriven"], result["failed"]) == (3, 2)
    assert [i["status"] for i in result["items"]] == [200, 200, 200, 404, 404]
    for flow_id in ids:
        await wait_status(tenant.client, flow_id, "delivered")
    bad = await tenant.client.post("/v1/dead-letters/redrive", json={"flow_ids": "x"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "flow_ids"


async def test_admin_creates_shows_and_updates_an_app(admin: httpx.AsyncClient, api_node: RunningNode) -> None:
    created = await admin.post(
        "/v1/apps",
        json={
            "name": "billing",
            "rate_limit_per_s": 50,
            "max_concurrency": 5,
            "allowed_callback_hosts": ["10.0.0.0/8", "*.corp.example"],
            "callback_defaults": {"timeout_ms": 1500, "headers": {"x-team": "billing"}},
        },
    )
    assert created.status_code == 201, created.text
    app = created.json()
    assert app["api_key"].startswith("tjk_") and app["secrets"][0].startswith("whsec_")
    shown = (await admin.get(f"/v1/apps/{app['id']}")).json()
    assert "api_key" not in shown and shown["secrets"] == app["secrets"]
    assert shown["rate_limit_per_s"] == 50 and shown["max_concurrency"] == 5
    updated = await admin.patch(f"/v1/apps/{app['id']}", json={"max_concurrency": 7, "max_active_tasks": 3})
    assert updated.status_code == 200 and updated.json()["max_concurrency"] == 7
    assert updated.json()["settings"]["max_active_tasks"] == 3

    async with httpx.AsyncClient(
        base_url=api_node.base_url, headers={"authorization": f"Bearer {app['api_key']}"}
    ) as client:
        me = (await client.get("/v1/app")).json()
        assert me["id"] == app["id"] and "api_key" not in me
        # callback defaults apply under the task's own fields; the allow-list admits 10/8
        task = (await client.post("/v1/tasks", json=task_body(callback={"url": "http://10.1.2.3/hook"}))).json()
        assert task["callback"]["timeout_ms"] == 1500 and task["callback"]["headers"] == {"x-team": "billing"}
        refused = await client.post("/v1/tasks", json=task_body(callback={"url": "http://192.168.1.1/"}))
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "target_refused"

    for body, field in [
        ({}, "name"),
        ({"name": "x", "max_concurrency": 0}, "max_concurrency"),
        ({"name": "x", "allowed_callback_hosts": ["not a host!"]}, "allowed_callback_hosts[0]"),
        ({"name": "x", "callback_defaults": {"timeout_ms": -1}}, "callback_defaults.timeout_ms"),
        ({"name": "x", "colour": 1}, "colour"),
    ]:
        response = await admin.post("/v1/apps", json=body)
        assert response.status_code == 422 and response.json()["error"]["field"] == field, response.text
    assert (await admin.get("/v1/apps/app_nope")).status_code == 404


async def test_rotation_replaces_the_key_at_once_and_signs_with_both_secrets_during_grace(
    admin: httpx.AsyncClient, api_node: RunningNode, receiver: Receiver
) -> None:
    app = (await admin.post("/v1/apps", json={"name": "rotating"})).json()
    old_key, old_secret = app["api_key"], app["secrets"][0]
    rotated = await admin.post(f"/v1/apps/{app['id']}/rotate", json={"grace_s": 3600})
    assert rotated.status_code == 200, rotated.text
    new_key, secrets = rotated.json()["api_key"], rotated.json()["secrets"]
    assert new_key != old_key and secrets[1] == old_secret and len(secrets) == 2

    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        assert (await client.get("/v1/tasks", headers={"authorization": f"Bearer {old_key}"})).status_code == 401
        headers = {"authorization": f"Bearer {new_key}"}
        task = (await client.post("/v1/tasks", headers=headers, json=task_body(receiver))).json()
        flow = (await client.post(f"/v1/tasks/{task['id']}/trigger", headers=headers)).json()
        deadline = time.monotonic() + 10
        while not receiver.for_flow(flow["id"]):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        [request] = receiver.for_flow(flow["id"])
        for secret in secrets:  # a receiver holding either secret verifies the callback
            Webhook(secret).verify(request.body, request.headers)

    final = (await admin.post(f"/v1/apps/{app['id']}/rotate", json={"api_key": False, "grace_s": 0})).json()
    # grace 0 drops the secret just replaced at once; the first one keeps its own hour of grace
    assert final["secrets"][1:] == [old_secret] and final["secrets"][0] not in secrets and "api_key" not in final
    bad = await admin.post(f"/v1/apps/{app['id']}/rotate", json={"api_key": False, "secret": False})
    assert bad.status_code == 422


async def test_stats_count_the_apps_tasks_fires_and_dead_letters(
    tenant_factory: Callable[..., Awaitable[Tenant]], receiver: Receiver, admin: httpx.AsyncClient
) -> None:
    tenant = await tenant_factory("stats")
    tasks = [(await tenant.client.post("/v1/tasks", json=task_body(name=f"s{i}"))).json() for i in range(3)]
    await tenant.client.post(f"/v1/tasks/{tasks[0]['id']}/pause")
    await dead_flow(tenant, receiver, "/stats-dead")
    # Counts are read at the request (the stores' task counts, the app's dead flows); the dead flow is
    # counted once the deliverer's outcome writer stored it.
    deadline = time.monotonic() + 10
    while (stats := (await tenant.client.get("/v1/stats")).json())["dead_letters"] == 0:
        assert time.monotonic() < deadline, stats
        await asyncio.sleep(0.1)
    assert (stats["active_tasks"], stats["paused_tasks"], stats["dead_letters"]) == (3, 1, 1)
    assert set(stats["fire_lateness_recent"]) == {"1m", "5m", "1h"}
    as_admin = (await admin.get(f"/v1/apps/{tenant.app.id}/stats")).json()
    assert as_admin.pop("counted_at_ms") >= stats.pop("counted_at_ms")  # each read counts at its request
    assert stats == as_admin


async def test_the_active_task_quota_answers_429(tenant_factory: Callable[..., Awaitable[Tenant]]) -> None:
    tenant = await tenant_factory("quota", max_active_tasks=2)
    for i in range(2):
        assert (await tenant.client.post("/v1/tasks", json=task_body(name=f"q{i}"))).status_code == 201
    over = await tenant.client.post("/v1/tasks", json=task_body(name="q2"))
    assert over.status_code == 429 and over.json()["error"]["code"] == "quota_exceeded"
    batch = await tenant.client.post("/v1/tasks/batch", json={"tasks": [task_body()]})
    assert batch.status_code == 429
