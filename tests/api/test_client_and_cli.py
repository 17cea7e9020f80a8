"""The SDK and the CLI against a real node: every call round-trips, and import is resumable and idempotent.

The CLI (a sync httpx client) runs in a worker thread so the node keeps serving in the test's loop.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from testkit import RunningNode
from tests.api.conftest import ADMIN_KEY, Tenant, task_body
from tests.api.test_tenancy import wait_status
from tests.receiver import Receiver, Reply
from tjobs.cli.main import app as cli
from tjobs.client import AsyncClient, BadRequest, Client, VersionConflict, cron, delay, task_request

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_the_async_sdk_round_trips_every_task_and_flow_call(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    async with AsyncClient(api_node.base_url, tenant.api_key) as sdk:
        task = await sdk.create_task("sdk", delay(hours=1), receiver.url("/sdk"), key="sdk-1", payload={"a": 1})
        assert (await sdk.create_task("sdk", delay(hours=1), receiver.url("/sdk"), key="sdk-1")).id == task.id
        assert (await sdk.get_task(task.id)).payload == {"a": 1}
        updated = await sdk.update_task(task.id, version=task.version, schedule=cron("0 9 * * *"))
        assert updated.schedule["expr"] == "0 9 * * *"
        with pytest.raises(VersionConflict):
            await sdk.update_task(task.id, version=task.version, name="late")
        assert (await sdk.pause_task(task.id)).status == "paused"
        assert (await sdk.resume_task(task.id)).status == "active"
        receiver.script("/sdk", Reply(400))
        flow = await sdk.trigger_task(task.id)
        for _ in range(200):
            if (await sdk.get_flow(flow.id)).status == "dead":
                break
            await asyncio.sleep(0.05)
        assert [f.id async for f in sdk.iter_dead_letters()] == [flow.id]
        assert (await sdk.redrive(flow.id)).redriven == 1
        assert [f.id for f in await sdk.list_flows(task.id)] == [flow.id]
        assert [t.id async for t in sdk.iter_tasks(page_size=1)] == [task.id]
        assert (await sdk.stats()).active_tasks == 1
        assert (await sdk.app()).id == tenant.app.id
        await sdk.delete_task(task.id)


async def test_the_sync_sdk_batch_creates_and_manages_apps(api_node: RunningNode, tenant: Tenant) -> None:
    def run() -> tuple[int, str, int]:
        with Client(api_node.base_url, tenant.api_key) as sdk:
            bodies = [task_request(f"b{i}", delay(minutes=5), "http://127.0.0.1:9/", key=f"b{i}") for i in range(20)]
            result = sdk.create_tasks(bodies)
        with Client(api_node.base_url, ADMIN_KEY) as admin:
            made = admin.create_app("sdk-admin", max_concurrency=3)
            rotated = admin.rotate_app(made.id, grace_s=60)
            assert rotated.api_key and rotated.api_key != made.api_key
            return result.created, admin.get_app(made.id).name, len(rotated.secrets or [])

    assert await asyncio.to_thread(run) == (20, "sdk-admin", 2)


async def test_the_sdk_triggers_with_a_payload_override_only_when_one_is_given(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    path = f"/sdk-trigger-{secrets.token_hex(4)}"  # the receiver serves every storage of the module
    async with AsyncClient(api_node.base_url, tenant.api_key) as sdk:
        task = await sdk.create_task("sdk-trigger", delay(hours=1), receiver.url(path), payload={"own": 1})
        overridden = await sdk.trigger_task(task.id, payload={"override": [1, 2]})
        nulled = await sdk.trigger_task(task.id, payload=None)  # null is a payload like any other
        plain = await sdk.trigger_task(task.id)

    def sync_trigger() -> str:
        with Client(api_node.base_url, tenant.api_key) as sdk:
            return sdk.trigger_task(task.id, payload="from the sync client").id

    synced = await asyncio.to_thread(sync_trigger)

    assert overridden.kind == "manual" and overridden.payload == {"override": [1, 2]}
    assert nulled.payload is None and "payload" in nulled.model_fields_set
    assert plain.payload is None and "payload" not in plain.model_fields_set
    await receiver.wait_for(4, path=path)
    sent = {
        flow_id: json.loads(receiver.for_flow(flow_id)[0].body)["payload"]
        for flow_id in (overridden.id, nulled.id, plain.id, synced)
    }
    assert sent == {
        overridden.id: {"override": [1, 2]},
        nulled.id: None,
        plain.id: {"own": 1},
        synced: "from the sync client",
    }


async def test_the_sdk_trigger_refused_for_a_callback_without_payload_names_the_field(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    async with AsyncClient(api_node.base_url, tenant.api_key) as sdk:
        task = await sdk.create_task(
            "sdk-get", delay(hours=1), callback={"url": receiver.url("/sdk-get"), "method": "GET"}
        )
        with pytest.raises(BadRequest) as refused:
            await sdk.trigger_task(task.id, payload={"n": 1})
        assert refused.value.status == 422 and refused.value.field == "payload"
        assert await sdk.list_flows(task.id) == []


async def cli_run(*args: str, env: dict[str, str]) -> Any:
    result = await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in args else result.stdout


async def test_the_cli_drives_tasks_apps_and_dead_letters(api_node: RunningNode, tenant: Tenant) -> None:
    env = {
        "TJOBS_URL": api_node.base_url,
        "TJOBS_API_KEY": tenant.api_key,
        "TJOBS_ADMIN_KEY": ADMIN_KEY,
        "COLUMNS": "200",
    }
    task = await cli_run(
        "task",
        "create",
        "cli-task",
        "--callback",
        "http://127.0.0.1:9/hook",
        "--every",
        "30s",
        "--payload",
        '{"x": 1}',
        "-H",
        "x-trace: 1",
        "--json",
        env=env,
    )
    assert task["schedule"]["every_ms"] == 30_000 and task["callback"]["headers"] == {"x-trace": "1"}
    assert (await cli_run("task", "get", task["id"], "--json", env=env))["id"] == task["id"]
    assert [t["id"] for t in await cli_run("task", "list", "--prefix", "cli-", "--json", env=env)] == [task["id"]]
    assert (await cli_run("task", "pause", task["id"], "--json", env=env))["status"] == "paused"
    assert (await cli_run("task", "resume", task["id"], "--json", env=env))["status"] == "active"
    updated = await cli_run("task", "update", task["id"], "--name", "cli-renamed", "--version", "3", "--json", env=env)
    assert updated["name"] == "cli-renamed"
    flow = await cli_run("task", "trigger", task["id"], "--json", env=env)
    assert [f["id"] for f in await cli_run("task", "flows", task["id"], "--json", env=env)] == [flow["id"]]
    assert "cli-renamed" in await cli_run("task", "list", env=env)  # the rich table
    assert await cli_run("dlq", "list", "--json", env=env) == []
    await cli_run("task", "delete", task["id"], env=env)

    made = await cli_run(
        "app", "create", "cli-app", "--concurrency", "4", "--allow-host", "10.0.0.0/8", "--json", env=env
    )
    assert made["api_key"] and made["settings"]["allowed_callback_hosts"] == ["10.0.0.0/8"]
    rotated = await cli_run("app", "rotate", made["id"], "--no-key", "--json", env=env)
    assert rotated["api_key"] is None and len(rotated["secrets"]) == 2
    assert (await cli_run("app", "show", made["id"], "--json", env=env))["max_concurrency"] == 4
    assert (await cli_run("app", "show", "--json", env=env))["id"] == tenant.app.id

    failed = await asyncio.to_thread(CliRunner().invoke, cli, ["task", "get", "999"], env=env)
    assert failed.exit_code == 1 and "not_found" in failed.output


async def _task_via_api(tenant: Tenant, callback: dict[str, Any], payload: Any = None) -> dict[str, Any]:
    body = {"name": "cli-trigger", "schedule": {"kind": "delay", "delay_ms": 3_600_000}, "callback": callback}
    created = await tenant.client.post("/v1/tasks", json={**body, "payload": payload})
    assert created.status_code == 201, created.text
    made: dict[str, Any] = created.json()
    return made


async def cli_fails(*args: str, env: dict[str, str], stdin: str | None = None) -> str:
    """The output of a CLI call that must fail cleanly: a non-zero exit, and no traceback."""
    result = await asyncio.to_thread(CliRunner().invoke, cli, list(args), input=stdin, env=env)
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output, result.output
    return result.output


async def test_cli_task_trigger_sends_a_payload_from_the_flag_a_file_or_stdin(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver, tmp_path: Path
) -> None:
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}
    path = f"/cli-trigger-{secrets.token_hex(4)}"  # the receiver serves every storage of the module
    task = await _task_via_api(tenant, {"url": receiver.url(path)}, payload={"own": 1})
    payload_file = tmp_path / "payload.json"
    payload_file.write_text('{"from": "file"}')

    from_flag = await cli_run("task", "trigger", task["id"], "--payload", '{"from": "flag"}', "--json", env=env)
    from_file = await cli_run("task", "trigger", task["id"], "--payload-file", str(payload_file), "--json", env=env)
    result = await asyncio.to_thread(
        CliRunner().invoke,
        cli,
        ["task", "trigger", task["id"], "--payload-file", "-", "--json"],
        input="[1, 2]",
        env=env,
    )
    assert result.exit_code == 0, result.output
    from_stdin = json.loads(result.stdout)
    null = await cli_run("task", "trigger", task["id"], "--payload", "null", "--json", env=env)
    plain = await cli_run("task", "trigger", task["id"], "--json", env=env)

    assert from_flag["payload"] == {"from": "flag"} and from_file["payload"] == {"from": "file"}
    assert from_stdin["payload"] == [1, 2] and null["payload"] is None and plain["payload"] is None
    await receiver.wait_for(5, path=path)
    sent = [
        json.loads(receiver.for_flow(f["id"])[0].body)["payload"]
        for f in (from_flag, from_file, from_stdin, null, plain)
    ]
    assert sent == [{"from": "flag"}, {"from": "file"}, [1, 2], None, {"own": 1}]


async def test_cli_task_trigger_names_the_flag_or_field_of_a_bad_payload(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver, tmp_path: Path
) -> None:
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}
    task = await _task_via_api(tenant, {"url": receiver.url("/cli-bad")})
    get_task = await _task_via_api(tenant, {"url": receiver.url("/cli-get"), "method": "GET"})
    not_json = tmp_path / "bad.json"
    not_json.write_text("{not json")

    assert "--payload is not JSON" in await cli_fails("task", "trigger", task["id"], "--payload", "{not json", env=env)
    assert "--payload-file is not JSON" in await cli_fails(
        "task", "trigger", task["id"], "--payload-file", str(not_json), env=env
    )
    assert "--payload-file is not JSON" in await cli_fails(
        "task", "trigger", task["id"], "--payload-file", "-", env=env, stdin=""
    )
    missing = await cli_fails("task", "trigger", task["id"], "--payload-file", str(tmp_path / "nowhere.json"), env=env)
    assert "--payload-file" in missing and "nowhere.json" in missing
    both = await cli_fails("task", "trigger", task["id"], "--payload", "1", "--payload-file", str(not_json), env=env)
    assert "give --payload or --payload-file, not both" in both
    refused = await cli_fails("task", "trigger", get_task["id"], "--payload", '{"n": 1}', env=env)
    assert "422" in refused and "[payload]" in refused
    too_deep = await cli_fails("task", "trigger", task["id"], "--payload", "[" * 70 + "]" * 70, env=env)
    assert "[payload]" in too_deep
    for made in (task, get_task):
        assert (await tenant.client.get(f"/v1/tasks/{made['id']}/flows")).json()["items"] == []


async def test_import_is_resumable_and_idempotent_by_key(api_node: RunningNode, tenant: Tenant, tmp_path: Path) -> None:
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key}
    lines = [task_body(name=f"imp-{i}", key=f"imp-{i}") if i % 2 else task_body(name=f"imp-{i}") for i in range(1200)]
    lines[7] = {"name": "broken"}
    source = tmp_path / "tasks.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))

    first = await asyncio.to_thread(CliRunner().invoke, cli, ["import", str(source), "--json"], env=env)
    assert first.exit_code == 2, first.output  # one line failed; the rest went in
    summary = json.loads(first.stdout)
    assert (summary["created"], summary["failed"], summary["failures"][0]["line"]) == (1199, 1, 8)
    assert (tmp_path / "tasks.jsonl.progress").read_text() == "1200"

    resumed = await asyncio.to_thread(CliRunner().invoke, cli, ["import", str(source), "--json"], env=env)
    assert json.loads(resumed.stdout)["created"] == 0  # nothing left after the saved position
    again = await asyncio.to_thread(CliRunner().invoke, cli, ["import", str(source), "--restart", "--json"], env=env)
    assert (json.loads(again.stdout)["created"], json.loads(again.stdout)["existing"]) == (0, 1199)
    listed = (await tenant.client.get("/v1/tasks", params={"limit": 1000, "name_prefix": "imp-"})).json()
    assert listed["next_cursor"] is not None or len(listed["items"]) <= 1199


async def test_cli_task_create_reaches_every_field_through_request_file(
    api_node: RunningNode, tenant: Tenant, tmp_path: Path
) -> None:
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}
    body: dict[str, Any] = {
        "schedule": {
            "kind": "cron",
            "expr": "0 3 * * *",
            "timezone": "Europe/Paris",
            "dst_gap": "shift",
            "max_fires": 5,
        },
        "callback": {"urls": ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"], "method": "PUT"},
        "payload": {"from": "file"},
        "misfire_policy": "skip",
    }
    request = tmp_path / "task.json"
    request.write_text(json.dumps(body))
    task = await cli_run(
        "task",
        "create",
        "cli-full",
        "--request",
        str(request),
        "--delivery",
        "at_most_once",
        "--payload",
        '{"from": "flag"}',
        "--json",
        env=env,
    )
    assert task["schedule"]["dst_gap"] == "shift" and task["schedule"]["max_fires"] == 5
    assert task["callback"]["urls"] == body["callback"]["urls"] and task["delivery"] == "at_most_once"
    assert task["payload"] == {"from": "flag"} and task["misfire_policy"] == "skip"
    request.write_text("[1, 2]")
    result = await asyncio.to_thread(
        CliRunner().invoke, cli, ["task", "create", "bad", "--request", str(request)], env=env
    )
    assert result.exit_code != 0 and "--request" in result.output and "Traceback" not in result.output


async def test_task_and_flow_tables_fit_80_columns_without_cutting_a_timestamp(
    api_node: RunningNode, tenant: Tenant
) -> None:
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "80"}
    task = await cli_run(
        "task",
        "create",
        "cli-narrow-table-task",
        "--callback",
        "http://127.0.0.1:9/n",
        "--every",
        "1h",
        "--json",
        env=env,
    )
    await cli_run("task", "trigger", task["id"], "--json", env=env)
    listed = await cli_run("task", "list", "--prefix", "cli-narrow", env=env)
    flows = await cli_run("task", "flows", task["id"], env=env)
    for table in (listed, flows):
        assert "…" not in table, table
        assert max(len(line) for line in table.splitlines()) <= 80, table
    assert task["id"] in listed and re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", listed), listed
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", flows), flows


async def test_the_cli_lists_tasks_with_their_health_and_pages_a_tasks_flows_newer_and_older(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    # Given a task whose receiver took one flow and refused the next for good
    path = f"/cli-health-{secrets.token_hex(4)}"
    receiver.script(path, Reply(200), Reply(400))
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "80"}
    task = await cli_run(
        "task", "create", "cli-health", "--callback", receiver.url(path), "--every", "1h", "--json", env=env
    )
    older = await cli_run("task", "trigger", task["id"], "--json", env=env)
    await wait_status(tenant.client, older["id"], "delivered")
    newer = await cli_run("task", "trigger", task["id"], "--json", env=env)
    await wait_status(tenant.client, newer["id"], "dead")

    # When the tasks are listed with their health: the last result and the 24 h figures, in 80 columns
    (listed,) = await cli_run("task", "list", "--prefix", "cli-health", "--health", "--json", env=env)
    assert (listed["health"]["last_status"], listed["health"]["delivered"], listed["health"]["failed"]) == (
        "dead",
        1,
        1,
    )
    table = await cli_run("task", "list", "--prefix", "cli-health", "--health", env=env)
    assert max(len(line) for line in table.splitlines()) <= 80, table
    row = next(line for line in table.splitlines() if task["id"] in line)
    assert re.search(r"\bdead\b.*\b1\b.*\b1\b.*\b50%", row), table
    (searched,) = await cli_run("task", "search", "--prefix", "cli-health", "--health", "--json", env=env)
    assert searched["health"] == listed["health"]
    assert (await cli_run("task", "list", "--prefix", "cli-health", "--json", env=env))[0]["health"] is None

    # Then the task's history pages newer than an instant (epoch ms or ISO-8601) and older than one
    flows = ("task", "flows", task["id"], "--json")
    after = await cli_run(*flows, "--after", str(older["scheduled_at_ms"]), env=env)
    assert [f["id"] for f in after] == [newer["id"]]
    assert [f["id"] for f in await cli_run(*flows, "--after", older["scheduled_at"], env=env)] == [newer["id"]]
    before = await cli_run(*flows, "--before", str(newer["scheduled_at_ms"]), env=env)
    assert [f["id"] for f in before] == [older["id"]]
    refused = await asyncio.to_thread(CliRunner().invoke, cli, [*flows, "--after", "soon"], env=env)
    assert refused.exit_code == 2 and "--after" in refused.output
