"""The console in a real browser (headless Debian chromium) against a real node on SQLite.

Tasks are created through the API, as a client would; everything else happens by clicking. One browser
serves the module; each test opens its own profile (no cookies shared), so sessions never leak between
tests.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Page, expect

from testkit import RunningNode
from tests.console.conftest import ADMIN_KEY, PHONE, api, screenshot, sign_in
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="module")

FLOW_WAIT_MS = 30_000  # how long a page may take to show a flow the node delivers (a loaded CI box)
YEARLY = {"kind": "cron", "expr": "0 9 1 1 *", "timezone": "Europe/Paris"}


async def _create_task(running: RunningNode, key: str, body: dict[str, object]) -> str:
    created = await api(running, key, "POST", "/v1/tasks", body)
    assert created.status_code == 201, created.text
    task_id: str = created.json()["id"]
    return task_id


async def _csrf_of(page: Page) -> str:
    token = await page.locator("input[name=csrf]").first.get_attribute("value")
    assert token
    return token


async def _wait_for_flow_status(running: RunningNode, key: str, task_id: str, status: str) -> str:
    """The id of the task's newest flow once it has ``status`` (the API is asked until then)."""
    async with asyncio.timeout(FLOW_WAIT_MS / 1000):
        while True:
            flows = (await api(running, key, "GET", f"/v1/tasks/{task_id}/flows")).json()["items"]
            if flows and flows[0]["status"] == status:
                flow_id: str = flows[0]["id"]
                return flow_id
            await asyncio.sleep(0.2)


