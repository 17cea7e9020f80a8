"""Every task operation and its errors over HTTP, on the memory twin, SQLite and MariaDB.

Given a running node and an app's API key, when the app calls each ``/v1/tasks`` operation,
then it answers the documented status and shape, and every bad input is a field-named 4xx.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from testkit import RunningNode
from tests.api.conftest import ADMIN_KEY, Tenant, refused_before_storage, task_body
from tests.receiver import Receiver

pytestmark = pytest.mark.asyncio(loop_scope="session")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def create(tenant: Tenant, **extra: Any) -> dict[str, Any]:
    response = await tenant.client.post("/v1/tasks", json=task_body(**extra))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def assert_error(response: Any, status: int, code: str | None = None, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if code is not None:
        assert error["code"] == code, error
    if field is not None:
        assert error["field"] == field, error
        assert field in error["message"]


async def test_create_answers_201_with_the_task_and_its_next_run(tenant: Tenant) -> None:
    before = now_ms()
    task = await create(tenant, name="close-order-123", payload={"order": 123})
    assert task["name"] == "close-order-123"
    assert task["status"] == "active"
    assert task["version"] == 1
    assert before + 3_600_000 <= task["next_run_at_ms"] <= now_ms() + 3_600_000
    assert task["callback"]["urls"] == ["http://127.0.0.1:9/hook"]
    assert task["payload"] == {"order": 123}
    assert task["misfire_policy"] == "fire_now"


async def test_create_with_a_taken_key_answers_200_with_the_existing_task(tenant: Tenant) -> None:
    first = await create(tenant, key="order-1-close")
    again = await tenant.client.post("/v1/tasks", json=task_body(key="order-1-close", name="other"))
    assert again.status_code == 200
    assert again.json()["id"] == first["id"]
    assert again.json()["name"] == first["name"]


async def test_twenty_concurrent_creates_with_one_key_make_one_task(tenant: Tenant) -> None:
    responses = await asyncio.gather(
        *(tenant.client.post("/v1/tasks", json=task_body(key="concurrent-key", name=f"n{i}")) for i in range(20))
    )
    assert sorted(r.status_code for r in responses) == [200] * 19 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    listed = (await tenant.client.get("/v1/tasks", params={"limit": 1000})).json()["items"]
    assert [t["key"] for t in listed].count("concurrent-key") == 1


async def test_get_answers_the_task_and_404_for_unknown_or_malformed_ids(tenant: Tenant) -> None:
    task = await create(tenant)
    got = await tenant.client.get(f"/v1/tasks/{task['id']}")
    # a task's own GET also shows its parents (README "Child tasks"): none here
    assert got.status_code == 200 and got.json() == {**task, "parents": None}
    assert_error(await tenant.client.get("/v1/tasks/123"), 404, "not_found")
    assert_error(await tenant.client.get("/v1/tasks/not-a-number"), 404, "not_found")
    assert_error(await tenant.client.get("/v1/tasks/99999999999999999999999"), 404, "not_found")
    # Unicode digits that int() refuses (found by schemathesis as a 500 on POST …/trigger)
    for raw in ("%C2%B2", "%E2%91%A0", "%D9%A3"):  # ², ①, Arabic-Indic three
        assert_error(await tenant.client.get(f"/v1/tasks/{raw}"), 404, "not_found")
        assert_error(await tenant.client.post(f"/v1/tasks/{raw}/trigger"), 404, "not_found")


async def test_update_recomputes_the_next_run_and_bumps_the_version(tenant: Tenant) -> None:
    task = await create(tenant)
    at_ms = now_ms() + 7_200_000
    response = await tenant.client.patch(
        f"/v1/tasks/{task['id']}",
        json={
            "schedule": {"kind": "at", "at_ms": at_ms},
            "name": "renamed",
            "payload": [1, 2],
            "misfire_policy": "skip",
            "callback": {"url": "http://127.0.0.1:9/other", "timeout_ms": 500},
            "version": task["version"],
        },
    )
    assert response.status_code == 200, response.text
    updated = response.json()
    assert updated["next_run_at_ms"] == at_ms
    assert updated["version"] == task["version"] + 1
    assert (updated["name"], updated["payload"], updated["misfire_policy"]) == ("renamed", [1, 2], "skip")
    assert updated["callback"] == {"urls": ["http://127.0.0.1:9/other"], "method": "POST", "timeout_ms": 500}


async def test_update_with_a_stale_version_answers_409_and_changes_nothing(tenant: Tenant) -> None:
    task = await create(tenant)
    first = await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"name": "a", "version": 1})
    assert first.status_code == 200
    lost = await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"name": "b", "version": 1})
    assert_error(lost, 409, "version_conflict")
    assert (await tenant.client.get(f"/v1/tasks/{task['id']}")).json()["name"] == "a"


async def test_concurrent_updates_at_one_version_let_exactly_one_win(tenant: Tenant) -> None:
    task = await create(tenant)
    responses = await asyncio.gather(
        *(tenant.client.patch(f"/v1/tasks/{task['id']}", json={"name": f"n{i}", "version": 1}) for i in range(5))
    )
    assert sorted(r.status_code for r in responses) == [200] + [409] * 4


async def test_update_rejects_unknown_fields_and_bad_values_by_name(tenant: Tenant) -> None:
    task = await create(tenant)
    path = f"/v1/tasks/{task['id']}"
    assert_error(await tenant.client.patch(path, json={"colour": 1}), 422, "unknown_field", "colour")
    assert_error(await tenant.client.patch(path, json={"version": "x"}), 422, field="version")
    assert_error(
        await tenant.client.patch(path, json={"schedule": {"kind": "cron", "expr": "bad"}}), 422, field="schedule.expr"
    )
    assert_error(await tenant.client.patch(path, json=[1]), 422, field="body")


async def test_pause_and_resume_change_the_status(tenant: Tenant) -> None:
    task = await create(tenant)
    paused = await tenant.client.post(f"/v1/tasks/{task['id']}/pause")
    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    again = await tenant.client.post(f"/v1/tasks/{task['id']}/pause")
    assert again.json()["version"] == paused.json()["version"]  # idempotent
    resumed = await tenant.client.post(f"/v1/tasks/{task['id']}/resume")
    assert resumed.status_code == 200 and resumed.json()["status"] == "active"
    assert resumed.json()["next_run_at_ms"] == task["next_run_at_ms"]


async def test_trigger_fires_now_with_its_own_flow_delivered_to_the_target(tenant: Tenant, receiver: Receiver) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body(receiver))).json()
    triggered = await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")
    assert triggered.status_code == 201, triggered.text
    flow = triggered.json()
    assert flow["kind"] == "manual" and flow["task_id"] == task["id"]
    deadline = time.monotonic() + 10
    while (got := (await tenant.client.get(f"/v1/flows/{flow['id']}")).json())["status"] != "delivered":
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.05)
    assert receiver.for_flow(flow["id"])
    flows = (await tenant.client.get(f"/v1/tasks/{task['id']}/flows")).json()["items"]
    assert [f["id"] for f in flows] == [flow["id"]]
    assert (await tenant.client.get(f"/v1/tasks/{task['id']}")).json()["next_run_at_ms"] == task["next_run_at_ms"]


async def test_delete_answers_204_then_the_task_is_gone(tenant: Tenant) -> None:
    task = await create(tenant)
    deleted = await tenant.client.delete(f"/v1/tasks/{task['id']}")
    assert deleted.status_code == 204 and deleted.content == b""
    assert_error(await tenant.client.get(f"/v1/tasks/{task['id']}"), 404, "not_found")
    assert_error(await tenant.client.delete(f"/v1/tasks/{task['id']}"), 404, "not_found")


async def test_flows_of_a_task_are_newest_first_and_page_with_before_ms(tenant: Tenant, receiver: Receiver) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body(receiver))).json()
    ids = []
    for _ in range(3):
        ids.append((await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()["scheduled_at_ms"])
        await asyncio.sleep(0.005)
    flows = (await tenant.client.get(f"/v1/tasks/{task['id']}/flows")).json()["items"]
    assert [f["scheduled_at_ms"] for f in flows] == sorted(ids, reverse=True)
    older = (await tenant.client.get(f"/v1/tasks/{task['id']}/flows", params={"before_ms": ids[2], "limit": 1})).json()[
        "items"
    ]
    assert [f["scheduled_at_ms"] for f in older] == [ids[1]]


async def test_list_walks_every_shard_exactly_once_across_pages(tenant: Tenant) -> None:
    created = {(await create(tenant, name=f"page-{i}"))["id"] for i in range(37)}
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 5}
        if cursor:
            params["cursor"] = cursor
        page = (await tenant.client.get("/v1/tasks", params=params)).json()
        assert len(page["items"]) <= 5
        seen += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        pages += 1
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 37
    assert set(seen) == created
    assert pages >= 8


async def test_list_filters_by_status_kind_and_name_prefix(tenant: Tenant) -> None:
    a = await create(tenant, name="invoice-1")
    b = await create(tenant, name="invoice-2", schedule={"kind": "cron", "expr": "0 9 * * *"})
    c = await create(tenant, name="refund-1", schedule={"kind": "interval", "every_ms": 60_000})
    await tenant.client.post(f"/v1/tasks/{b['id']}/pause")

    async def names(**params: Any) -> set[str]:
        return {t["name"] for t in (await tenant.client.get("/v1/tasks", params=params)).json()["items"]}

    assert await names(name_prefix="invoice-") == {"invoice-1", "invoice-2"}
    assert await names(status="paused") == {"invoice-2"}
    assert await names(kind="interval") == {"refund-1"}
    assert await names(kind="delay", name_prefix="inv") == {"invoice-1"}
    assert a and c
    assert_error(await tenant.client.get("/v1/tasks", params={"status": "sleeping"}), 422, field="status")
    assert_error(await tenant.client.get("/v1/tasks", params={"limit": 0}), 422, field="limit")
    assert_error(await tenant.client.get("/v1/tasks", params={"cursor": "!!"}), 422, "bad_cursor", "cursor")


async def test_batch_create_answers_one_result_per_item(tenant: Tenant) -> None:
    items = [task_body(name=f"b{i}", key=f"batch-{i % 3}") for i in range(6)]
    items.insert(2, {"name": "no schedule", "callback": {"url": "http://127.0.0.1:9/"}})
    items.append(task_body(callback={"url": "ftp://example.com/"}))
    response = await tenant.client.post("/v1/tasks/batch", json={"tasks": items})
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["created"], result["existing"], result["failed"]) == (3, 3, 2)
    statuses = [item["status"] for item in result["items"]]
    assert statuses == [201, 201, 422, 201, 200, 200, 200, 422]
    assert result["items"][2]["error"]["field"] == "tasks[2].schedule"
    assert result["items"][7]["error"]["field"] == "tasks[7].callback.url"
    by_key: dict[str, set[str]] = {}
    for item in result["items"]:
        if item.get("task"):
            by_key.setdefault(item["task"]["key"], set()).add(item["task"]["id"])
    assert all(len(ids) == 1 for ids in by_key.values()) and len(by_key) == 3


async def test_batch_create_of_1000_is_accepted_and_1001_refused(tenant: Tenant) -> None:
    items = [task_body(name=f"bulk{i}") for i in range(1000)]
    response = await tenant.client.post("/v1/tasks/batch", json={"tasks": items})
    assert response.status_code == 200 and response.json()["created"] == 1000
    assert len({i["task"]["id"] for i in response.json()["items"]}) == 1000
    too_many = await tenant.client.post("/v1/tasks/batch", json={"tasks": [*items, items[0]]})
    assert_error(too_many, 422, "batch_size", "tasks")
    assert_error(await tenant.client.post("/v1/tasks/batch", json={"tasks": []}), 422, "batch_size", "tasks")
    assert_error(await tenant.client.post("/v1/tasks/batch", json={"items": []}), 422, "unknown_field", "items")


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"schedule": {"kind": "delay", "delay_ms": 1}, "callback": {"url": "http://127.0.0.1:9/"}}, "name", "missing"),
        ({**task_body(), "extra": 1}, "extra", "unknown_field"),
        (task_body(name=""), "name", None),
        (task_body(key=""), "key", None),
        (task_body(schedule={"kind": "weekly"}), "schedule.kind", "unknown_kind"),
        (task_body(callback={"url": "http://127.0.0.1:9/", "method": "BREW"}), "callback.method", None),
        (task_body(misfire_policy="maybe"), "misfire_policy", None),
        (task_body(callback="http://x"), "callback", None),
    ],
)
@refused_before_storage
async def test_create_rejects_bad_fields_by_name(
    tenant: Tenant, body: dict[str, Any], field: str, code: str | None
) -> None:
    assert_error(await tenant.client.post("/v1/tasks", json=body), 422, code, field)


async def test_malformed_json_and_non_object_bodies_are_422_not_500(tenant: Tenant) -> None:
    bad = await tenant.client.post("/v1/tasks", content=b"{not json", headers={"content-type": "application/json"})
    assert_error(bad, 422, "bad_json", "body")
    assert_error(await tenant.client.post("/v1/tasks", json=[1, 2]), 422, field="body")
    assert_error(await tenant.client.post("/v1/tasks", json=None), 422, field="body")


async def test_missing_or_unknown_keys_are_401(api_node: RunningNode, tenant: Tenant) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=api_node.base_url) as anonymous:
        assert_error(await anonymous.get("/v1/tasks"), 401, "unauthorized")
        assert_error(await anonymous.get("/v1/tasks", headers={"authorization": "Bearer tjk_nope"}), 401)
        assert_error(await anonymous.post("/v1/tasks", json=task_body(), headers={"authorization": "Basic abc"}), 401)


async def test_operations_endpoints_answer(api_node: RunningNode) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        assert (await client.get("/healthz")).json()["status"] == "ok"
        ready = await client.get("/readyz")
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        cluster = await client.get("/v1/cluster", headers={"authorization": f"Bearer {ADMIN_KEY}"})
        assert cluster.status_code == 200 and len(cluster.json()["jobs"]) == 16
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200 and "tjobs_registrations_total" in metrics.text
        spec = (await client.get("/openapi.json")).json()
        assert "TaskCreate" in spec["components"]["schemas"]
        assert "HTTPValidationError" not in str(spec["paths"])
