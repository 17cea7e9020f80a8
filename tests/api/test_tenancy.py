"""Tenant isolation: app A's key with app B's ids gets 404 on every operation, and learns nothing.

Given two apps on one node, B with a task, flows and a dead letter,
when A calls every task and flow operation with B's ids,
then each answer is a 404 that names only the id A sent, and B's data is unchanged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tests.api.conftest import Tenant, task_body
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def wait_status(client: httpx.AsyncClient, flow_id: str, status: str, timeout_s: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        flow: dict[str, Any] = (await client.get(f"/v1/flows/{flow_id}")).json()
        if flow.get("status") == status:
            return flow
        assert time.monotonic() < deadline, flow
        await asyncio.sleep(0.05)


async def test_an_app_can_never_see_or_change_another_apps_tasks_or_flows(
    tenant_factory: Callable[..., Awaitable[Tenant]], receiver: Receiver
) -> None:
    a = await tenant_factory("tenant-a")
    b = await tenant_factory("tenant-b")
    secret_name = "b-secret-task-name"
    receiver.script("/b-dead", Reply(400))
    b_task = (
        await b.client.post(
            "/v1/tasks",
            json=task_body(
                name=secret_name, key="b-key", payload={"b": "private"}, callback={"url": receiver.url("/b-dead")}
            ),
        )
    ).json()
    b_flow = (await b.client.post(f"/v1/tasks/{b_task['id']}/trigger")).json()
    await wait_status(b.client, b_flow["id"], "dead")
    b_before = (await b.client.get(f"/v1/tasks/{b_task['id']}")).json()
    tid, fid = b_task["id"], b_flow["id"]

    operations: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", f"/v1/tasks/{tid}", None),
        ("PATCH", f"/v1/tasks/{tid}", {"name": "hijacked"}),
        ("PATCH", f"/v1/tasks/{tid}", {"name": "hijacked", "version": b_before["version"]}),
        ("POST", f"/v1/tasks/{tid}/pause", None),
        ("POST", f"/v1/tasks/{tid}/resume", None),
        ("POST", f"/v1/tasks/{tid}/trigger", None),
        ("DELETE", f"/v1/tasks/{tid}", None),
        ("GET", f"/v1/tasks/{tid}/flows", None),
        ("GET", f"/v1/flows/{fid}", None),
        ("POST", f"/v1/flows/{fid}/redrive", None),
    ]
    for method, path, body in operations:
        response = await a.client.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
        text = response.text
        assert secret_name not in text and "private" not in text and b.app.id not in text, text
        assert response.json()["error"]["code"] == "not_found"

    many = await a.client.post("/v1/dead-letters/redrive", json={"flow_ids": [fid]})
    assert many.status_code == 200
    assert many.json()["items"][0]["status"] == 404 and "flow" not in many.json()["items"][0]
    assert secret_name not in many.text

    # A's listings hold none of B's records; its key cannot create into B's key space either.
    assert (await a.client.get("/v1/tasks", params={"limit": 1000})).json()["items"] == []
    assert (await a.client.get("/v1/tasks", params={"name_prefix": "b-"})).json()["items"] == []
    assert (await a.client.get("/v1/dead-letters")).json()["items"] == []
    same_key = await a.client.post("/v1/tasks", json=task_body(key="b-key"))
    assert same_key.status_code == 201 and same_key.json()["id"] != tid
    stats = (await a.client.get("/v1/stats")).json()
    assert stats["app_id"] == a.app.id and stats["dead_letters"] == 0 and stats["active_tasks"] == 1

    # B's task and flow are untouched.
    b_after = (await b.client.get(f"/v1/tasks/{tid}")).json()
    assert b_after == b_before
    assert (await b.client.get(f"/v1/flows/{fid}")).json()["status"] == "dead"
    assert [f["id"] for f in (await b.client.get("/v1/dead-letters")).json()["items"]] == [fid]
    assert [f["id"] for f in (await b.client.get(f"/v1/tasks/{tid}/flows")).json()["items"]] == [fid]


async def test_an_app_key_cannot_manage_apps(tenant: Tenant) -> None:
    for method, path in [
        ("POST", "/v1/apps"),
        ("GET", f"/v1/apps/{tenant.app.id}"),
        ("PATCH", f"/v1/apps/{tenant.app.id}"),
        ("POST", f"/v1/apps/{tenant.app.id}/rotate"),
        ("GET", f"/v1/apps/{tenant.app.id}/stats"),
    ]:
        response = await tenant.client.request(method, path, json={"name": "x"})
        assert response.status_code == 401, (method, path, response.text)
        assert "whsec_" not in response.text
