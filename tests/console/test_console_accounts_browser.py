"""A user signs in to the console with a name and password in a real browser: it sees its app with its
role, a viewer's pause is refused, and after signing out the old cookie is refused by the server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.async_api import BrowserContext, expect

from testkit import RunningNode
from tests.console.conftest import ADMIN_KEY, api, screenshot

pytestmark = pytest.mark.asyncio(loop_scope="module")

PASSWORD = "correct horse battery"


async def test_a_viewer_signs_in_with_a_password_reads_its_app_and_its_signed_out_cookie_is_refused(
    running: RunningNode, context: BrowserContext, screenshots: Path
) -> None:
    # Given an app with one task, and a user who is a viewer of it
    app, key = await running.create_app("accounts-shop")
    created = await api(
        running,
        key,
        "POST",
        "/v1/tasks",
        {
            "name": "nightly-report",
            "schedule": {"kind": "delay", "delay_ms": 3_600_000},
            "callback": {"url": "http://127.0.0.1:9/x"},
        },
    )
    task_id = created.json()["id"]
    made = await api(
        running, ADMIN_KEY, "POST", "/v1/users", {"name": "vera", "password": PASSWORD, "roles": {app.id: "viewer"}}
    )
    assert made.status_code == 201, made.text
    page = await context.new_page()

    # When she signs in with her name and password
    await page.goto("/console/signin")
    await page.get_by_label("User name").fill("vera")
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Use this account").click()
    await page.wait_for_url("**/console/")
    await expect(page.get_by_text("vera, viewer of accounts-shop")).to_be_visible()
    await screenshot(page, screenshots, "signed-in-as-a-user")

    # Then she reads the task, but pausing it is refused
    await page.goto(f"/console/tasks/{task_id}")
    await expect(page.get_by_text("nightly-report").first).to_be_visible()
    cookie = next(c["value"] for c in await context.cookies() if c["name"] == "tjobs_console")
    async with httpx.AsyncClient(base_url=running.base_url, cookies={"tjobs_console": cookie}) as client:
        shown = await client.get(f"/console/tasks/{task_id}")
        csrf = shown.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        refused = await client.post(f"/console/tasks/{task_id}/pause", data={"csrf": csrf})
        assert refused.status_code == 403

    # And once she signs out, the cookie she held is refused
    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url("**/console/signin**")
    async with httpx.AsyncClient(base_url=running.base_url, cookies={"tjobs_console": cookie}) as client:
        after = await client.get("/console/tasks")
        assert after.status_code == 303 and "/console/signin" in after.headers["location"]
