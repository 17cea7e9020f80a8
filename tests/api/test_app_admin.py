"""The operator's app calls over HTTP, the SDK and the CLI: list (paged), disable, enable, delete."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from testkit import RunningNode
from tests.api.conftest import ADMIN_KEY, Tenant, task_body
from tests.api.test_tasks_api import assert_error
from tjobs.cli.main import app as cli
from tjobs.client import Client

pytestmark = pytest.mark.asyncio(loop_scope="session")
OWN_API_NODE = True  # the SDK looks for an app in the first 1,000 of every app (conftest.py)


async def test_the_admin_lists_every_app_by_id_across_pages(admin: httpx.AsyncClient, tenant_factory: Any) -> None:
    made = {(await tenant_factory(f"listed-{i}")).app.id for i in range(5)}
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = (await admin.get("/v1/apps", params=params)).json()
        assert len(page["items"]) <= 2 and all("secrets" not in item for item in page["items"])
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(seen) and len(seen) == len(set(seen)) and made <= set(seen)


async def test_only_the_admin_lists_and_bad_pages_are_422(admin: httpx.AsyncClient, tenant: Tenant) -> None:
    assert (await tenant.client.get("/v1/apps")).status_code == 401
    assert_error(await admin.get("/v1/apps", params={"limit": 0}), 422, field="limit")
    assert_error(await admin.get("/v1/apps", params={"cursor": "not-one"}), 422, "bad_cursor", "cursor")
    foreign = "WyJ0YXNrcyIsIDFd"  # a cursor of another listing
    assert_error(await admin.get("/v1/apps", params={"cursor": foreign}), 422, "bad_cursor", "cursor")


async def test_a_disabled_key_answers_403_and_the_app_shows_it(admin: httpx.AsyncClient, tenant: Tenant) -> None:
    assert (await admin.post("/v1/apps/app_missing/disable")).status_code == 404
    shown = (await admin.post(f"/v1/apps/{tenant.app.id}/disable")).json()
    assert shown["disabled"] is True and shown["disabled_at"] and "disabled_at_ms" not in shown["settings"]
    again = (await admin.post(f"/v1/apps/{tenant.app.id}/disable")).json()
    assert again["disabled_at"] == shown["disabled_at"]  # disabling twice changes nothing
    refused = await tenant.client.post("/v1/tasks", json=task_body())
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "app_disabled"
    assert (await admin.post(f"/v1/apps/{tenant.app.id}/enable")).json()["disabled"] is False
    assert (await tenant.client.post("/v1/tasks", json=task_body())).status_code == 201


async def test_the_sdk_and_the_cli_list_disable_enable_and_delete(api_node: RunningNode, tenant_factory: Any) -> None:
    doomed = await tenant_factory("cli-doomed")
    await doomed.client.post("/v1/tasks", json=task_body())
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_ADMIN_KEY": ADMIN_KEY, "COLUMNS": "80"}

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args), env=env)
        assert result.exit_code == 0, result.output
        return result.stdout

    def drive() -> tuple[str, Any, Any, str, bool, str]:
        table = run("app", "list", "--all")
        disabled = json.loads(run("app", "disable", doomed.app.id, "--json"))
        enabled = json.loads(run("app", "enable", doomed.app.id, "--json"))
        refused = CliRunner().invoke(cli, ["app", "delete", doomed.app.id, "--confirm", "nope"], env=env)
        with Client(api_node.base_url, ADMIN_KEY) as sdk:
            listed = any(app.id == doomed.app.id for app in sdk.list_apps(limit=1000).items)
        deleted = run("app", "delete", doomed.app.id, "--confirm", doomed.app.id)
        return table, disabled, enabled, refused.output, listed, deleted

    table, disabled, enabled, refused, listed, deleted = await asyncio.to_thread(drive)
    assert doomed.app.id in table and max(len(line) for line in table.splitlines()) <= 80
    assert disabled["disabled"] is True and enabled["disabled"] is False
    assert "confirmation_required" in refused and listed
    assert deleted.strip() == f"deleted app {doomed.app.id} and 1 tasks"


async def test_the_cli_updates_an_apps_limits_and_names_a_bad_flag(api_node: RunningNode, tenant_factory: Any) -> None:
    tenant = await tenant_factory("cli-update")
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_ADMIN_KEY": ADMIN_KEY, "COLUMNS": "80"}

    def drive() -> tuple[Any, Any, Any]:
        runner = CliRunner()
        updated = runner.invoke(
            cli, ["app", "update", tenant.app.id, "--rate", "7.5", "--concurrency", "3", "--json"], env=env
        )
        bad_json = runner.invoke(cli, ["app", "update", tenant.app.id, "--callback-defaults", "{nope"], env=env)
        bad_rate = runner.invoke(cli, ["app", "update", tenant.app.id, "--rate", "-1"], env=env)
        return updated, bad_json, bad_rate

    updated, bad_json, bad_rate = await asyncio.to_thread(drive)
    assert updated.exit_code == 0, updated.output
    app = json.loads(updated.stdout)
    assert app["rate_limit_per_s"] == 7.5 and app["max_concurrency"] == 3
    assert bad_json.exit_code != 0 and "--callback-defaults" in bad_json.output
    assert bad_rate.exit_code != 0 and "rate_limit_per_s" in bad_rate.output
    assert "Traceback" not in bad_json.output + bad_rate.output
