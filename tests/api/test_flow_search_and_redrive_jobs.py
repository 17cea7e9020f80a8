"""Flow search by task name with time presets, a bounded count and a CSV export; dead letters newest first
with filters; and "redrive all matching" as one server-side job (count, confirm, progress, audit), over
HTTP on every store."""

from __future__ import annotations

import asyncio
import csv
import io
import time
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from testkit import RunningNode
from tests.api.conftest import Tenant, refused_before_storage, task_body
from tests.api.test_client_and_cli import cli_run
from tests.receiver import Receiver
from tjobs.cli.main import app as cli
from tjobs.model import Flow, FlowKind, FlowStatus

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def task_with_dead_flows(
    api_node: RunningNode, tenant: Tenant, name: str, url: str, count: int, status_code: int | None = 503
) -> tuple[str, list[str]]:
    """A task named ``name`` and ``count`` dead flows of it, scheduled a minute apart up to a minute ago."""
    task = (await tenant.client.post("/v1/tasks", json=task_body(name=name, callback={"url": url}))).json()
    now_ms = api_node.node.clock.now_ms()
    flow_ids = []
    for index in range(count):
        at = now_ms - (index + 1) * 60_000 - int(task["id"]) % 997
        flow = Flow(
            int(task["id"]), at, tenant.app.id, FlowKind.SCHEDULED, FlowStatus.DEAD, 3, None, at, at, 0, status_code
        )
        flow_ids.append((await api_node.node.store.insert_manual_flow(flow.task_id, flow)).id)
    return task["id"], flow_ids


async def wait_job(client: httpx.AsyncClient, job_id: str, timeout_s: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = (await client.get(f"/v1/operator-jobs/{job_id}")).json()
        if job["state"] in ("done", "cancelled", "failed"):
            return job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.05)


async def test_flows_are_found_by_task_name_within_a_window_counted_and_exported(
    api_node: RunningNode, tenant: Tenant
) -> None:
    await task_with_dead_flows(api_node, tenant, "order-close-1", "http://127.0.0.1:9/a", 3)
    await task_with_dead_flows(api_node, tenant, "=cmd|' /C calc'!A0", "http://127.0.0.1:9/b", 2, None)
    client = tenant.client

    found = (await client.get("/v1/flows", params={"task_name_prefix": "order-", "window": "1h"})).json()
    assert len(found["items"]) == 3 and found["next_cursor"] is None
    assert (await client.get("/v1/flows", params={"task_name_prefix": "order-", "window": "15m"})).json()["items"]
    count = (await client.get("/v1/flows:count", params={"window": "24h"})).json()
    assert count == {"matched": 5, "more": False, "at_most": 10_000}
    assert (await client.get("/v1/flows:count", params={"last_answer": "none"})).json()["matched"] == 2

    export = await client.get("/v1/flows:export", params={"window": "7d"})
    assert export.status_code == 200 and export.headers["content-type"].startswith("text/csv")
    assert (
        export.headers["x-tjobs-export-truncated"] == "false" and export.headers["x-tjobs-export-max-rows"] == "100000"
    )
    assert "attachment" in export.headers["content-disposition"]
    rows = list(csv.reader(io.StringIO(export.text)))
    assert rows[0][:3] == ["flow_id", "task_id", "task_name"] and len(rows) == 6
    assert {row[2] for row in rows[1:]} == {"order-close-1", "'=cmd|' /C calc'!A0"}


async def test_dead_letters_come_newest_first_filtered_by_task_target_and_last_answer(
    api_node: RunningNode, tenant: Tenant
) -> None:
    _, first = await task_with_dead_flows(api_node, tenant, "refund-poll", "http://127.0.0.1:9/r", 3, 404)
    _, second = await task_with_dead_flows(api_node, tenant, "order-close", "http://127.0.0.1:9/o", 3, 503)
    client = tenant.client

    page = (await client.get("/v1/dead-letters", params={"limit": 4})).json()
    rest = (await client.get("/v1/dead-letters", params={"limit": 4, "cursor": page["next_cursor"]})).json()
    listed = page["items"] + rest["items"]
    assert len(listed) == 6 and rest["next_cursor"] is None
    assert [f["scheduled_at_ms"] for f in listed] == sorted((f["scheduled_at_ms"] for f in listed), reverse=True)
    only_5xx = (await client.get("/v1/dead-letters", params={"last_answer": "5xx"})).json()["items"]
    assert sorted(f["id"] for f in only_5xx) == sorted(second)
    by_name = (await client.get("/v1/dead-letters", params={"task_name_prefix": "refund"})).json()["items"]
    assert sorted(f["id"] for f in by_name) == sorted(first)
    assert (await client.get("/v1/dead-letters", params={"target": "no-such-target"})).json()["items"] == []