async def test_sign_in_find_a_task_made_through_the_api_and_watch_its_flow_arrive(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    # Given an app with a task registered through the API, due in a few seconds
    _, key = await running.create_app("shop")
    task_id = await _create_task(
        running,
        key,
        {
            "name": "order-1001-reminder",
            "key": "order-1001",
            "schedule": {"kind": "delay", "delay_ms": 5000},
            "callback": {"url": receiver.url("/shop")},
            "payload": {"order": 1001},
        },
    )
    await _create_task(
        running, key, {"name": "invoice-7", "schedule": YEARLY, "callback": {"url": receiver.url("/shop")}}
    )
    page = await context.new_page()

    # When the app's developer signs in with its key (keyboard only) and searches the task list
    await page.goto("/console/signin")
    await screenshot(page, screenshots, "signin")
    await page.get_by_label("API key or admin key").fill(key)
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/console/")
    await page.get_by_role("link", name="Tasks", exact=True).click()
    await page.get_by_label("Name starts with").fill("order-1")
    await page.get_by_role("button", name="Filter").click()

    # Then only the matching task is listed, and its page shows its schedule and payload
    rows = page.locator("table tbody tr")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("order-1001-reminder")
    await page.get_by_label("Name starts with").fill("")
    await page.get_by_label("Key").fill("order-1001")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("order-1001-reminder")
    await page.get_by_role("link", name="order-1001-reminder").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("order-1001-reminder")
    await expect(page.locator("#h-schedule + pre")).to_contain_text('"delay_ms": 5000')
    await expect(page.get_by_text('"order": 1001')).to_be_visible()
    await page.evaluate("window.stillTheSamePage = true")

    # And its flow appears on the open page once delivered, without a reload
    flows = page.locator("#flows")
    await expect(flows).to_contain_text("delivered", timeout=FLOW_WAIT_MS)
    assert await page.evaluate("window.stillTheSamePage") is True
    assert [r.flow_id.partition("-")[0] for r in receiver.for_path("/shop")] == [task_id]
    await screenshot(page, screenshots, "task")

    # And the flow's page has its attempt
    await flows.get_by_role("link").first.click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("delivered")
    await expect(page.locator("dl.pairs")).to_contain_text("HTTP 200")
    await screenshot(page, screenshots, "flow")

    await page.goto("/console/tasks")
    await screenshot(page, screenshots, "tasks")
    # And the overview counts its fire and delivery once this node has added its minute to the store
    await running.node.slo_recorder.run_once()
    await page.goto("/console/")
    figures = page.locator("dl.figures")
    await expect(figures).to_contain_text("1 in 1 hour")
    await expect(figures).to_contain_text("100.000 %")
    await expect(figures).to_contain_text("1 delivered, 0 dead")
    # the objective's lateness is the first attempt's, at the receiver's answer; commit lateness is named apart
    await expect(figures.locator("div", has_text="p99 delivery lateness")).to_contain_text(
        "first attempts at the answer"
    )
    await expect(figures.locator("div", has_text="p99 commit lateness")).to_contain_text("fire transaction committed")
    await expect(figures.locator("div", has_text="p99 delivery lateness")).to_contain_text("≤ ")  # a bucket, said so
    await expect(page.locator("svg[role=img]")).to_have_count(4)
    await screenshot(page, screenshots, "overview")


async def test_pause_resume_trigger_edit_and_delete_each_confirmed(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    _, key = await running.create_app("billing")
    task_id = await _create_task(
        running, key, {"name": "monthly-report", "schedule": YEARLY, "callback": {"url": receiver.url("/billing")}}
    )
    page = await context.new_page()
    await sign_in(page, key)
    await page.goto(f"/console/tasks/{task_id}")
    heading = page.get_by_role("heading", level=1)
    await expect(page.locator("ol.instants li")).to_have_count(10)
    await expect(page.locator("ol.instants li").first).to_contain_text("09:00:00 +0100 Europe/Paris")

    # The schedule preview starts from the task's schedule
    await page.get_by_role("link", name="Preview this schedule with changes").click()
    await page.get_by_label("How many instants").fill("3")
    await page.get_by_role("button", name="Preview").click()
    await expect(page.locator("ol.instants li")).to_have_count(3)
    await expect(page.locator("ol.instants li").first).to_contain_text("Europe/Paris")
    await screenshot(page, screenshots, "schedule-preview")
    await page.goto(f"/console/tasks/{task_id}")

    # Pause: a confirmation page first, then the task is paused
    await page.get_by_role("link", name="Pause").click()
    await expect(heading).to_have_text(re.compile("Pause .monthly-report.\\?"))
    await screenshot(page, screenshots, "confirm")
    await page.get_by_role("button", name="Pause").click()
    await expect(page.get_by_role("status")).to_have_text("Task paused.")
    await expect(heading).to_contain_text("paused")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).json()["status"] == "paused"

    # Resume
    await page.get_by_role("link", name="Resume").click()
    await page.get_by_role("button", name="Resume").click()
    await expect(page.get_by_role("status")).to_have_text("Task resumed.")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).json()["status"] == "active"

    # Trigger now: a manual flow, delivered
    await page.get_by_role("link", name="Trigger now").click()
    await page.get_by_role("button", name="Trigger now").click()
    await expect(page.get_by_role("status")).to_have_text("Task triggered.")
    await expect(page.locator("#flows")).to_contain_text("manual")
    await expect(page.locator("#flows")).to_contain_text("delivered", timeout=FLOW_WAIT_MS)

    # Edit: the name changes; an edit that crossed another one is refused, naming the conflict
    await page.get_by_role("link", name="Edit").click()
    await page.get_by_label("Name").fill("monthly-report-eu")
    await page.get_by_role("button", name="Save").click()
    await expect(page.get_by_role("status")).to_have_text("Task saved.")
    await expect(heading).to_contain_text("monthly-report-eu")
    await page.get_by_role("link", name="Edit").click()
    changed = await api(running, key, "PATCH", f"/v1/tasks/{task_id}", {"payload": {"changed": "elsewhere"}})
    assert changed.status_code == 200
    await page.get_by_label("Name").fill("lost-edit")
    await page.get_by_role("button", name="Save").click()
    await expect(page.get_by_role("alert")).to_contain_text("changed since this form was opened")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).json()["name"] == "monthly-report-eu"

    # Delete
    await page.goto(f"/console/tasks/{task_id}")
    await page.get_by_role("link", name="Delete").click()
    await page.get_by_role("button", name="Delete").click()
    await expect(page.get_by_role("status")).to_have_text("Task deleted.")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).status_code == 404


