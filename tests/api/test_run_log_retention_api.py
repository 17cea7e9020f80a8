"""An app's run log retention over HTTP, the CLI and the console on every backend (README "Job runs"):
``run_log_retention_days`` is kept, shown and cleared like the app's other settings; a bad value, or one
longer than the node's flow retention (``retention.days``: a log cannot outlive its flow), is a 422
naming it; after the retention sweeper's pass, a run's log is shown purged (``log_purged``, the line count
kept), not as a run that logged nothing, and takes no more lines."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sharding.ids import shard_of_task_id
from testkit import RunningNode
from tests.api.conftest import ADMIN_KEY, Tenant, refused_before_storage
from tests.api.test_client_and_cli import cli_run
from tests.api.test_console_accounts import page, sign_in
from tests.api.test_job_runs_api import _running_flow
from tests.api.test_tasks_api import assert_error
from tests.receiver import Receiver
from tjobs.clock import ManualClock
from tjobs.firing.retention import RetentionSweeper

pytestmark = pytest.mark.asyncio(loop_scope="session")
FIELD = "run_log_retention_days"
DAY_MS = 86_400_000


@pytest.mark.parametrize("value", [0, -1, "7", True, {}, 30.5, 365, 1e300])
@refused_before_storage
async def test_a_bad_run_log_retention_is_refused_naming_it(admin: httpx.AsyncClient, value: Any) -> None:
    created = await admin.post("/v1/apps", json={"name": "logs-bad", FIELD: value})
    updated = await admin.patch("/v1/apps/app_missing1", json={FIELD: value})
    assert_error(created, 422, field=FIELD)
    assert_error(updated, 422, field=FIELD)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 30:  # the node's retention.days
        assert created.json()["error"]["code"] == "exceeds_retention"
        assert "retention.days (30)" in created.json()["error"]["message"]


async def test_the_setting_is_kept_shown_and_cleared(admin: httpx.AsyncClient, api_node: RunningNode) -> None:
    created = await admin.post("/v1/apps", json={"name": "logs-kept", FIELD: 7})
    assert created.status_code == 201 and created.json()["settings"][FIELD] == 7
    app_id = created.json()["id"]
    at_most = await admin.patch(f"/v1/apps/{app_id}", json={FIELD: 30})  # as long as the flows: accepted
    assert at_most.status_code == 200 and at_most.json()["settings"][FIELD] == 30
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_ADMIN_KEY": ADMIN_KEY, "COLUMNS": "200"}
    shown = await cli_run("app", "update", app_id, "--run-log-retention-days", "0.5", "--json", env=env)
    assert shown["settings"][FIELD] == 0.5
    cleared = await admin.patch(f"/v1/apps/{app_id}", json={FIELD: None})
    assert cleared.status_code == 200 and cleared.json()["settings"].get(FIELD) is None
    await admin.delete(f"/v1/apps/{app_id}", params={"confirm": app_id})


async def test_a_log_past_the_apps_retention_is_shown_purged_and_takes_no_more_lines(
    api_node: RunningNode, tenant_factory: Any, receiver: Receiver
) -> None:
    tenant: Tenant = await tenant_factory("logs-purged", **{FIELD: 1})
    kept: Tenant = await tenant_factory("logs-kept")  # no policy: its logs follow its flows
    flows = []
    for owner, path in ((tenant, "/logs-purged"), (kept, "/logs-kept")):
        fid = (await _running_flow(owner, receiver, path))["id"]
        await owner.client.post(f"/v1/flows/{fid}/log", json={"lines": ["one", "two", "three"]})
        ended = await owner.client.post(f"/v1/flows/{fid}/report", json={"status": "succeeded", "result": {"n": 3}})
        assert ended.json()["status"] == "delivered"
        flows.append(fid)
    purged_id, kept_id = flows

    # the node's sweeper, two days on (its own clock), over the shards of both flows
    node = api_node.node
    shards = frozenset(shard_of_task_id(int(fid.split("-")[0])) for fid in flows)
    clock = ManualClock(node.clock.now_ms() + 2 * DAY_MS)
    sweeper = RetentionSweeper(node.store, lambda: shards, node.settings.retention, clock)
    assert await sweeper.run_once() >= 1
    assert sweeper.logs_cleared >= 1

    shown = (await tenant.client.get(f"/v1/flows/{purged_id}")).json()
    assert (shown["log"], shown["log_lines"], shown["log_purged"]) == ([], 3, True)
    assert shown["status"] == "delivered" and shown["run"]["result"] == {"n": 3}
    other = (await kept.client.get(f"/v1/flows/{kept_id}")).json()
    assert [line["line"] for line in other["log"]] == ["one", "two", "three"] and other["log_purged"] is False
    late = await tenant.client.post(f"/v1/flows/{purged_id}/log", json={"lines": ["late"]})
    assert late.status_code == 200 and late.json() == {"appended": 0, "dropped": 1, "truncated": 0, "log_lines": 3}

    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}
    text = await cli_run("flows", "show", purged_id, env=env)
    assert "3 log lines, purged by the app's log retention" in text
    status, session = await sign_in(api_node, key=tenant.api_key)
    assert status == 303 and session is not None
    console = await page(api_node, session, f"/console/flows/{purged_id}")
    assert "Purged by the app's run log retention: 3 lines were logged." in console.text
    assert "No log lines." not in console.text