async def test_redrive_all_matching_is_one_server_job_confirmed_by_count_and_on_record(
    api_node: RunningNode, tenant: Tenant, tenant_factory: Any, receiver: Receiver, admin: httpx.AsyncClient
) -> None:
    url = receiver.url("/redrive-job")
    _, matching = await task_with_dead_flows(api_node, tenant, "job-order", url, 12)
    await task_with_dead_flows(api_node, tenant, "job-other", url, 2)
    client = tenant.client

    # Given the operator asked for the count of what matches
    count = (await client.get("/v1/dead-letters:count", params={"task_name_prefix": "job-order"})).json()
    assert (count["matched"], count["more"]) == (12, False)
    body = {"filters": {"task_name_prefix": "job-order"}, "dead_before": count["dead_before_ms"]}

    # a count that is no longer true is refused, naming it
    refused = await client.post("/v1/dead-letters/redrive-jobs", json={**body, "confirm_count": 11})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "confirm_count"
    assert refused.json()["error"]["code"] == "count_changed"

    # When they confirm it, one job is queued and run by the server
    started = await client.post("/v1/dead-letters/redrive-jobs", json={**body, "confirm_count": 12})
    assert started.status_code == 202, started.text
    job = started.json()
    assert (job["kind"], job["total"], job["state"]) == ("redrive", 12, "queued")
    done = await wait_job(client, job["id"])
    assert (done["state"], done["processed"], done["failed"]) == ("done", 12, 0)

    # Then exactly the matching dead letters were redriven, and the others are still dead
    still_dead = {f["id"] for f in (await client.get("/v1/dead-letters")).json()["items"]}
    assert still_dead.isdisjoint(matching) and len(still_dead) >= 2
    listed = (await client.get("/v1/operator-jobs")).json()["items"]
    assert listed[0]["id"] == job["id"]
    assert (await client.post(f"/v1/operator-jobs/{job['id']}/cancel")).json()["state"] == "done"

    # and the job is on record: who started it, with what, and how it ended
    entries = (await admin.get("/v1/audit", params={"object": job["id"]})).json()["items"]
    actions = {entry["action"]: entry for entry in entries}
    assert {"operator_job.redrive", "operator_job.done", "operator_job.cancel"} <= set(actions)
    assert actions["operator_job.redrive"]["after"]["params"]["filters"]["task_name_prefix"] == "job-order"
    assert actions["operator_job.done"]["after"]["processed"] == 12

    # another app sees none of it
    other = await tenant_factory("redrive-job-other")
    assert (await other.client.get(f"/v1/operator-jobs/{job['id']}")).status_code == 404
    assert (await other.client.post(f"/v1/operator-jobs/{job['id']}/cancel")).status_code == 404


