"""The audit log over the API: who changed what (before -> after), through which client; an app reads
only its own entries; bad filters answer 422 naming the field; an entry that cannot be written answers
503 naming the audit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_job_runs_api import _running_flow
from tests.receiver import Receiver
from tjobs.cli.main import app as cli
from tjobs.errors import StorageUnavailable

pytestmark = pytest.mark.asyncio(loop_scope="session")
OWN_API_NODE = True  # a test reads the whole audit log (conftest.py)


async def _entries(client: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    response = await client.get("/v1/audit", params=params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_task_changes_record_who_what_and_before_after(tenant: Tenant) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body())).json()
    await tenant.client.post(f"/v1/tasks/{task['id']}/pause")
    cli = {"x-tjobs-client": "cli"}
    await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"name": "renamed", "version": 2}, headers=cli)
    assert (await tenant.client.delete(f"/v1/tasks/{task['id']}")).status_code == 204

    entries = await _entries(tenant.client, object=task["id"])
    assert [e["action"] for e in entries] == ["task.delete", "task.update", "task.pause"]  # newest first
    delete, update, pause = entries
    assert pause["actor"] == {"kind": "app_key", "name": tenant.app.id} and pause["app_id"] == tenant.app.id
    assert (pause["before"]["status"], pause["after"]["status"]) == ("active", "paused")
    assert (update["before"]["name"], update["after"]["name"]) == ("t", "renamed")
    assert (delete["before"]["name"], delete["after"]) == ("renamed", None)
    assert [e["via"] for e in entries] == ["api", "cli", "api"]
    assert pause["source"] == "127.0.0.1" and pause["request_id"]


async def test_creates_are_not_recorded(tenant: Tenant) -> None:
    await tenant.client.post("/v1/tasks", json=task_body())
    assert await _entries(tenant.client) == []


async def test_a_runs_reports_and_log_lines_are_not_recorded_its_cancel_is(tenant: Tenant, receiver: Receiver) -> None:
    """An executor's reports and log lines are the data plane (the flow keeps its run and log), as task
    creates and heartbeats are; an owner's cancel is a change."""
    flow = await _running_flow(tenant, receiver, "/audit-run")
    fid = flow["id"]
    progress = await tenant.client.post(f"/v1/flows/{fid}/report", json={"status": "running", "progress": 5})
    logged = await tenant.client.post(f"/v1/flows/{fid}/log", json={"lines": ["a line"]})
    cancelled = await tenant.client.post(f"/v1/flows/{fid}/cancel")
    ended = await tenant.client.post(f"/v1/flows/{fid}/report", json={"status": "failed"})
    assert [r.status_code for r in (progress, logged, cancelled, ended)] == [200, 200, 200, 200]

    recorded = [entry["object_id"] for entry in await _entries(tenant.client)]
    assert f"{fid}/cancel" in recorded
    assert not [object_id for object_id in recorded if object_id.endswith(("/report", "/log"))], recorded


async def test_an_admin_key_rotation_is_recorded_without_the_key(tenant: Tenant, admin: httpx.AsyncClient) -> None:
    rotated = await admin.post(f"/v1/apps/{tenant.app.id}/rotate")
    assert rotated.status_code == 200, rotated.text
    [entry] = await _entries(admin, app=tenant.app.id, action="app.")
    assert entry["action"] == "app.rotate_key" and entry["actor"] == {"kind": "admin_key", "name": "admin"}
    assert entry["object_id"] == tenant.app.id
    assert rotated.json()["api_key"] not in str(entry)
    assert "secrets" not in str(entry["after"]) or "[redacted]" in str(entry["after"])


async def test_an_app_reads_only_its_own_entries(tenant_factory: Any, admin: httpx.AsyncClient) -> None:
    mine: Tenant = await tenant_factory("mine")
    other: Tenant = await tenant_factory("other")
    for each in (mine, other):
        task = (await each.client.post("/v1/tasks", json=task_body())).json()
        await each.client.post(f"/v1/tasks/{task['id']}/pause")
    assert {e["app_id"] for e in await _entries(mine.client)} == {mine.app.id}
    assert await _entries(mine.client, app=other.app.id) == []
    assert {e["app_id"] for e in await _entries(admin, app=other.app.id)} == {other.app.id}


async def test_pages_follow_the_cursor(tenant: Tenant) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body())).json()
    for _ in range(3):
        await tenant.client.post(f"/v1/tasks/{task['id']}/pause")
        await tenant.client.post(f"/v1/tasks/{task['id']}/resume")
    first = (await tenant.client.get("/v1/audit", params={"limit": 4})).json()
    rest = (await tenant.client.get("/v1/audit", params={"limit": 4, "cursor": first["next_cursor"]})).json()
    assert len(first["items"]) == 4 and len(rest["items"]) == 2 and rest["next_cursor"] is None
    ids = [int(e["id"]) for e in first["items"] + rest["items"]]
    assert ids == sorted(ids, reverse=True)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"action": "Task.*"}, "action"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-12-01T00:00:00"}, "until"),
        ({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "until"),
        ({"cursor": "abc"}, "cursor"),
        ({"limit": "0"}, "limit"),
        ({"app": "no/such"}, "app"),
        ({"actor": "x" * 129}, "actor"),
    ],
)
async def test_bad_filters_answer_422_naming_the_field(tenant: Tenant, params: dict[str, str], field: str) -> None:
    response = await tenant.client.get("/v1/audit", params=params)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


async def test_without_a_key_the_audit_is_refused(api_node: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=api_node.base_url) as anonymous:
        assert (await anonymous.get("/v1/audit")).status_code == 401