async def test_trigger_now_with_a_payload_sends_it_for_that_flow_only(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    # Given a task with its own payload, opened in the console
    _, key = await running.create_app("pricing")
    task_id = await _create_task(
        running,
        key,
        {"name": "reprice", "schedule": YEARLY, "callback": {"url": receiver.url("/pricing")}, "payload": {"sku": 7}},
    )
    page = await context.new_page()
    await sign_in(page, key)
    await page.goto(f"/console/tasks/{task_id}")

    # When "Trigger now" is confirmed with another payload, typed with the keyboard alone
    await page.get_by_role("link", name="Trigger now").click()
    payload = page.get_by_label("Payload for this flow (JSON)")
    await expect(payload).to_be_empty()
    await expect(page.locator("main form")).to_contain_text("Empty: the task's own payload is sent")
    await page.keyboard.press("Shift+Tab")  # the button has the focus; the payload comes before it
    await expect(payload).to_be_focused()
    await page.keyboard.type('{"sku": 7, "price": 9.5}')
    await screenshot(page, screenshots, "trigger-payload")
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("button", name="Trigger now")).to_be_focused()
    await page.keyboard.press("Enter")

    # Then the receiver gets that payload for this flow, and the task keeps its own
    await expect(page.get_by_role("status")).to_have_text("Task triggered.")
    flow_id = await _wait_for_flow_status(running, key, task_id, "delivered")
    assert [json.loads(r.body)["payload"] for r in receiver.for_flow(flow_id)] == [{"sku": 7, "price": 9.5}]
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).json()["payload"] == {"sku": 7}

    # And an empty payload sends the task's own
    await page.get_by_role("link", name="Trigger now").click()
    await page.get_by_role("button", name="Trigger now").click()
    await expect(page.get_by_role("status")).to_have_text("Task triggered.")
    plain_id = await _wait_for_flow_status(running, key, task_id, "delivered")
    assert plain_id != flow_id
    assert [json.loads(r.body)["payload"] for r in receiver.for_flow(plain_id)] == [{"sku": 7}]


async def test_trigger_now_with_a_bad_payload_says_so_on_the_page_and_fires_nothing(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    _, key = await running.create_app("pricing-bad")
    task_id = await _create_task(
        running, key, {"name": "reprice-bad", "schedule": YEARLY, "callback": {"url": receiver.url("/pricing-bad")}}
    )
    page = await context.new_page()
    await sign_in(page, key)
    await page.goto(f"/console/tasks/{task_id}/confirm?action=trigger")
    payload = page.get_by_label("Payload for this flow (JSON)")
    alert = page.get_by_role("alert")

    # JSON that does not parse: refused on the page, naming the field, the text kept to correct
    await payload.fill('{"sku": ')
    async with page.expect_response(f"**/console/tasks/{task_id}/trigger") as answer:
        await page.get_by_role("button", name="Trigger now").click()
    assert (await answer.value).status == 422
    await expect(alert).to_contain_text("payload: not valid JSON")
    await expect(payload).to_have_value('{"sku": ')
    await expect(payload).to_be_focused()
    await expect(payload).to_have_attribute("aria-invalid", "true")

    # A payload the API refuses (deeper than limits.max_json_depth): its message, naming the field
    await payload.fill("[" * 70 + "]" * 70)
    await page.get_by_role("button", name="Trigger now").click()
    await expect(alert).to_contain_text("payload: nests deeper than")
    await payload.fill('{"price": 99999999999999999999999}')  # beyond 64 bits: refused, not rounded
    await page.get_by_role("button", name="Trigger now").click()
    await expect(alert).to_contain_text("payload: integer 99999999999999999999999 is beyond 64 bits")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("Trigger now")

    # A callback that sends no payload (a GET) refuses it, also when it changed after the form was opened
    changed = await api(
        running, key, "PATCH", f"/v1/tasks/{task_id}", {"callback": {"url": receiver.url("/p"), "method": "GET"}}
    )
    assert changed.status_code == 200, changed.text
    await payload.fill('{"sku": 1}')
    await page.get_by_role("button", name="Trigger now").click()
    await expect(alert).to_contain_text("payload: this task's callback sends no payload")
    await expect(payload).to_have_count(0)  # the page, shown again, no longer offers it
    await expect(page.locator("main")).to_contain_text("so no payload can be given here")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}/flows")).json()["items"] == []


