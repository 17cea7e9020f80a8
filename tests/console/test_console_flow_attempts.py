"""The flow page lists every attempt: number, start, duration, answer, error, destination and lateness,
in words (no colour needed), and fits a phone's width."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, expect

from testkit import RunningNode
from tests.console.conftest import PHONE, api, screenshot, sign_in
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="module")

FLOW_WAIT_S = 30  # how long the node may take to deliver on a loaded CI box


async def test_the_flow_page_shows_a_503_then_a_200_as_two_attempts(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    # Given a flow refused once with 503, then delivered
    _, key = await running.create_app("attempts")
    receiver.script("/attempts", Reply(503))  # then 200
    body = {
        "name": "sync-stock",
        "schedule": {"kind": "delay", "delay_ms": 0},
        "callback": {"url": receiver.url("/attempts")},
    }
    created = await api(running, key, "POST", "/v1/tasks", body)
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    async with asyncio.timeout(FLOW_WAIT_S):
        while True:
            flows = (await api(running, key, "GET", f"/v1/tasks/{task_id}/flows")).json()["items"]
            if flows and flows[0]["status"] == "delivered":
                flow_id = flows[0]["id"]
                break
            await asyncio.sleep(0.2)

    # When its page is opened
    page = await context.new_page()
    await sign_in(page, key)
    await page.goto(f"/console/flows/{flow_id}")

    # Then the attempts table lists both, oldest first, each answer in words
    table = page.get_by_role("table", name="Every send of this flow")
    await expect(table.locator("thead th")).to_have_text(
        ["Attempt", "At", "Duration", "Status", "Error", "Destination", "Lateness"]
    )
    rows = table.locator("tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0).locator("td").nth(0)).to_have_text("1")
    await expect(rows.nth(0)).to_contain_text("HTTP 503")
    await expect(rows.nth(0).locator("td").nth(4)).not_to_have_text("—")
    await expect(rows.nth(1).locator("td").nth(0)).to_have_text("2")
    await expect(rows.nth(1)).to_contain_text("HTTP 200 (delivered)")
    for index in range(2):
        await expect(rows.nth(index).locator("td").nth(2)).to_have_text(re.compile(r"^\d+ ms$"))
        await expect(rows.nth(index).locator("td").nth(5)).to_contain_text(receiver.url("/attempts"))
        await expect(rows.nth(index).locator("td").nth(6)).to_contain_text("ms after scheduled")
    await screenshot(page, screenshots, "flow-attempts")

    # And on a phone nothing is wider than the screen
    await page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    await expect(rows.nth(1)).to_contain_text("HTTP 200 (delivered)")
    await table.scroll_into_view_if_needed()
    await screenshot(page, screenshots, "phone-flow-attempts", full_page=False)
