"""A task's health in the task search and its history a page at a time, over HTTP on every backend:
``GET /v1/tasks?health=true`` answers each task's last result and its last 24 h, and ``GET
/v1/tasks/{id}/flows`` pages older (``before_ms``) and newer (``after_ms``) by the flows' instants."""

from __future__ import annotations

import pytest

from tests.api.conftest import Tenant, task_body
from tests.api.test_tenancy import wait_status
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_the_task_search_says_each_tasks_last_result_success_rate_and_failures(
    tenant: Tenant, receiver: Receiver
) -> None:
    # Given a task whose receiver took two flows and refused one for good, and a task that never fired
    path = "/health-two-of-three"
    receiver.script(path, Reply(200), Reply(200), Reply(400))
    busy = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url(path)}))).json()
    idle = (await tenant.client.post("/v1/tasks", json=task_body(name="idle"))).json()
    for status in ("delivered", "delivered", "dead"):
        flow = (await tenant.client.post(f"/v1/tasks/{busy['id']}/trigger")).json()
        last = await wait_status(tenant.client, flow["id"], status)

    # When the tasks are searched with their health
    page = (await tenant.client.get("/v1/tasks", params={"health": "true"})).json()
    health = {item["id"]: item["health"] for item in page["items"]}

    # Then the busy task's last result is the dead flow, and 2 of its 3 finished flows were delivered
    figures = health[busy["id"]]
    assert (figures["last_status"], figures["last_changed_at"]) == ("dead", last["updated_at"])
    assert (figures["delivered"], figures["failed"], figures["open"], figures["counted"]) == (2, 1, 0, 3)
    assert figures["success_rate"] == round(2 / 3, 4) and not figures["capped"] and figures["window_s"] == 86_400
    assert health[idle["id"]]["last_status"] is None and health[idle["id"]]["success_rate"] is None
    # and without health=true the search answers no health
    assert "health" not in (await tenant.client.get("/v1/tasks")).json()["items"][0]


async def test_health_reads_at_most_100_tasks_a_page_and_the_cursor_goes_on(tenant: Tenant) -> None:
    # Given 101 tasks more than the tenant had
    before = len((await tenant.client.get("/v1/tasks", params={"limit": 1000})).json()["items"])
    batch = await tenant.client.post("/v1/tasks/batch", json={"tasks": [task_body(name=f"h{i}") for i in range(101)]})
    assert batch.status_code == 200, batch.text
    # When they are searched with their health and a limit over 100 (a schema-valid request: not refused)
    first = await tenant.client.get("/v1/tasks", params={"health": "true", "limit": 1000})
    assert first.status_code == 200, first.text
    # Then a page holds 100 of them with their health, and the cursor gives the rest
    assert len(first.json()["items"]) == 100 and all("health" in t for t in first.json()["items"])
    rest = await tenant.client.get(
        "/v1/tasks", params={"health": "true", "limit": 1000, "cursor": first.json()["next_cursor"]}
    )
    assert len(rest.json()["items"]) == before + 101 - 100
    assert (await tenant.client.get("/v1/tasks", params={"health": "yes please"})).json()["error"]["field"] == "health"


async def test_a_tasks_flows_page_older_and_newer_by_instant(tenant: Tenant) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body())).json()
    ids = [(await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()["id"] for _ in range(5)]
    flows = f"/v1/tasks/{task['id']}/flows"

    newest = (await tenant.client.get(flows, params={"limit": 2})).json()["items"]
    assert [f["id"] for f in newest] == ids[:2:-1]
    older = (await tenant.client.get(flows, params={"limit": 2, "before_ms": newest[-1]["scheduled_at_ms"]})).json()
    assert [f["id"] for f in older["items"]] == [ids[2], ids[1]]
    newer = (
        await tenant.client.get(flows, params={"limit": 2, "after_ms": older["items"][0]["scheduled_at_ms"]})
    ).json()
    assert [f["id"] for f in newer["items"]] == [ids[4], ids[3]]
    refused = await tenant.client.get(flows, params={"after_ms": "soon"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "after_ms"
