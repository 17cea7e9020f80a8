"""Who reads a task's secrets over the API: a viewer's personal token (it may read the app, not change it)
gets every task, flow and audit entry with the values of secret-looking callback headers and JSON keys
masked, as the console shows them; the app's own key (a service reading back what it registered) and an
operator's token get them as registered. On the memory twin, one node for the module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_accounts_api import make_user, token_of

pytestmark = pytest.mark.asyncio(loop_scope="session")

SECRET = "s3cret"
HEADERS = {"Authorization": f"Bearer {SECRET}", "X-Auth-Key": f"{SECRET}-key", "X-Request-Source": "billing"}
PAYLOAD = {"n": 1, "session_id": f"{SECRET}-session", "nested": [{"password": f"{SECRET}-pw", "kept": "yes"}]}


@pytest.fixture(scope="module")
def api_storage() -> Iterator[dict[str, Any]]:
    yield {"urls": ["memory://"], "topology": "2x2x4"}


async def _role_client(api_node: RunningNode, admin: httpx.AsyncClient, tenant: Tenant, role: str) -> httpx.AsyncClient:
    name = f"secrets-{role}-{tenant.app.id}".lower()[:64]
    await make_user(admin, name, roles={tenant.app.id: role})
    token = await token_of(api_node, name)
    return httpx.AsyncClient(
        base_url=api_node.base_url, headers={"authorization": f"Bearer {token}", "x-tjobs-app": tenant.app.id}
    )


async def _task_with_secrets(tenant: Tenant) -> dict[str, Any]:
    body = task_body(
        name="secret-hook",
        key="secret-hook",
        callback={"url": "http://127.0.0.1:9/hook", "headers": HEADERS},
        payload=PAYLOAD,
    )
    created = await tenant.client.post("/v1/tasks", json=body)
    assert created.status_code == 201, created.text
    task: dict[str, Any] = created.json()
    return task


async def _assert_never_shown(client: httpx.AsyncClient, *reads: tuple[str, dict[str, str]]) -> None:
    """Each read (path, query) answers 200 without any part of the secrets in it."""
    for path, params in reads:
        reply = await client.get(path, params=params)
        assert reply.status_code == 200, (path, reply.text)
        assert SECRET not in reply.text, (path, reply.text)


def _assert_masked(task: dict[str, Any]) -> None:
    assert task["callback"]["headers"] == {
        "Authorization": "[masked]",
        "X-Auth-Key": "[masked]",
        "X-Request-Source": "billing",
    }
    assert task["payload"] == {"n": 1, "session_id": "[masked]", "nested": [{"password": "[masked]", "kept": "yes"}]}


async def test_a_viewer_token_reads_a_task_with_its_secret_headers_and_payload_keys_masked(
    api_node: RunningNode, admin: httpx.AsyncClient, tenant: Tenant
) -> None:
    task = await _task_with_secrets(tenant)
    async with await _role_client(api_node, admin, tenant, "viewer") as viewer:
        got = (await viewer.get(f"/v1/tasks/{task['id']}")).json()
        _assert_masked(got)
        assert got["callback"]["urls"] == ["http://127.0.0.1:9/hook"]  # the rest as it is
        [item] = (await viewer.get("/v1/tasks")).json()["items"]
        _assert_masked(item)
        await _assert_never_shown(
            viewer,
            (f"/v1/tasks/{task['id']}", {}),
            ("/v1/tasks", {}),
            ("/v1/tasks", {"health": "true"}),
            ("/v1/tasks", {"name_prefix": "secret"}),
            ("/v1/tasks", {"key": "secret-hook"}),
        )


async def test_the_app_key_and_an_operator_token_read_a_tasks_secrets_as_registered(
    api_node: RunningNode, admin: httpx.AsyncClient, tenant: Tenant
) -> None:
    task = await _task_with_secrets(tenant)
    async with await _role_client(api_node, admin, tenant, "operator") as operator:
        for client in (tenant.client, operator):
            got = (await client.get(f"/v1/tasks/{task['id']}")).json()
            assert got["callback"]["headers"] == HEADERS and got["payload"] == PAYLOAD
            [item] = (await client.get("/v1/tasks")).json()["items"]
            assert item["callback"]["headers"] == HEADERS and item["payload"] == PAYLOAD


async def test_a_viewer_token_reads_a_tasks_flows_with_a_triggered_payloads_secrets_masked(
    api_node: RunningNode, admin: httpx.AsyncClient, tenant: Tenant
) -> None:
    task = await _task_with_secrets(tenant)
    triggered = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger", json={"payload": PAYLOAD})
    assert triggered.status_code == 201, triggered.text
    flow_id = triggered.json()["id"]
    assert triggered.json()["payload"] == PAYLOAD  # the app key: as it sent it
    async with await _role_client(api_node, admin, tenant, "viewer") as viewer:
        payload = (await viewer.get(f"/v1/flows/{flow_id}")).json()["payload"]
        assert payload["session_id"] == "[masked]" and payload["n"] == 1
        await _assert_never_shown(
            viewer,
            (f"/v1/flows/{flow_id}", {}),
            (f"/v1/tasks/{task['id']}/flows", {}),
            ("/v1/flows", {"task_id": task["id"]}),
            ("/v1/dead-letters", {}),
        )


async def test_the_audit_of_a_tasks_changes_keeps_none_of_its_secret_values(
    api_node: RunningNode, admin: httpx.AsyncClient, tenant: Tenant
) -> None:
    task = await _task_with_secrets(tenant)
    async with await _role_client(api_node, admin, tenant, "operator") as operator:
        renamed = await operator.patch(f"/v1/tasks/{task['id']}", json={"name": "renamed"})
        assert renamed.status_code == 200, renamed.text
        assert renamed.json()["callback"]["headers"] == HEADERS  # an operator, who may change it, sees it
        assert (await operator.post(f"/v1/tasks/{task['id']}/pause")).status_code == 200
    async with await _role_client(api_node, admin, tenant, "viewer") as viewer:
        audit = await viewer.get("/v1/audit", params={"object": task["id"]})
    assert audit.status_code == 200, audit.text
    entries = audit.json()["items"]
    assert [e["action"] for e in entries] == ["task.pause", "task.update"]
    update = entries[1]
    assert (update["before"]["name"], update["after"]["name"]) == ("secret-hook", "renamed")
    assert update["after"]["callback"]["headers"]["X-Request-Source"] == "billing"
    assert SECRET not in audit.text, audit.text
    assert SECRET not in (await admin.get("/v1/audit", params={"app": tenant.app.id})).text  # never stored