async def test_an_entry_that_cannot_be_written_answers_503_naming_the_audit(
    tenant: Tenant, api_node: RunningNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body())).json()

    async def refuse(entry: Any) -> int:
        raise StorageUnavailable("the apps database is away")

    monkeypatch.setattr(api_node.node.audit._log, "append_audit", refuse)
    response = await tenant.client.post(f"/v1/tasks/{task['id']}/pause")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "audit_unavailable"
    assert response.json()["error"]["field"] == "audit"


async def test_the_cli_changes_are_recorded_as_via_cli_and_listed_by_tjobs_audit(
    api_node: RunningNode, tenant: Tenant
) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body())).json()
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}
    paused = await asyncio.to_thread(CliRunner().invoke, cli, ["task", "pause", task["id"]], env=env)
    assert paused.exit_code == 0, paused.output
    listed = await asyncio.to_thread(CliRunner().invoke, cli, ["audit", "--action", "task.", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    [entry] = json.loads(listed.stdout)["items"]
    assert (entry["action"], entry["object_id"], entry["via"]) == ("task.pause", task["id"], "cli")
    table = await asyncio.to_thread(CliRunner().invoke, cli, ["audit"], env=env)
    assert "task.pause" in table.stdout and "status" in table.stdout
    refused = await asyncio.to_thread(CliRunner().invoke, cli, ["audit", "--since", "nope"], env=env)
    assert refused.exit_code != 0 and "since" in refused.output


async def test_a_target_update_is_recorded_before_and_after_without_its_credentials(tenant: Tenant) -> None:
    password = "audit-target-password-0123"
    target: dict[str, Any] = {
        "name": "audited-hook",
        "protocol": "http",
        "settings": {"urls": ["http://127.0.0.1:9/a"], "method": "PUT", "timeout_ms": 900},
        "credentials": {"authorization": password},
    }
    made = await tenant.client.post("/v1/targets", json=target)
    assert made.status_code == 201, made.text
    settings = {**target["settings"], "timeout_ms": 1200}
    assert (await tenant.client.patch("/v1/targets/audited-hook", json={"settings": settings})).status_code == 200

    update, create = await _entries(tenant.client, action="target.")
    assert (create["action"], create["object_id"], create["before"]) == ("target.create", "audited-hook", None)
    assert update["action"] == "target.update"
    assert (update["before"]["settings"]["timeout_ms"], update["after"]["settings"]["timeout_ms"]) == (900, 1200)
    assert password not in str(await _entries(tenant.client))


async def test_a_refused_change_leaves_no_entry_and_a_target_delete_keeps_its_before(tenant: Tenant) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body())).json()
    refused = await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"name": 5})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "name", refused.text
    stale = await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"name": "x", "version": 99})
    assert stale.status_code == 409, stale.text
    assert await _entries(tenant.client, object=task["id"]) == []

    target = {"name": "gone-hook", "protocol": "http", "settings": {"urls": ["http://127.0.0.1:9/a"]}}
    assert (await tenant.client.post("/v1/targets", json=target)).status_code == 201
    assert (await tenant.client.delete("/v1/targets/gone-hook")).status_code == 204
    [delete] = await _entries(tenant.client, action="target.delete")
    assert (delete["before"]["name"], delete["before"]["settings"]["urls"], delete["after"]) == (
        "gone-hook",
        ["http://127.0.0.1:9/a"],
        None,
    )


async def test_the_cli_users_tokens_and_alerts_commands_are_recorded_as_via_cli(
    api_node: RunningNode, tenant: Tenant, admin: httpx.AsyncClient
) -> None:
    # Given changes made through every CLI group that speaks to the API: users, tokens and alerts
    password = "correct horse battery"
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_ADMIN_KEY": "tja_test_admin_key", "COLUMNS": "200"}
    app_env = {**env, "TJOBS_API_KEY": tenant.api_key}

    def run(*args: str, stdin: str | None = None, with_env: dict[str, str] = env) -> str:
        result = CliRunner().invoke(cli, list(args), input=stdin, env=with_env)
        assert result.exit_code == 0, result.output
        return result.stdout

    user = f"via-cli-{tenant.app.id[-6:]}"
    await asyncio.to_thread(
        run, "users", "create", user, "--role", f"{tenant.app.id}=operator", stdin=f"{password}\n" * 2
    )
    await asyncio.to_thread(run, "users", "disable", user)
    await asyncio.to_thread(run, "users", "enable", user)
    made = await asyncio.to_thread(run, "tokens", "create", "--user", user, "--name", "ci", "--json", stdin=password)
    token = json.loads(made[made.index("{") :])
    await asyncio.to_thread(run, "tokens", "revoke", token["id"], "--user", user, stdin=password)
    channel = json.loads(
        await asyncio.to_thread(
            run, "alerts", "channel-add", "c", "--kind", "webhook", "-s", "url=http://x/", with_env=app_env
        )
    )
    await asyncio.to_thread(run, "alerts", "channel-rm", channel["id"], with_env=app_env)

    # When the audit log is read
    entries = await _entries(admin, limit=500)
    recent = [e for e in entries if e["action"].startswith(("user.", "alert."))]

    # Then each of those changes says it came from the CLI (users: create, disable, enable; a token
    # created and revoked; an alert channel added and removed)
    assert len(recent) == 7, [(e["action"], e["object_id"]) for e in recent]
    assert {e["via"] for e in recent} == {"cli"}, [(e["action"], e["via"]) for e in recent]
