"""``GET /v1/flows`` and ``GET /v1/tasks`` search across shards over HTTP: filters, order, pages, errors."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from testkit import RunningNode
from tests.api.conftest import Tenant, refused_before_storage, task_body
from tests.api.test_tasks_api import assert_error
from tests.receiver import Receiver, Reply
from tjobs.cli.main import app as cli
from tjobs.client import Client

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def trigger(tenant: Tenant, task_id: str) -> dict[str, Any]:
    flow: dict[str, Any] = (await tenant.client.post(f"/v1/tasks/{task_id}/trigger")).json()
    await asyncio.sleep(0.002)  # distinct instants
    return flow


async def flows(tenant: Tenant, **params: Any) -> list[dict[str, Any]]:
    response = await tenant.client.get("/v1/flows", params=params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def wait_until(check: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_flows_filter_by_status_task_and_time_newest_first(tenant: Tenant, receiver: Receiver) -> None:
    receiver.script("/search-dead", Reply(400), then=Reply(400))
    ok = (await tenant.client.post("/v1/tasks", json=task_body(receiver))).json()
    bad = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url("/search-dead")}))).json()
    gone = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": "http://127.0.0.1:9/"}))).json()
    delivered = [await trigger(tenant, ok["id"]) for _ in range(3)]
    dead = await trigger(tenant, bad["id"])
    retrying = await trigger(tenant, gone["id"])

    async def settled() -> bool:
        return (
            len(await flows(tenant, status="delivered")) == 3
            and len(await flows(tenant, status="dead")) == 1
            and len(await flows(tenant, status="retrying")) == 1
        )

    await wait_until(settled)
    assert [f["id"] for f in await flows(tenant, status="delivered")] == [f["id"] for f in reversed(delivered)]
    assert [f["id"] for f in await flows(tenant, status="dead")] == [dead["id"]]
    assert [f["id"] for f in await flows(tenant, status="retrying")] == [retrying["id"]]
    assert [f["id"] for f in await flows(tenant, task_id=ok["id"])] == [f["id"] for f in reversed(delivered)]
    everything = await flows(tenant)
    assert [f["scheduled_at_ms"] for f in everything] == sorted(
        (f["scheduled_at_ms"] for f in everything), reverse=True
    )
    first, last = delivered[0]["scheduled_at_ms"], delivered[-1]["scheduled_at_ms"]
    window = await flows(tenant, **{"from": delivered[0]["scheduled_at"], "to": last})
    assert [f["scheduled_at_ms"] for f in window] == [delivered[1]["scheduled_at_ms"], first]


async def test_flow_pages_walk_every_flow_once(tenant: Tenant) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body())).json()
    made = {(await trigger(tenant, task["id"]))["id"] for _ in range(11)}
    seen: list[str] = []
    cursor = None
    while True:
        page = (
            await tenant.client.get("/v1/flows", params={"limit": 4} | ({"cursor": cursor} if cursor else {}))
        ).json()
        seen += [f["id"] for f in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 11 and set(seen) == made


async def test_another_apps_flows_and_tasks_are_never_found(tenant_factory: Any) -> None:
    a, b = await tenant_factory("search-a"), await tenant_factory("search-b")
    task = (await b.client.post("/v1/tasks", json=task_body(name="b-only", key="b-key"))).json()
    await trigger(b, task["id"])
    assert await flows(a) == [] and await flows(a, task_id=task["id"]) == []
    for params in ({"name_prefix": "b-"}, {"key": "b-key"}, {}):
        assert (await a.client.get("/v1/tasks", params=params)).json()["items"] == []
    assert (await a.client.get(f"/v1/tasks/{task['id']}/flows")).status_code == 404


async def test_tasks_by_key_and_by_name_prefix(tenant: Tenant) -> None:
    for name in ("inv-2", "inv-10", "inv-1", "refund-1"):
        await tenant.client.post("/v1/tasks", json=task_body(name=name, key=f"k-{name}"))
        await asyncio.sleep(0.002)  # each created in a millisecond of its own: newest-first has one answer
    by_name = (await tenant.client.get("/v1/tasks", params={"name_prefix": "inv-", "limit": 2})).json()
    rest = (
        await tenant.client.get("/v1/tasks", params={"name_prefix": "inv-", "cursor": by_name["next_cursor"]})
    ).json()
    assert [t["name"] for t in by_name["items"] + rest["items"]] == ["inv-1", "inv-10", "inv-2"]
    keyed = (await tenant.client.get("/v1/tasks", params={"key": "k-refund-1"})).json()["items"]
    assert [t["name"] for t in keyed] == ["refund-1"]
    newest = (await tenant.client.get("/v1/tasks")).json()["items"]
    assert [t["name"] for t in newest] == ["refund-1", "inv-1", "inv-10", "inv-2"]
    wrong = {"cursor": by_name["next_cursor"]}  # a by-name cursor is not a newest-first one
    assert_error(await tenant.client.get("/v1/tasks", params=wrong), 422, "bad_cursor", "cursor")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "lost"}, "status"),
        ({"task_id": "abc"}, "task_id"),
        ({"task_id": "0"}, "task_id"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2030-01-01T00:00:00"}, "to"),
        ({"from": "2030-01-02T00:00:00Z", "to": "2030-01-01T00:00:00Z"}, "to"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"cursor": "garbage"}, "cursor"),
    ],
)
@refused_before_storage
async def test_bad_flow_search_input_is_422_naming_the_field(
    tenant: Tenant, params: dict[str, Any], field: str
) -> None:
    assert_error(await tenant.client.get("/v1/flows", params=params), 422, field=field)


async def test_the_sdk_and_the_cli_search_flows_at_80_columns(api_node: RunningNode, tenant: Tenant) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body(name="cli-search"))).json()
    made = [await trigger(tenant, task["id"]) for _ in range(3)]
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "80"}

    def drive() -> tuple[list[str], str, str]:
        with Client(api_node.base_url, tenant.api_key) as sdk:
            found = [f.id for f in sdk.iter_flows(task_id=task["id"], page_size=2)]
        table = CliRunner().invoke(cli, ["flows", "search", "--task", task["id"]], env=env)
        tasks = CliRunner().invoke(cli, ["task", "search", "--prefix", "cli-"], env=env)
        assert table.exit_code == 0 and tasks.exit_code == 0, table.output + tasks.output
        return found, table.stdout, tasks.stdout

    found, table, tasks = await asyncio.to_thread(drive)
    assert found == [f["id"] for f in reversed(made)]
    assert all(f["id"] in table for f in made) and "cli-search" in tasks
    assert max(len(line) for line in (table + tasks).splitlines()) <= 80
