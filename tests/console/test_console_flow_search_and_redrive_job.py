"""The console's flow search and dead letters in a real browser: flows found by task name within a time
preset, their total and a CSV export; dead letters filtered newest first, and "Redrive all matching"
confirmed by count, run as one server-side job whose page shows its progress, also after a reload
(tjobs/console/pages_flows.py, pages_operator_jobs.py)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, expect

from testkit import RunningNode
from tests.console.conftest import api, screenshot, sign_in
from tests.receiver import Receiver
from tjobs.model import Flow, FlowKind, FlowStatus
from tjobs.stores.contracts.operator_jobs import OperatorJob
from tjobs.stores.operator_job_store import operator_jobs_of

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def dead_flows(running: RunningNode, key: str, app_id: str, name: str, url: str, count: int, code: int) -> None:
    """A task named ``name`` and ``count`` dead flows of it, a minute apart up to a minute ago."""
    body = {"name": name, "schedule": {"kind": "delay", "delay_ms": 3_600_000}, "callback": {"url": url}}
    task = (await api(running, key, "POST", "/v1/tasks", body)).json()
    now_ms = running.node.clock.now_ms()
    for index in range(count):
        at = now_ms - (index + 1) * 60_000
        flow = Flow(int(task["id"]), at, app_id, FlowKind.SCHEDULED, FlowStatus.DEAD, 3, None, at, at, 0, code)
        await running.node.store.insert_manual_flow(flow.task_id, flow)


async def test_flows_are_searched_by_task_name_in_a_time_preset_counted_and_exported(
    running: RunningNode, context: BrowserContext
) -> None:
    app, key = await running.create_app("flow-search-app")
    await dead_flows(running, key, app.id, "order-close-7", "http://127.0.0.1:9/a", 3, 503)
    await dead_flows(running, key, app.id, "refund-poll", "http://127.0.0.1:9/b", 2, 404)

    page = await context.new_page()
    await sign_in(page, key)
    await page.get_by_role("link", name="Flows").click()
    await page.get_by_label("Task name starts with").fill("order-")
    await page.get_by_label("Scheduled").select_option("1h")
    await page.get_by_role("button", name="Search").click()

    await expect(page.locator("#flows-total")).to_contain_text("3 flows match")
    rows = page.locator("main table tbody tr")
    await expect(rows).to_have_count(3)
    await expect(rows.first).to_contain_text("order-close-7")
    await expect(page.locator("main table")).not_to_contain_text("refund-poll")

    async with page.expect_download() as downloading:
        await page.locator("#export-csv").click()
    download = await downloading.value
    text = (await download.path()).read_text()
    exported = list(csv.reader(io.StringIO(text)))
    assert exported[0][:3] == ["flow_id", "task_id", "task_name"] and len(exported) == 4
    assert {row[2] for row in exported[1:]} == {"order-close-7"}

    await page.get_by_label("Last answer").fill("7xx")
    await page.get_by_role("button", name="Search").click()
    await expect(page.get_by_role("alert")).to_contain_text("last_answer")


async def test_redrive_all_matching_runs_as_one_job_whose_page_shows_its_progress_after_a_reload(
    running: RunningNode, context: BrowserContext, receiver: Receiver, screenshots: Path
) -> None:
    app, key = await running.create_app("redrive-job-app")
    url = receiver.url("/console-redrive-job")
    await dead_flows(running, key, app.id, "charge-retry", url, 12, 503)
    await dead_flows(running, key, app.id, "charge-retry-gone", url, 3, 404)

    page = await context.new_page()
    await sign_in(page, key)
    await page.get_by_role("link", name="Dead letters").click()
    await expect(page.locator("#dead-total")).to_contain_text("15 dead letters match")
    await page.get_by_label("Last answer").fill("5xx")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("#dead-total")).to_contain_text("12 dead letters match")
    await expect(page.locator("main table tbody tr")).to_have_count(12)

    await page.locator("#redrive-all").click()
    await expect(page.locator("#confirm-count")).to_have_text("12")
    await page.get_by_role("button", name="Redrive 12").click()
    await page.wait_for_url("**/console/operator-jobs/job_*")

    await expect(page.locator("#job-state")).to_contain_text("done", timeout=30_000)
    await expect(page.locator("#job-processed")).to_have_text("12")
    await page.reload()
    await expect(page.locator("#job-state")).to_contain_text("done")
    await expect(page.locator("#job-failed")).to_have_text("0")
    await screenshot(page, screenshots, "redrive-job")

    await page.get_by_role("link", name="Back to the dead letters").click()
    await expect(page.locator("#dead-total")).to_contain_text("3 dead letters match")
    await expect(page.locator("main")).to_contain_text("Redrive jobs")
    remaining = (await api(running, key, "GET", "/v1/dead-letters")).json()["items"]
    assert len(remaining) == 3 and {flow["last_status_code"] for flow in remaining} == {404}


async def test_a_running_job_is_cancelled_from_its_page(running: RunningNode, context: BrowserContext) -> None:
    app, key = await running.create_app("cancel-job-app")
    # a job another node holds (claimed, its lease long): it stays running while the page is open
    jobs = operator_jobs_of(running.node.store)
    now_ms = running.node.clock.now_ms()
    params = {"filters": {"status": "dead"}, "dead_before_ms": now_ms}
    job = OperatorJob("job_00000000000000c1", "redrive", app.id, params, 40, "ops", now_ms, now_ms)
    await running.node.job_runner.stop()  # this node's runner must not take it first
    try:
        await jobs.create_operator_job(job)
        claimed = await jobs.claim_operator_job("node-elsewhere", now_ms + 1, 3_600_000)
        assert claimed is not None and claimed.id == job.id
    finally:
        await running.node.job_runner.start()

    page = await context.new_page()
    await sign_in(page, key)
    await page.goto("/console/operator-jobs/job_00000000000000c1")
    await expect(page.locator("#job-state")).to_contain_text("running")
    await expect(page.locator("main")).to_contain_text("node-elsewhere")
    await page.get_by_role("button", name="Cancel the job").click()
    await expect(page.locator("#job-state")).to_contain_text("cancelling")
    await expect(page.get_by_role("button", name="Cancel the job")).to_have_count(0)
    assert (await api(running, key, "GET", "/v1/operator-jobs/job_00000000000000c1")).json()["cancel_requested"]
