"""Backfill over HTTP on every store (issue 30 item 5): ``POST /v1/tasks/{id}/backfill`` queues an operator
job that sends one manual flow per instant of the past range, leaves the instants that have a flow alone
when asked again, shows its progress (on the console too) and its end on record, can be cancelled, and
refuses every bad field with a 4xx naming it; ``tjobs task backfill --wait`` follows one to its end."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_client_and_cli import cli_run
from tests.api.test_console_operator_views import session_of
from tests.api.test_flow_search_and_redrive_jobs import wait_job
from tests.receiver import Receiver
from tjobs.model import parse_flow_id

pytestmark = pytest.mark.asyncio(loop_scope="session")

MINUTE_MS = 60_000


async def minutely_task(api_node: RunningNode, tenant: Tenant, url: str, minutes_ago: int = 10, **extra: Any) -> str:
    """A task firing every minute since ``minutes_ago`` minutes ago (a whole minute); its id."""
    start_ms = (api_node.node.clock.now_ms() // MINUTE_MS - minutes_ago) * MINUTE_MS
    schedule = {"kind": "interval", "every_ms": MINUTE_MS, "start_at_ms": start_ms}
    body = task_body(name="backfilled", schedule=schedule, callback={"url": url}, **extra)
    reply = await tenant.client.post("/v1/tasks", json=body)
    assert reply.status_code == 201, reply.text
    task_id: str = reply.json()["id"]
    return task_id


async def backfilled(receiver: Receiver, path: str, before_ms: int, count: int) -> list[str]:
    """The flow ids ``path`` received of instants before ``before_ms`` (not the task's live fires), once
    there are ``count`` of them, sorted."""
    deadline = time.monotonic() + 10

    def received() -> list[str]:
        return sorted(r.flow_id for r in receiver.for_path(path) if parse_flow_id(r.flow_id)[1] < before_ms)

    while len(received()) < count:
        assert time.monotonic() < deadline, received()
        await asyncio.sleep(0.05)
    return received()


async def test_a_backfill_sends_each_instant_of_the_range_once_and_is_on_record(
    api_node: RunningNode, tenant: Tenant, admin: Any, tenant_factory: Any, receiver: Receiver
) -> None:
    client = tenant.client
    path = f"/backfill-{uuid.uuid4().hex}"
    task_id = await minutely_task(api_node, tenant, receiver.url(path))
    task = (await client.get(f"/v1/tasks/{task_id}")).json()
    start_ms = task["schedule"]["start_at_ms"]
    instants = [start_ms + minute * MINUTE_MS for minute in range(7)]

    # When its first five minutes are backfilled
    body = {"from": start_ms, "to": start_ms + 5 * MINUTE_MS, "pace_per_s": 100}
    reply = await client.post(f"/v1/tasks/{task_id}/backfill", json=body)
    assert reply.status_code == 202, reply.text
    job = reply.json()
    assert (job["kind"], job["total"], job["params"]["task_id"]) == ("backfill", 5, task_id)
    done = await wait_job(client, job["id"])
    assert (done["state"], done["processed"], done["failed"], done["position"]) == ("done", 5, 0, instants[4])

    # Then each instant was sent once, as the flow of that instant
    ids = [f"{task_id}-{at}" for at in instants]
    assert await backfilled(receiver, path, instants[-1] + 1, 5) == ids[:5]
    flows = (await client.get(f"/v1/tasks/{task_id}/flows", params={"limit": 100})).json()["items"]
    assert sorted(f["id"] for f in flows if f["kind"] == "manual") == ids[:5]

    # and asked again over a wider range, only the instants without a flow get one
    again = (await client.post(f"/v1/tasks/{task_id}/backfill", json={**body, "to": start_ms + 7 * MINUTE_MS})).json()
    assert (await wait_job(client, again["id"]))["processed"] == 7
    assert await backfilled(receiver, path, instants[-1] + 1, 7) == ids  # each once

    # The job is on record: who started it, over what, and how it ended
    entries = (await admin.get("/v1/audit", params={"object": job["id"]})).json()["items"]
    actions = {entry["action"]: entry for entry in entries}
    assert {"operator_job.backfill", "operator_job.done"} <= set(actions)
    assert actions["operator_job.backfill"]["after"]["params"]["from_ms"] == start_ms
    assert actions["operator_job.done"]["after"]["processed"] == 5

    # The console shows it among the app's jobs, and on its page what it backfills and how far it got
    async with session_of(api_node, tenant.api_key) as console:
        page = await console.get(f"/console/operator-jobs/{job['id']}")
        assert page.status_code == 200 and "Backfill job" in page.text and f"<code>{task_id}</code>" in page.text
        assert 'id="job-position"' in page.text
        listed = await console.get("/console/dead-letters")
        assert job["id"] in listed.text and "backfill" in listed.text

    # another app sees none of it, nor can it backfill the task
    other = await tenant_factory("backfill-other")
    assert (await other.client.get(f"/v1/operator-jobs/{job['id']}")).status_code == 404
    assert (await other.client.post(f"/v1/tasks/{task_id}/backfill", json=body)).status_code == 404


async def test_a_backfill_is_cancelled_through_the_operator_jobs(api_node: RunningNode, tenant: Tenant) -> None:
    task_id = await minutely_task(api_node, tenant, "http://127.0.0.1:9/never", minutes_ago=60)
    start_ms = (await tenant.client.get(f"/v1/tasks/{task_id}")).json()["schedule"]["start_at_ms"]
    body = {"from": start_ms, "to": start_ms + 60 * MINUTE_MS, "pace_per_s": 1}
    job = (await tenant.client.post(f"/v1/tasks/{task_id}/backfill", json=body)).json()
    assert job["total"] == 60
    assert (await tenant.client.post(f"/v1/operator-jobs/{job['id']}/cancel")).json()["cancel_requested"]
    cancelled = await wait_job(tenant.client, job["id"])
    assert cancelled["state"] == "cancelled" and cancelled["processed"] < 60


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ([1], "body", 422),
        ({"to": 0}, "from", 422),
        ({"from": 0}, "to", 422),
        ({"from": "last week", "to": 0}, "from", 422),
        ({"from": 0, "to": 4102444800000}, "to", 422),  # 2100: the future
        ({"from": 60_000, "to": 60_000}, "from", 422),
        ({"from": 0, "to": 60_000, "pace_per_s": 0}, "pace_per_s", 422),
        ({"from": 0, "to": 60_000, "pace_per_s": "fast"}, "pace_per_s", 422),
        ({"from": 0, "to": 60_000, "extra": 1}, "extra", 422),
        ({"from": 0, "to": 60_000}, "from", 422),  # before the task's start: none of its instants
    ],
)
async def test_bad_input_is_a_4xx_naming_the_field(
    api_node: RunningNode, tenant: Tenant, body: Any, field: str, status: int
) -> None:
    task_id = await minutely_task(api_node, tenant, "http://127.0.0.1:9/never", minutes_ago=0)
    reply = await tenant.client.post(f"/v1/tasks/{task_id}/backfill", json=body)
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["field"] == field, reply.text
    assert (await tenant.client.post("/v1/tasks/999/backfill", json={"from": 0, "to": 1})).status_code == 404


async def test_a_range_of_more_than_100_000_instants_is_refused_naming_from(
    api_node: RunningNode, tenant: Tenant
) -> None:
    now_ms = api_node.node.clock.now_ms()
    ten_days_ago = now_ms - 10 * 86_400_000  # every 6 s: 144,000 instants
    schedule = {"kind": "interval", "every_ms": 6_000, "start_at_ms": ten_days_ago}
    task_id = (await tenant.client.post("/v1/tasks", json=task_body(name="dense", schedule=schedule))).json()["id"]
    reply = await tenant.client.post(f"/v1/tasks/{task_id}/backfill", json={"from": ten_days_ago, "to": now_ms})
    assert reply.status_code == 422 and reply.json()["error"]["field"] == "from", reply.text
    assert "100,000" in reply.json()["error"]["message"]


async def test_the_cli_backfills_a_range_and_waits_for_its_end(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    path = f"/cli-backfill-{uuid.uuid4().hex}"
    task_id = await minutely_task(api_node, tenant, receiver.url(path))
    start_ms = (await tenant.client.get(f"/v1/tasks/{task_id}")).json()["schedule"]["start_at_ms"]
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}
    to = str(start_ms + 3 * MINUTE_MS)
    job = await cli_run(
        "task", "backfill", task_id, "--from", str(start_ms), "--to", to, "--pace", "50", "--wait", "--json", env=env
    )
    assert (job["kind"], job["state"], job["processed"], job["total"]) == ("backfill", "done", 3, 3)
    assert len(await backfilled(receiver, path, start_ms + 3 * MINUTE_MS, 3)) == 3
