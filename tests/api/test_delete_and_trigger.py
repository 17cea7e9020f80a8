"""DELETE ends a task's deliveries and keeps its flows as history; a trigger may override its flow's payload."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import orjson
import pytest
from standardwebhooks import Webhook

from tests.api.conftest import Tenant, task_body
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")


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


async def test_trigger_with_a_payload_delivers_it_signed_and_leaves_the_task_as_it_was(
    tenant: Tenant, receiver: Receiver
) -> None:
    path = f"/trigger-payload-{secrets.token_hex(4)}"
    task = await _create(tenant, receiver, path)

    triggered = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={"payload": {"n": 2, "why": "now"}})

    assert triggered.status_code == 201, triggered.text
    flow = triggered.json()
    assert flow["kind"] == "manual" and flow["payload"] == {"n": 2, "why": "now"}
    [request] = await receiver.wait_for(1, path=path)
    envelope = Webhook(tenant.app.secrets[0]).verify(request.body, request.headers)
    assert envelope["payload"] == {"n": 2, "why": "now"} and envelope["flow_id"] == flow["id"]
    stored = (await tenant.client.get(f"/v1/tasks/{task['id']}")).json()
    assert stored["payload"] == {"n": 1} and stored["version"] == task["version"]
    read = await _flow_status(tenant, flow["id"], "delivered")
    assert read["payload"] == {"n": 2, "why": "now"}
    plain = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    assert "payload" not in plain  # a trigger without a payload sends the task's own
    await receiver.wait_for(2, path=path)
    assert orjson.loads(receiver.for_flow(plain["id"])[0].body)["payload"] == {"n": 1}


async def test_a_null_payload_override_is_delivered_as_null(tenant: Tenant, receiver: Receiver) -> None:
    path = f"/trigger-null-{secrets.token_hex(4)}"
    task = await _create(tenant, receiver, path)

    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={"payload": None})).json()

    assert flow["payload"] is None
    await receiver.wait_for(1, path=path)
    assert orjson.loads(receiver.for_flow(flow["id"])[0].body)["payload"] is None


async def test_the_retry_of_a_triggered_flow_carries_the_same_override(tenant: Tenant, receiver: Receiver) -> None:
    path = f"/trigger-retry-{secrets.token_hex(4)}"
    receiver.script(path, Reply(503, retry_after="1"))  # then 200
    task = await _create(tenant, receiver, path)

    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={"payload": ["once", 7]})).json()

    await _flow_status(tenant, flow["id"], "delivered")
    first, second = receiver.for_flow(flow["id"])
    assert (first.attempt, second.attempt) == (1, 2)
    for request in (first, second):
        assert Webhook(tenant.app.secrets[0]).verify(request.body, request.headers)["payload"] == ["once", 7]


async def test_trigger_refuses_a_bad_payload_naming_the_field(tenant: Tenant, receiver: Receiver) -> None:
    task = await _create(tenant, receiver, "/trigger-bad-payload")
    too_large = {"payload": "x" * (64 * 1024 + 1)}
    too_deep: dict[str, Any] = {"payload": 1}
    for _ in range(70):
        too_deep["payload"] = [too_deep["payload"]]

    for body in (too_large, too_deep):
        refused = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "payload", refused.text
    mixed = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={"payload": 1, "when": "now"})
    assert mixed.status_code == 422 and mixed.json()["error"]["field"] == "when", mixed.text
    flows = (await tenant.client.get(f"/v1/tasks/{task['id']}/flows")).json()["items"]
    assert flows == []


async def test_trigger_refuses_an_unknown_field_and_accepts_an_empty_object(tenant: Tenant, receiver: Receiver) -> None:
    task = await _create(tenant, receiver, "/trigger-body")

    unknown = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={"when": "now"})
    empty = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={})

    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "when", unknown.text
    assert empty.status_code == 201, empty.text
