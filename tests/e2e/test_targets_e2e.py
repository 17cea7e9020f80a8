"""Named HTTP targets end to end on the embedded node (SQLite files): register, fire, retry, change,
delete, and a target removed behind the tasks' back.

Given an embedded node and a real HTTP receiver,
when a task names an HTTP target (two URLs, PUT, a header, credentials, its own retry policy),
then each fire reaches both URLs signed, with the target's method, header and credentials, is retried
while one URL fails, follows a change of the target at its next fire, and a target deleted anyway
dead-letters the flow naming it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from testkit import RunningNode, run_node
from tests.e2e.conftest import FAST_SETTINGS
from tests.receiver import Receiver, Reply
from tjobs.settings import load_settings
from tjobs.stores.migrate import migrate

SECRET = "Bearer e2e-credential-never-echoed"


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[RunningNode]:
    settings = load_settings(
        None, storage={"urls": [f"sqlite+aiosqlite:///{tmp_path / 'data'}"], "topology": "1x2x4"}, **FAST_SETTINGS
    )
    await migrate(settings.storage)
    async with run_node(settings) as handle:
        yield handle


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as started:
        yield started


async def flow_status(client: httpx.AsyncClient, flow_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        flow: dict[str, Any] = (await client.get(f"/v1/flows/{flow_id}")).json()
        if flow.get("status") == status:
            return flow
        assert time.monotonic() < deadline, flow
        await asyncio.sleep(0.05)


async def test_a_task_naming_an_http_target_is_delivered_retried_changed_and_dead_lettered_when_it_is_gone(
    running: RunningNode, receiver: Receiver
) -> None:
    app, api_key = await running.create_app("targets-e2e")
    async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {api_key}"}) as client:
        target = {
            "name": "billing-hooks",
            "protocol": "http",
            "settings": {"urls": [receiver.url("/a"), receiver.url("/b")], "method": "PUT", "headers": {"x-team": "b"}},
            "retry": {"max_attempts": 3, "backoff_base_ms": 50, "backoff_max_ms": 100},
            "credentials": {"authorization": SECRET},
        }
        created = await client.post("/v1/targets", json=target)
        assert created.status_code == 201, created.text
        assert SECRET not in created.text

        # a fire reaches both URLs; /b fails once, so the retry (attempt 2) goes out and is delivered
        receiver.script("/b", Reply(503), then=Reply(200))
        task = (
            await client.post(
                "/v1/tasks",
                json={
                    "name": "close-invoice",
                    "schedule": {"kind": "delay", "delay_ms": 300},
                    "callback": {"target": "billing-hooks"},
                    "payload": {"invoice": 7},
                },
            )
        ).json()
        flow_id = f"{task['id']}-{task['next_run_at_ms']}"
        delivered = await flow_status(client, flow_id, "delivered")
        assert delivered["attempts"] == 2
        assert [r.attempt for r in receiver.for_path("/b")] == [1, 2]
        for received in receiver.for_path("/a") + receiver.for_path("/b"):
            assert received.method == "PUT" and received.flow_id == flow_id
            assert received.headers["authorization"] == SECRET and received.headers["x-team"] == "b"
            Webhook(app.secrets[0]).verify(received.body, received.headers)

        # a change of the target applies to the next fire
        changed = await client.patch(
            "/v1/targets/billing-hooks", json={"settings": {"url": receiver.url("/c")}, "version": 1}
        )
        assert changed.status_code == 200 and changed.json()["version"] == 2
        manual = (await client.post(f"/v1/tasks/{task['id']}/trigger")).json()
        await flow_status(client, manual["id"], "delivered")
        [at_c] = receiver.for_path("/c")
        assert at_c.method == "POST" and at_c.flow_id == manual["id"]
        assert "authorization" in at_c.headers  # the credentials were kept

        # a target named by a task that can still fire cannot be deleted through the API (the task
        # above completed: it no longer counts)...
        later = {"name": "later", "schedule": {"kind": "delay", "delay_ms": 3_600_000}}
        assert (await client.post("/v1/tasks", json={**later, "callback": {"target": "billing-hooks"}})).is_success
        in_use = await client.delete("/v1/targets/billing-hooks")
        assert in_use.status_code == 409 and in_use.json()["error"]["details"] == {"tasks": 1}

        # ...but removed anyway (a race with a registration on another node), the flow dead-letters naming it
        await client.post("/v1/targets", json={**target, "name": "soon-gone", "settings": {"url": receiver.url("/d")}})
        doomed = (
            await client.post(
                "/v1/tasks",
                json={
                    "name": "doomed",
                    "schedule": {"kind": "delay", "delay_ms": 300},
                    "callback": {"target": "soon-gone"},
                },
            )
        ).json()
        assert await running.node.store.delete_target(app.id, "soon-gone")
        running.node.targets.forget(app.id, "soon-gone")
        dead = await flow_status(client, f"{doomed['id']}-{doomed['next_run_at_ms']}", "dead")
        assert "target 'soon-gone' no longer exists" in dead["last_error"]
        assert receiver.for_path("/d") == []