async def test_an_edit_with_json_the_api_would_refuse_is_named_on_the_form_not_a_500(
    running: RunningNode, receiver: Receiver, context: BrowserContext
) -> None:
    _, key = await running.create_app("edit-limits")
    task_id = await _create_task(
        running, key, {"name": "edit-limits", "schedule": YEARLY, "callback": {"url": receiver.url("/edit-limits")}}
    )
    page = await context.new_page()
    await sign_in(page, key)
    await page.goto(f"/console/tasks/{task_id}/edit")
    payload = page.get_by_label("Payload (JSON)")

    for text, says in (
        ('{"price": 99999999999999999999999}', "payload: integer 99999999999999999999999 is beyond 64 bits"),
        ("[" * 70 + "]" * 70, "payload: nests deeper than"),
        ('{"price": ', "payload: not valid JSON"),
    ):
        await payload.fill(text)
        async with page.expect_response(f"**/console/tasks/{task_id}/edit") as answer:
            await page.get_by_role("button", name="Save").click()
        assert (await answer.value).status == 422, text
        await expect(page.get_by_role("alert")).to_contain_text(says)
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).json()["payload"] is None


async def test_redrive_a_dead_letter(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    # Given a task whose only attempt was refused: a dead letter
    _, key = await running.create_app("ledger")
    receiver.script("/ledger", Reply(500))  # then 200
    task_id = await _create_task(
        running,
        key,
        {
            "name": "settle-batch-42",
            "schedule": {"kind": "delay", "delay_ms": 0},
            "callback": {"url": receiver.url("/ledger"), "max_attempts": 1},
        },
    )
    flow_id = await _wait_for_flow_status(running, key, task_id, "dead")
    page = await context.new_page()
    await sign_in(page, key)

    # The flow search finds it among the app's dead flows
    await page.get_by_role("link", name="Flows", exact=True).click()
    await page.get_by_label("Status").select_option("dead")
    await page.get_by_role("button", name="Search").click()
    await expect(page.locator("table tbody tr")).to_have_count(1)
    await expect(page.locator("table")).to_contain_text(task_id)
    await screenshot(page, screenshots, "flows")

    # When it is chosen on the dead letters page and the redrive is confirmed
    await page.get_by_role("link", name="Dead letters").click()
    await expect(page.locator("table")).to_contain_text(flow_id)
    await expect(page.locator("table")).to_contain_text("HTTP 500")
    await page.get_by_label(f"Redrive {flow_id}").check()
    await screenshot(page, screenshots, "dead-letters")
    await page.get_by_role("button", name="Redrive selected").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Redrive 1 dead letter?")
    await page.get_by_role("button", name="Redrive").click()

    # Then it is back to pending, sent again, and delivered
    await expect(page.get_by_role("status")).to_contain_text("back to pending")
    await _wait_for_flow_status(running, key, task_id, "delivered")
    await page.goto(f"/console/flows/{flow_id}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("delivered")
    assert [r.attempt for r in receiver.for_flow(flow_id)] == [1, 2]


async def test_an_app_key_gets_404_for_another_apps_pages_and_cannot_act_on_its_tasks(
    running: RunningNode, receiver: Receiver, context: BrowserContext
) -> None:
    other, other_key = await running.create_app("other")
    foreign_task = await _create_task(
        running, other_key, {"name": "theirs", "schedule": YEARLY, "callback": {"url": receiver.url("/other")}}
    )
    trigger = await api(running, other_key, "POST", f"/v1/tasks/{foreign_task}/trigger")
    foreign_flow = trigger.json()["id"]
    _, key = await running.create_app("mine")
    page = await context.new_page()
    await sign_in(page, key)
    csrf = await _csrf_of(page)

    for path in (
        f"/console/tasks/{foreign_task}",
        f"/console/tasks/{foreign_task}/edit",
        f"/console/tasks/{foreign_task}/confirm?action=delete",
        f"/console/flows/{foreign_flow}",
        f"/console/tasks?app={other.id}",
        f"/console/dead-letters?app={other.id}",
        f"/console/apps/{other.id}",
        "/console/apps",
        "/console/cluster",
    ):
        answer = await page.goto(path)
        assert answer is not None and answer.status == 404, path
        await expect(page.get_by_role("heading", level=1)).to_have_text("Not found")

    for action in ("pause", "trigger", "delete"):
        refused = await page.request.post(f"/console/tasks/{foreign_task}/{action}", form={"csrf": csrf})
        assert refused.status == 404, action
    redrive = await page.request.post(
        "/console/dead-letters/redrive", form={"csrf": csrf, "app": other.id, "flow_ids": foreign_flow}
    )
    assert redrive.status == 404
    theirs = (await api(running, other_key, "GET", f"/v1/tasks/{foreign_task}")).json()
    assert theirs["status"] == "active"


async def test_a_post_without_the_csrf_token_is_refused(
    running: RunningNode, receiver: Receiver, context: BrowserContext
) -> None:
    _, key = await running.create_app("guarded")
    task_id = await _create_task(
        running, key, {"name": "guarded", "schedule": YEARLY, "callback": {"url": receiver.url("/guarded")}}
    )
    page = await context.new_page()
    await sign_in(page, key)

    missing = await page.request.post(f"/console/tasks/{task_id}/pause", form={})
    wrong = await page.request.post(f"/console/tasks/{task_id}/delete", form={"csrf": "not-the-token"})
    foreign_signin = await page.request.post("/console/signin", form={"key": key})

    assert (missing.status, wrong.status, foreign_signin.status) == (403, 403, 403)
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).json()["status"] == "active"


async def test_the_admin_creates_an_app_whose_key_is_shown_once_rotates_it_and_sees_the_cluster(
    running: RunningNode, context: BrowserContext, screenshots: Path
) -> None:
    page = await context.new_page()
    await sign_in(page, ADMIN_KEY)

    # Create: the key and the secret are on the answer page, and they work
    await page.get_by_role("link", name="Apps").click()
    await page.get_by_label("Name").fill("payments")
    await page.get_by_label("Allowed callback hosts").fill("127.0.0.1")
    await page.get_by_role("button", name="Create app").click()
    api_key = await page.locator("#api-key").inner_text()
    secret = await page.locator("#signing-secret").inner_text()
    app_id = await page.locator("#app-id").inner_text()
    assert (await api(running, api_key, "GET", "/v1/app")).status_code == 200
    await screenshot(page, screenshots, "app-created")

    # The app's page never shows them again
    await page.get_by_role("link", name="Open the app").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("payments")
    content = await page.content()
    assert api_key not in content and secret not in content
    await page.get_by_label("Callbacks per second").fill("250")
    await page.get_by_role("button", name="Save").click()
    await expect(page.get_by_role("status")).to_have_text("Limits saved.")
    await screenshot(page, screenshots, "app")

    # Rotate the API key (confirmed): the new one is shown once and the old one stops
    await page.get_by_role("link", name="Rotate API key").click()
    await page.get_by_role("button", name="Rotate").click()
    new_key = await page.locator("#api-key").inner_text()
    assert new_key != api_key
    assert (await api(running, api_key, "GET", "/v1/app")).status_code == 401
    assert (await api(running, new_key, "GET", "/v1/app")).status_code == 200

    # The admin sees every app, any app's pages, and the cluster
    await page.goto("/console/")
    await expect(page.locator("table")).to_contain_text("payments")
    await expect(page.locator("tfoot")).to_contain_text("Every app")
    await screenshot(page, screenshots, "overview-admin")
    await page.get_by_role("link", name="payments").click()
    await expect(page.get_by_role("heading", level=2).first).to_contain_text("payments")
    await page.get_by_role("link", name="Apps").click()
    await expect(page.locator("table")).to_contain_text(app_id)
    await screenshot(page, screenshots, "apps")
    await page.get_by_role("link", name="Cluster").click()
    await expect(page.locator("main")).to_contain_text("embedded")
    await expect(page.locator("main")).to_contain_text(running.node.node_id)
    await screenshot(page, screenshots, "cluster")


async def test_the_admin_disables_enables_and_deletes_an_app_confirmed(
    running: RunningNode, browser: Browser, context: BrowserContext
) -> None:
    app, key = await running.create_app("retired")
    task_id = await _create_task(
        running, key, {"name": "old", "schedule": YEARLY, "callback": {"url": "https://example.com/"}}
    )
    as_app = await browser.new_context(base_url=running.base_url)  # the app's own console session
    app_page = await as_app.new_page()
    await sign_in(app_page, key)
    page = await context.new_page()
    await sign_in(page, ADMIN_KEY)
    await page.goto(f"/console/apps/{app.id}")

    # Disable: the app's key and its console session are refused
    await page.get_by_role("link", name="Disable").click()
    await page.get_by_role("button", name="Disable").click()
    await expect(page.get_by_role("status")).to_have_text("App disabled.")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).status_code == 403
    refused = await app_page.goto("/console/tasks")
    assert refused is not None and refused.status == 403
    await expect(app_page.get_by_role("alert")).to_contain_text("disabled")

    # Enable: both work again
    await page.get_by_role("link", name="Enable").click()
    await page.get_by_role("button", name="Enable").click()
    await expect(page.get_by_role("status")).to_have_text("App enabled.")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).status_code == 200
    await as_app.close()

    # Delete: only with the app's id typed again
    await page.get_by_role("link", name="Delete").click()
    await page.get_by_label("Type the app's id").fill("not-this-one")
    await page.get_by_role("button", name="Delete").click()
    await expect(page.get_by_role("alert")).to_contain_text(f"Type the app's id, {app.id}")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).status_code == 200
    await page.get_by_label("Type the app's id").fill(app.id)
    await page.get_by_role("button", name="Delete").click()
    await expect(page.get_by_role("status")).to_have_text("App deleted.")
    assert (await api(running, key, "GET", f"/v1/tasks/{task_id}")).status_code == 401
    assert await running.node.store.get_task(int(task_id)) is None