BAD_INPUT: list[tuple[str, str, dict[str, str] | None, Any, str]] = [
    ("GET", "/v1/flows", {"window": "2h"}, None, "window"),
    ("GET", "/v1/flows", {"window": "1h", "from": "1800000000000"}, None, "window"),
    ("GET", "/v1/flows:count", {"last_answer": "6xx"}, None, "last_answer"),
    ("GET", "/v1/flows:export", {"target": "not a name"}, None, "target"),
    ("GET", "/v1/dead-letters", {"task_id": "x1"}, None, "task_id"),
    ("GET", "/v1/dead-letters", {"from": ""}, None, "from"),
    ("GET", "/v1/dead-letters:count", {"dead_before": "soon"}, None, "dead_before"),
    ("POST", "/v1/dead-letters/redrive-jobs", None, {"confirm_count": 0}, "confirm_count"),
    ("POST", "/v1/dead-letters/redrive-jobs", None, {"confirm_count": 1, "extra": 1}, "extra"),
    (
        "POST",
        "/v1/dead-letters/redrive-jobs",
        None,
        {"filters": {"status": "pending"}, "confirm_count": 1},
        "filters.status",
    ),
    (
        "POST",
        "/v1/dead-letters/redrive-jobs",
        None,
        {"filters": {"window": 5}, "confirm_count": 1},
        "filters.window",
    ),
    (
        "POST",
        "/v1/dead-letters/redrive-jobs",
        None,
        {"filters": {"last_answer": "x"}, "confirm_count": 1},
        "filters.last_answer",
    ),
    (
        "POST",
        "/v1/dead-letters/redrive-jobs",
        None,
        {"dead_before": 4102444800000, "confirm_count": 1},
        "dead_before",
    ),
    ("POST", "/v1/dead-letters/redrive-jobs", None, {"confirm_count": 1}, "confirm_count"),
    (
        "POST",
        "/v1/dead-letters/redrive-jobs",
        None,
        {"filters": {"target": " "}, "confirm_count": 1},
        "filters.target",
    ),
    ("GET", "/v1/operator-jobs", {"limit": "0"}, None, "limit"),
]
ARGUMENTS = ("method", "path", "params", "body", "field")
# a well-formed redrive job whose confirm_count is not the store's count of its dead letters: on every store
CHECKED_AGAINST_THE_STORE = [case for case in BAD_INPUT if case[3] == {"confirm_count": 1}]


@pytest.mark.parametrize(ARGUMENTS, [case for case in BAD_INPUT if case not in CHECKED_AGAINST_THE_STORE])
@refused_before_storage
async def test_bad_input_is_a_4xx_naming_the_field(
    tenant: Tenant, method: str, path: str, params: dict[str, str] | None, body: Any, field: str
) -> None:
    await _refused_naming(tenant, method, path, params, body, field)


@pytest.mark.parametrize(ARGUMENTS, CHECKED_AGAINST_THE_STORE)
async def test_bad_input_judged_against_the_store_is_a_4xx_naming_the_field(
    tenant: Tenant, method: str, path: str, params: dict[str, str] | None, body: Any, field: str
) -> None:
    await _refused_naming(tenant, method, path, params, body, field)


async def _refused_naming(
    tenant: Tenant, method: str, path: str, params: dict[str, str] | None, body: Any, field: str
) -> None:
    reply = await tenant.client.request(method, path, params=params, json=body)
    assert 400 <= reply.status_code < 500, reply.text
    assert reply.json()["error"]["field"] == field, reply.text
    assert (await tenant.client.get("/v1/operator-jobs/job_0123456789abcdef")).status_code == 404
    assert (await tenant.client.get("/v1/operator-jobs/nope")).status_code == 404


async def test_the_cli_redrives_all_matching_as_one_job_and_waits_for_its_end(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    url = receiver.url("/cli-redrive-job")
    _, matching = await task_with_dead_flows(api_node, tenant, "cli-job-order", url, 5)
    await task_with_dead_flows(api_node, tenant, "cli-job-other", url, 2, 404)
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}

    listed = await cli_run("dlq", "list", "--last-answer", "5xx", "--json", env=env)
    assert sorted(flow["id"] for flow in listed) == sorted(matching)
    job = await cli_run(
        "dlq", "redrive", "--all-matching", "--last-answer", "5xx", "--yes", "--wait", "--json", env=env
    )
    assert (job["state"], job["processed"], job["total"]) == ("done", 5, 5)
    assert [j["id"] for j in await cli_run("dlq", "jobs", "--json", env=env)] == [job["id"]]
    assert (await cli_run("dlq", "job", job["id"], "--json", env=env))["state"] == "done"

    refused = await asyncio.to_thread(
        CliRunner().invoke, cli, ["dlq", "redrive", "--all-matching", "--target", "x y"], env=env
    )
    assert refused.exit_code == 1 and "target" in refused.output
