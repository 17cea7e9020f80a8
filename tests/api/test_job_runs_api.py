"""Job runs over HTTP on every backend (README "Job runs", docs/targets.md "Runs"): a receiver answering
202 with tjobs-run: accepted leaves the flow running; its executor reports progress, log lines and the
end with a result under the app's key; a cancel is told in the answer to the next report; each bad field
is a 4xx naming it; the SDK, the CLI and the console show and cancel runs."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, refused_before_storage, task_body
from tests.api.test_client_and_cli import cli_run
from tests.api.test_console_accounts import page, post, sign_in
from tests.api.test_task_secrets_api import _role_client
from tests.api.test_tenancy import wait_status
from tests.receiver import Receiver, Reply
from tjobs.client import AsyncClient

pytestmark = pytest.mark.asyncio(loop_scope="session")

ACCEPTED = Reply(202, headers={"tjobs-run": "accepted"})


async def _running_flow(tenant: Tenant, receiver: Receiver, path: str, **callback: Any) -> dict[str, Any]:
    receiver.script(path, ACCEPTED)
    body = task_body(callback={"url": receiver.url(path), **callback})
    task = (await tenant.client.post("/v1/tasks", json=body)).json()
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    return await wait_status(tenant.client, flow["id"], "running")


async def test_a_run_reports_progress_logs_and_ends_with_its_result(tenant: Tenant, receiver: Receiver) -> None:
    flow = await _running_flow(tenant, receiver, "/run-ok", run_timeout_ms=600_000)
    fid = flow["id"]
    assert flow["run"]["status"] == "running" and flow["run"]["attempt"] == 1 and flow["run"]["deadline"]
    client = tenant.client

    progress = await client.post(f"/v1/flows/{fid}/report", json={"status": "running", "progress": 50, "attempt": 1})
    logged = await client.post(f"/v1/flows/{fid}/log", json={"lines": ["started", "step 2 of 4"]})
    listed = (await client.get("/v1/flows", params={"status": "running"})).json()["items"]
    shown = (await client.get(f"/v1/flows/{fid}")).json()
    ended = await client.post(
        f"/v1/flows/{fid}/report", json={"status": "succeeded", "attempt": 1, "result": {"rows": 7}}
    )
    again = await client.post(
        f"/v1/flows/{fid}/report", json={"status": "succeeded", "attempt": 1, "result": {"rows": 7}}
    )
    late = await client.post(f"/v1/flows/{fid}/report", json={"status": "failed", "attempt": 1})

    assert progress.status_code == 200 and progress.json()["run"]["progress"] == 50
    assert progress.json()["cancel_requested"] is False
    assert logged.status_code == 200 and logged.json() == {"appended": 2, "dropped": 0, "truncated": 0, "log_lines": 2}
    assert fid in [f["id"] for f in listed]
    assert [line["line"] for line in shown["log"]] == ["started", "step 2 of 4"] and shown["log_lines"] == 2
    assert ended.status_code == 200 and ended.json()["status"] == "delivered"
    assert ended.json()["run"]["status"] == "succeeded" and ended.json()["run"]["result"] == {"rows": 7}
    assert again.status_code == 200 and again.json()["repeated"] is True
    assert late.status_code == 409 and late.json()["error"]["code"] == "run_finished"
    final = (await client.get(f"/v1/flows/{fid}")).json()
    assert final["status"] == "delivered" and final["run"]["result"] == {"rows": 7} and len(final["log"]) == 2


async def test_a_cancel_reaches_the_executor_in_the_answer_to_its_next_report(
    tenant: Tenant, receiver: Receiver
) -> None:
    flow = await _running_flow(tenant, receiver, "/run-cancel")
    fid = flow["id"]
    client = tenant.client

    cancelled = await client.post(f"/v1/flows/{fid}/cancel")
    heartbeat = await client.post(f"/v1/flows/{fid}/report", json={"status": "running"})
    stopped = await client.post(f"/v1/flows/{fid}/report", json={"status": "failed", "message": "stopped"})
    again = await client.post(f"/v1/flows/{fid}/cancel")

    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelling"
    assert heartbeat.json()["cancel_requested"] is True
    assert stopped.json()["status"] == "cancelled" and stopped.json()["run"]["status"] == "cancelled"
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_running"


async def test_a_flow_that_is_not_running_refuses_reports_and_cancels(tenant: Tenant, receiver: Receiver) -> None:
    receiver.script("/run-plain", Reply(202))  # a plain 202: delivered, no run
    task = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url("/run-plain")}))).json()
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    await wait_status(tenant.client, flow["id"], "delivered")

    report = await tenant.client.post(f"/v1/flows/{flow['id']}/report", json={"status": "succeeded"})
    cancel = await tenant.client.post(f"/v1/flows/{flow['id']}/cancel")
    missing = await tenant.client.post("/v1/flows/1-2/report", json={"status": "succeeded"})

    assert report.status_code == 409 and report.json()["error"]["code"] == "not_running"
    assert cancel.status_code == 409
    assert missing.status_code == 404


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"status": "finished"}, "status", 422),
        ({"status": "running", "progress": 150}, "progress", 422),
        ({"status": "succeeded", "attempt": "1"}, "attempt", 422),
        ({"status": "succeeded", "result": {"blob": "x" * 70_000}}, "result", 413),
        ({"status": "succeeded", "extra": 1}, "extra", 422),
    ],
)
async def test_a_bad_report_is_refused_naming_its_field(
    tenant: Tenant, receiver: Receiver, body: dict[str, Any], field: str, status: int
) -> None:
    flow = await _running_flow(tenant, receiver, f"/run-bad-{field}")

    refused = await tenant.client.post(f"/v1/flows/{flow['id']}/report", json=body)

    assert refused.status_code == status and refused.json()["error"]["field"] == field
    assert (await tenant.client.get(f"/v1/flows/{flow['id']}")).json()["status"] == "running"


@pytest.mark.parametrize("value", [0, 999, 30 * 86_400_000 + 1, "60000", 1.5, True])
@refused_before_storage
async def test_a_bad_run_timeout_is_refused_naming_it(tenant: Tenant, value: Any) -> None:
    body = task_body(callback={"url": "http://127.0.0.1:9/hook", "run_timeout_ms": value})

    refused = await tenant.client.post("/v1/tasks", json=body)

    assert refused.status_code == 422 and refused.json()["error"]["field"] == "callback.run_timeout_ms"


async def test_a_run_timeout_is_kept_with_the_task(tenant: Tenant) -> None:
    body = task_body(callback={"url": "http://127.0.0.1:9/hook", "run_timeout_ms": 60_000})

    created = (await tenant.client.post("/v1/tasks", json=body)).json()

    assert created["callback"]["run_timeout_ms"] == 60_000
    assert (await tenant.client.get(f"/v1/tasks/{created['id']}")).json()["callback"]["run_timeout_ms"] == 60_000


async def test_the_sdk_reports_and_the_cli_shows_and_cancels_a_run(tenant: Tenant, receiver: Receiver) -> None:
    flow = await _running_flow(tenant, receiver, "/run-sdk")
    env = {"TJOBS_URL": str(tenant.client.base_url), "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "80"}

    async with AsyncClient(str(tenant.client.base_url), tenant.api_key) as sdk:
        reported = await sdk.report_run(flow["id"], "running", attempt=1, progress=25)
        logged = await sdk.append_run_log(flow["id"], ["one", "two"], attempt=1)
        shown = await cli_run("flows", "show", flow["id"], env=env)
        cancelled = await cli_run("flows", "cancel", flow["id"], "--json", env=env)
        heartbeat = await sdk.report_run(flow["id"], "running", attempt=1)
        ended = await sdk.report_run(flow["id"], "failed", attempt=1, message="stopped", result=None)
        read = await sdk.get_flow(flow["id"])
        done = await _running_flow(tenant, receiver, "/run-sdk-result")
        await sdk.append_run_log(done["id"], ["only"], attempt=1)
        await sdk.report_run(done["id"], "succeeded", attempt=1, result={"rows": 7, "file": "[b]" + "x" * 80})
        shown_done = " ".join((await cli_run("flows", "show", done["id"], env=env)).split())  # the caption wraps

    assert reported.run.progress == 25 and not reported.cancel_requested and logged.log_lines == 2
    assert f"flow {flow['id']}: running" in shown and "run (attempt 1): running, 25%; 2 log lines" in shown
    assert "run (attempt 1): succeeded; 1 log line; result " + '{"rows":7,"file":"[b]' + "x" * 38 + "…" in shown_done
    assert cancelled["status"] == "cancelling" and cancelled["run"]["cancel_requested"] is True
    assert heartbeat.cancel_requested and ended.status == "cancelled"
    assert read.run is not None and read.run.status == "cancelled" and [e.line for e in read.log] == ["one", "two"]


async def test_the_console_shows_a_run_with_its_log_and_cancels_it(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    flow = await _running_flow(tenant, receiver, "/run-console")
    fid = flow["id"]
    await tenant.client.post(f"/v1/flows/{fid}/report", json={"status": "running", "progress": "step 2 of 5"})
    await tenant.client.post(f"/v1/flows/{fid}/log", json={"lines": ["<b>loaded</b>"]})
    status, session = await sign_in(api_node, key=tenant.api_key)
    assert status == 303 and session is not None

    shown = await page(api_node, session, f"/console/flows/{fid}")
    cancelled = await post(api_node, session, f"/console/flows/{fid}/cancel")

    assert shown.status_code == 200 and "step 2 of 5" in shown.text and "Cancel the run" in shown.text
    assert "[1] &lt;b&gt;loaded&lt;/b&gt;" in shown.text  # escaped
    assert cancelled.status_code == 303
    assert (await tenant.client.get(f"/v1/flows/{fid}")).json()["status"] == "cancelling"


async def test_a_viewer_reads_a_runs_result_with_its_secrets_masked_and_may_not_report_or_cancel(
    api_node: RunningNode, admin: httpx.AsyncClient, tenant: Tenant, receiver: Receiver
) -> None:
    flow = await _running_flow(tenant, receiver, "/run-viewer")
    fid = flow["id"]
    result = {"rows": 4, "password": "pa55w0rd"}
    ended = await tenant.client.post(f"/v1/flows/{fid}/report", json={"status": "succeeded", "result": result})
    assert ended.json()["run"]["result"] == result  # the app's key: as reported

    async with await _role_client(api_node, admin, tenant, "viewer") as viewer:
        read = (await viewer.get(f"/v1/flows/{fid}")).json()
        listed = (await viewer.get("/v1/flows", params={"status": "delivered"})).json()["items"]
        report = await viewer.post(f"/v1/flows/{fid}/report", json={"status": "succeeded"})
        cancel = await viewer.post(f"/v1/flows/{fid}/cancel")

    assert read["run"]["result"] == {"rows": 4, "password": "[masked]"}
    assert all("pa55w0rd" not in str(f) for f in listed)
    assert report.status_code == 403 and cancel.status_code == 403