async def test_on_a_phone_the_pages_fit_the_screen(
    running: RunningNode, receiver: Receiver, context: BrowserContext, screenshots: Path
) -> None:
    _, key = await running.create_app("mobile")
    task_id = await _create_task(
        running, key, {"name": "phone-check", "schedule": YEARLY, "callback": {"url": receiver.url("/mobile")}}
    )
    page = await context.new_page()
    await page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    await sign_in(page, key)
    for path, name in ((f"/console/tasks/{task_id}", "phone-task"), ("/console/tasks", "phone-tasks")):
        await page.goto(path)
        # nothing is wider than the screen: no sideways scrolling of the page
        assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        await screenshot(page, screenshots, name, full_page=False)
    # keyboard: the first Tab reaches the skip link, which leads to the page's content
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Skip to content"


async def test_a_target_made_through_the_api_is_listed_opened_and_deleted_never_showing_its_credential(
    running: RunningNode, receiver: Receiver, browser: Browser, context: BrowserContext, screenshots: Path
) -> None:
    # Given a target made through the API, with a credential, and a task naming it
    app, key = await running.create_app("orders")
    credential = "Bearer console-target-credential-5d1e"
    created = await api(
        running,
        key,
        "POST",
        "/v1/targets",
        {
            "name": "orders-hook",
            "protocol": "http",
            "settings": {"url": receiver.url("/orders"), "method": "PUT", "headers": {"x-team": "orders"}},
            "retry": {"max_attempts": 5},
            "credentials": {"authorization": credential},
        },
    )
    assert created.status_code == 201, created.text
    task_id = await _create_task(
        running, key, {"name": "close-order-17", "schedule": YEARLY, "callback": {"target": "orders-hook"}}
    )
    page = await context.new_page()
    await sign_in(page, key)

    # The app's navigation lists it: protocol, destination, version, retry policy
    await page.get_by_role("link", name="Targets", exact=True).click()
    rows = page.locator("table tbody tr")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("orders-hook")
    await expect(rows.first).to_contain_text(f"PUT {receiver.url('/orders')}")
    await expect(rows.first).to_contain_text("max_attempts 5")
    await screenshot(page, screenshots, "targets")

    # Its page shows its settings, the credential only as set, and the task naming it
    await page.get_by_role("link", name="orders-hook").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("orders-hook")
    await expect(page.locator("main pre")).to_contain_text('"x-team": "orders"')
    await expect(page.locator("#credentials")).to_have_text(re.compile(r"^\s*authorization\s*set\s*$"))
    await expect(page.locator("#naming")).to_contain_text("1")
    assert "console-target-credential" not in await page.content()
    await screenshot(page, screenshots, "target")

    # The task's page names it, linked
    await page.goto(f"/console/tasks/{task_id}")
    await expect(page.locator("p.targets")).to_have_text("target: orders-hook")
    await page.locator("p.targets").get_by_role("link", name="orders-hook").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text("orders-hook")

    # Another app's session gets 404 for it, and cannot delete it; the admin sees it under its app
    other_app = await browser.new_context(base_url=running.base_url)
    other_page = await other_app.new_page()
    _, other_key = await running.create_app("not-orders")
    await sign_in(other_page, other_key)
    for path in (
        "/console/targets/orders-hook",
        f"/console/targets/orders-hook?app={app.id}",
        f"/console/targets/orders-hook/confirm?app={app.id}",
        f"/console/targets?app={app.id}",
    ):
        answer = await other_page.goto(path)
        assert answer is not None and answer.status == 404, path
    refused = await other_page.request.post(
        "/console/targets/orders-hook/delete", form={"csrf": await _csrf_of(other_page), "app": app.id}
    )
    assert refused.status == 404
    await other_app.close()
    admin = await browser.new_context(base_url=running.base_url)
    admin_page = await admin.new_page()
    await sign_in(admin_page, ADMIN_KEY)
    await admin_page.goto(f"/console/targets?app={app.id}")
    await admin_page.get_by_role("link", name="orders-hook").click()
    await expect(admin_page.get_by_role("heading", level=1)).to_contain_text("orders-hook")
    await admin.close()

    # Delete is confirmed, and refused with a clear message while the task names it
    await page.get_by_role("link", name="Delete").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text(re.compile("Delete the target .orders-hook.\\?"))
    await page.get_by_role("button", name="Delete").click()
    await expect(page.get_by_role("alert")).to_contain_text("1 task that can still fire names this target")
    assert (await api(running, key, "GET", "/v1/targets/orders-hook")).status_code == 200

    # Once the task is gone, the same confirmation deletes it
    assert (await api(running, key, "DELETE", f"/v1/tasks/{task_id}")).status_code == 204
    await page.get_by_role("button", name="Delete").click()
    await expect(page.get_by_role("status")).to_have_text("Target deleted.")
    await expect(page.locator("main")).to_contain_text("No target yet")
    assert (await api(running, key, "GET", "/v1/targets/orders-hook")).status_code == 404
