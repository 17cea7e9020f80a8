"""Chromium over the task views an on-call engineer reads: each task's health in the list, a task's whole
history a page at a time (Older, Newer, Newest), and a flow's request as sent with the receiver's answers.
One browser test per view; the logic and the bad input are tested in process (tests/api/
test_console_task_views.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import BrowserContext, expect

from testkit import RunningNode
from tests.api.test_tenancy import wait_status
from tests.console.conftest import PHONE, api, screenshot, sign_in
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="module")

FLOW_WAIT_S = 30  # how long the node may take to deliver on a loaded CI box


async def settled(running: RunningNode, key: str, flow_id: str, status: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
        return await wait_status(client, flow_id, status, FLOW_WAIT_S)


async def test_the_task_list_shows_each_tasks_last_result_and_its_last_24_hours(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    _, key = await running.create_app("health-list")
    receiver.script("/health-list", Reply(200), Reply(500), then=Reply(410))
    body = {"name": "close-orders", "schedule": {"kind": "delay", "delay_ms": 3_600_000}}
    task = await api(running, key, "POST", "/v1/tasks", {**body, "callback": {"url": receiver.url("/health-list")}})
    task_id = task.json()["id"]
    delivered = (await api(running, key, "POST", f"/v1/tasks/{task_id}/trigger")).json()
    await settled(running, key, delivered["id"], "delivered")
    failing = (await api(running, key, "POST", f"/v1/tasks/{task_id}/trigger")).json()
    await settled(running, key, failing["id"], "dead")  # 500, then 410: gone

    page = await context.new_page()
    await sign_in(page, key)
    await page.goto("/console/tasks")

    table = page.get_by_role("table", name="Tasks")
    await expect(table.locator("thead th")).to_contain_text(["Name", "Status", "Last result", "24 h"])
    row = table.locator("tbody tr", has_text="close-orders")
    await expect(row.locator("td.health-last")).to_contain_text("dead")
    await expect(row.locator("td.health-day")).to_contain_text("50.0 % delivered")
    await expect(row.locator("td.health-day")).to_contain_text("1 failed")
    await screenshot(page, screenshots, "tasks-health")
    await page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


async def test_a_tasks_history_pages_older_newer_and_back_to_the_newest(
    running: RunningNode, context: BrowserContext, screenshots: Path
) -> None:
    _, key = await running.create_app("history-pages")
    body = {
        "name": "poll-refund",
        "schedule": {"kind": "delay", "delay_ms": 3_600_000},
        "callback": {"url": "http://127.0.0.1:9/x"},
    }
    task_id = (await api(running, key, "POST", "/v1/tasks", body)).json()["id"]
    ids = [(await api(running, key, "POST", f"/v1/tasks/{task_id}/trigger")).json()["id"] for _ in range(28)]

    page = await context.new_page()
    await sign_in(page, key)
    await page.goto(f"/console/tasks/{task_id}")
    flows = page.locator("#flows tbody tr")
    await expect(flows).to_have_count(25)
    pages = page.get_by_role("navigation", name="Pages of this task's flows")
    await expect(pages.get_by_role("link", name="Newer")).to_have_count(0)

    await pages.get_by_role("link", name="Older").click()
    await expect(flows).to_have_count(3)
    await expect(flows.first.locator("a")).to_have_attribute("href", f"/console/flows/{ids[2]}")
    await expect(pages.get_by_role("link", name="Older")).to_have_count(0)
    await screenshot(page, screenshots, "task-history-older")

    await pages.get_by_role("link", name="Newer").click()
    await expect(flows).to_have_count(25)
    await expect(flows.first.locator("a")).to_have_attribute("href", f"/console/flows/{ids[-1]}")
    await pages.get_by_role("link", name="Newest").click()
    await expect(page).to_have_url(re.compile(rf"/console/tasks/{task_id}$"))
    await expect(flows).to_have_count(25)


async def test_a_flows_page_shows_the_request_masked_and_the_answers_with_the_long_one_cut(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    _, key = await running.create_app("answers")
    receiver.script("/answers", Reply(503, headers={"Retry-After": "0"}, body=b"<h1>busy</h1>" * 500))  # then 200
    callback = {"url": receiver.url("/answers"), "headers": {"authorization": "Bearer s3cret", "x-shop": "7"}}
    body = {"name": "ship-order", "schedule": {"kind": "delay", "delay_ms": 3_600_000}, "callback": callback}
    task_id = (await api(running, key, "POST", "/v1/tasks", {**body, "payload": {"order": 7}})).json()["id"]
    flow = (await api(running, key, "POST", f"/v1/tasks/{task_id}/trigger")).json()
    await settled(running, key, flow["id"], "delivered")

    page = await context.new_page()
    await sign_in(page, key)
    await page.goto(f"/console/flows/{flow['id']}")

    await expect(page.locator("#request-provenance")).to_contain_text("As sent")
    headers = page.get_by_role("table", name="Headers sent, secrets masked")
    await expect(headers.locator("tr", has_text="authorization")).to_contain_text("[masked]")
    await expect(headers.locator("tr", has_text="webhook-signature")).to_contain_text("[masked]")
    await expect(headers.locator("tr", has_text="x-shop")).to_contain_text("7")
    await expect(page.locator("#request-body")).to_contain_text('"order": 7')
    refused = page.get_by_role("article", name="Answer to attempt 1")
    await expect(refused.get_by_role("heading")).to_contain_text("HTTP 503")
    await expect(refused.locator(".answer-truncated")).to_contain_text("Truncated: the first 4,096 of 6,500 bytes")
    await expect(page.get_by_role("article", name="Answer to attempt 2").get_by_role("heading")).to_contain_text(
        "HTTP 200"
    )
    assert "s3cret" not in await page.content()
    await screenshot(page, screenshots, "flow-request-answers")
    await page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
