"""DELETE ends a task's deliveries and keeps its flows as history; trigger says what it does with a body."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import pytest

from tests.api.conftest import Tenant, task_body
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _create(tenant: Tenant, receiver: Receiver, path: str) -> dict[str, Any]:
    response = await tenant.client.post(
        "/v1/tasks", json={**task_body(receiver), "callback": {"url": receiver.url(path)}}
    )
    assert response.status_code == 201, response.text
    task: dict[str, Any] = response.json()
    return task


async def _flow_status(tenant: Tenant, flow_id: str, wanted: str, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (got := (await tenant.client.get(f"/v1/flows/{flow_id}")).json()).get("status") != wanted:
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.05)
    flow: dict[str, Any] = got
    return flow


async def test_delete_stops_the_retries_of_a_fired_flow_and_cancels_it(tenant: Tenant, receiver: Receiver) -> None:
    # Given a flow whose receiver answers 503 with Retry-After: 1 (a retry every second)
    path = f"/delete-stops-retries-{secrets.token_hex(4)}"  # one receiver serves every backend
    receiver.script(path, then=Reply(503, retry_after="1"))
    task = await _create(tenant, receiver, path)
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    await receiver.wait_for(1, path=path)
    # When the task is deleted before the retry is due
    deleted = await tenant.client.delete(f"/v1/tasks/{task['id']}")
    assert deleted.status_code == 204
    # Then no further attempt arrives, and the flow ends cancelled
    await asyncio.sleep(2.5)
    assert len(receiver.for_path(path)) == 1
    await _flow_status(tenant, flow["id"], "cancelled", timeout_s=1.0)


async def test_a_deleted_tasks_flows_stay_readable_as_history(
    tenant: Tenant, tenant_factory: Any, receiver: Receiver
) -> None:
    task = await _create(tenant, receiver, "/history")
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    await _flow_status(tenant, flow["id"], "delivered")
    assert (await tenant.client.delete(f"/v1/tasks/{task['id']}")).status_code == 204

    history = await tenant.client.get(f"/v1/tasks/{task['id']}/flows")

    assert history.status_code == 200, history.text
    assert [(f["id"], f["status"]) for f in history.json()["items"]] == [(flow["id"], "delivered")]
    assert (await tenant.client.get(f"/v1/tasks/{task['id']}")).status_code == 404
    stranger = await tenant_factory("stranger")
    assert (await stranger.client.get(f"/v1/tasks/{task['id']}/flows")).status_code == 404


async def test_flows_of_a_task_that_never_existed_are_not_found(tenant: Tenant) -> None:
    assert (await tenant.client.get("/v1/tasks/123456789/flows")).status_code == 404


async def test_trigger_refuses_a_payload_override_naming_the_field(tenant: Tenant, receiver: Receiver) -> None:
    task = await _create(tenant, receiver, "/trigger-payload")

    refused = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={"payload": {"n": 2}})

    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "payload" and "payload" in error["message"]
    flows = (await tenant.client.get(f"/v1/tasks/{task['id']}/flows")).json()["items"]
    assert flows == []


async def test_trigger_refuses_an_unknown_field_and_accepts_an_empty_object(tenant: Tenant, receiver: Receiver) -> None:
    task = await _create(tenant, receiver, "/trigger-body")

    unknown = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={"when": "now"})
    empty = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={})

    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "when", unknown.text
    assert empty.status_code == 201, empty.text
