"""The console's Audit page in a real browser: a change made in the console is recorded as via
``console``; an app's session sees its own app's entries only, the admin every app's, with the same
filters as the API (tjobs/console/pages_audit.py, templates/audit.html)."""

from __future__ import annotations

import pytest
from playwright.async_api import BrowserContext, expect

from testkit import RunningNode
from tests.console.conftest import ADMIN_KEY, api, sign_in

pytestmark = pytest.mark.asyncio(loop_scope="module")

TASK = {
    "name": "audited",
    "schedule": {"kind": "delay", "delay_ms": 3_600_000},
    "callback": {"url": "http://127.0.0.1:9/h"},
}


async def test_a_console_pause_is_on_the_audit_page_of_its_app_and_the_admins(
    running: RunningNode, context: BrowserContext
) -> None:
    _, key = await running.create_app("audited-app")
    other, other_key = await running.create_app("other-app")
    task = (await api(running, key, "POST", "/v1/tasks", TASK)).json()
    foreign = (await api(running, other_key, "POST", "/v1/tasks", TASK)).json()
    assert (await api(running, other_key, "POST", f"/v1/tasks/{foreign['id']}/pause")).status_code == 200

    page = await context.new_page()
    await sign_in(page, key)
    await page.goto(f"/console/tasks/{task['id']}")
    await page.get_by_role("link", name="Pause").click()
    await page.get_by_role("button", name="Pause").click()
    await page.wait_for_url(f"**/console/tasks/{task['id']}?done=paused")

    await page.get_by_role("link", name="Audit").click()
    rows = page.locator("main table tbody tr")
    await expect(rows).to_have_count(1)  # its own pause; the other app's is not shown
    await expect(rows.first).to_contain_text("task.pause")
    await expect(rows.first).to_contain_text(task["id"])
    await expect(rows.first).to_contain_text("console")
    await expect(page.locator("main")).not_to_contain_text(foreign["id"])

    await page.get_by_label("Action (or prefix)").fill("Bad*")
    await page.get_by_role("button", name="Search").click()
    await expect(page.get_by_role("alert")).to_contain_text("action")

    admin = await context.new_page()
    await sign_in(admin, ADMIN_KEY)
    await admin.goto(f"/console/audit?app={other.id}")
    await expect(admin.locator("main table tbody tr")).to_have_count(1)
    await expect(admin.locator("main")).to_contain_text(foreign["id"])
