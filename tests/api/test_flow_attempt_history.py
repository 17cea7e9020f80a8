"""A flow's attempt history over HTTP: every answer that carries a flow lists what each attempt gave,
oldest first, with its status code, duration, error, destination and lateness."""

from __future__ import annotations

import pytest

from tests.api.conftest import Tenant, task_body
from tests.api.test_client_and_cli import cli_run
from tests.api.test_tenancy import wait_status
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_503_then_a_200_are_two_entries_in_every_flow_answer(tenant: Tenant, receiver: Receiver) -> None:
    path = "/history-503-then-200"
    receiver.script(path, Reply(503))  # then the default 200
    task = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url(path)}))).json()
    fresh = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    assert fresh["attempt_history"] == [] and fresh["attempt_total"] == 0  # nothing sent yet

    flow = await wait_status(tenant.client, fresh["id"], "delivered")
    history = flow["attempt_history"]
    assert [(a["attempt"], a["status_code"]) for a in history] == [(1, 503), (2, 200)]
    assert flow["attempt_total"] == 2
    assert history[0]["error"] and history[1]["error"] is None
    assert all(a["duration_ms"] >= 0 and a["destination"] == receiver.url(path) for a in history)
    assert all(a["executor"] is None for a in history)
    assert history[0]["started_at_ms"] <= history[1]["started_at_ms"]
    assert history[0]["lateness_ms"] == history[0]["started_at_ms"] - flow["scheduled_at_ms"]

    (listed,) = (await tenant.client.get(f"/v1/tasks/{task['id']}/flows")).json()["items"]
    assert listed["attempt_history"] == history


async def test_a_dead_letter_carries_its_attempts(tenant: Tenant, receiver: Receiver) -> None:
    path = "/history-dead"
    receiver.script(path, Reply(400))
    task = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url(path)}))).json()
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    await wait_status(tenant.client, flow["id"], "dead")
    (dead,) = (await tenant.client.get("/v1/dead-letters")).json()["items"]
    assert [(a["attempt"], a["status_code"]) for a in dead["attempt_history"]] == [(1, 400)]


async def test_the_openapi_document_describes_the_history(tenant: Tenant) -> None:
    document = (await tenant.client.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    assert "attempt_history" in schemas["Flow"]["properties"]
    assert {"attempt", "duration_ms", "status_code", "error", "destination", "lateness_ms"} <= set(
        schemas["FlowAttempt"]["properties"]
    )


async def test_the_cli_shows_a_flow_with_every_attempt(tenant: Tenant, receiver: Receiver) -> None:
    path = "/history-cli"
    receiver.script(path, Reply(503))  # then 200
    task = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url(path)}))).json()
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    await wait_status(tenant.client, flow["id"], "delivered")
    env = {"TJOBS_URL": str(tenant.client.base_url), "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "80"}

    shown = await cli_run("flows", "show", flow["id"], "--json", env=env)
    assert [(a["attempt"], a["status_code"]) for a in shown["attempt_history"]] == [(1, 503), (2, 200)]

    table = await cli_run("flows", "show", flow["id"], env=env)
    assert f"flow {flow['id']}: delivered, 2 attempts" in table
    lines = table.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert any(line.split()[:1] == ["1"] and "503" in line for line in lines)
    assert any(line.split()[:1] == ["2"] and "200" in line for line in lines)
    assert receiver.url(path) in table.replace("\n", "")


async def test_the_flow_keeps_each_answers_status_headers_and_a_capped_body(tenant: Tenant, receiver: Receiver) -> None:
    # Given a receiver that answers 503 with a long body and a cookie, then 200 with a short JSON body
    path = "/answers-503-then-200"
    refused = Reply(503, headers={"X-Why": "busy", "Set-Cookie": "sid=s3cret"}, body=b"b" * 5000)
    receiver.script(path, refused, Reply(200, headers={"X-Request-Id": "r-1"}, body=b'{"ok": true}'))
    task = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url(path)}))).json()
    fresh = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()

    # When it is delivered
    await wait_status(tenant.client, fresh["id"], "delivered")
    flow = (await tenant.client.get(f"/v1/flows/{fresh['id']}")).json()

    # Then the flow keeps both answers, oldest first: the status, the headers (the cookie masked) and the
    # body's first 4 KiB, with how long it was
    first, second = flow["answers"]
    assert (first["attempt"], first["status_code"], second["attempt"], second["status_code"]) == (1, 503, 2, 200)
    assert ["X-Why", "busy"] in first["headers"] and ["Set-Cookie", "[masked]"] in first["headers"]
    assert "s3cret" not in str(flow)
    assert first["body"] == "b" * 4096 and first["body_bytes"] == 5000 and first["body_truncated"]
    assert second["body"] == '{"ok": true}' and not second["body_truncated"]
    assert ["X-Request-Id", "r-1"] in second["headers"]
    assert first["destination"] == receiver.url(path) and first["task_version"] == task["version"]
    # and a list of flows carries no answers (only the flow itself does)
    (listed,) = (await tenant.client.get(f"/v1/tasks/{task['id']}/flows")).json()["items"]
    assert "answers" not in listed
