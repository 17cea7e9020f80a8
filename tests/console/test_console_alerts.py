"""The console's alerts page in a real browser: an app sees what fires, its rules and its channels
(never a channel's secret); the admin sees the cluster's rules beside every app's
(tjobs/console/pages_alerts.py, templates/alerts.html)."""

from __future__ import annotations

import pytest
from playwright.async_api import BrowserContext, expect

from testkit import RunningNode
from tests.console.conftest import ADMIN_KEY, api, sign_in
from tjobs.model import SloCounts, SloMinute

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_an_app_sees_what_fires_and_the_admin_sees_the_cluster_rules_too(
    running: RunningNode, context: BrowserContext
) -> None:
    app, key = await running.create_app("alerting")
    made = await api(running, key, "POST", "/v1/alerts/channels", {
        "name": "ops-hook", "kind": "webhook", "settings": {"url": "https://example.com/hook"},
    })  # fmt: skip
    assert made.status_code == 201, made.text
    secret = made.json()["settings"]["secret"]
    rule = {"name": "dlq", "kind": "dead_letters", "params": {"threshold": 2}, "channels": [made.json()["id"]]}
    assert (await api(running, key, "POST", "/v1/alerts/rules", rule)).status_code == 201
    cluster_rule = {"name": "db-down", "kind": "database_unhealthy"}
    assert (await api(running, ADMIN_KEY, "POST", "/v1/alerts/rules", cluster_rule)).status_code == 201
    await running.node.alerts.evaluator.stop()  # the node's own pass stays out of it: the test evaluates
    now_ms = running.node.clock.now_ms()
    await running.node.store.add_slo_minutes("n-test", [SloMinute(app.id, now_ms // 60_000, SloCounts(dead=5))])
    await running.node.alerts.evaluator.evaluate(now_ms)

    page = await context.new_page()
    await sign_in(page, key)
    await page.get_by_role("link", name="Alerts").click()
    await expect(page.get_by_role("heading", name="Firing now")).to_be_visible()
    main = page.locator("main")
    await expect(main).to_contain_text("5 dead letters in 5 min (threshold 2)")
    await expect(main).to_contain_text("ops-hook")  # the rule's channel, by name
    await expect(main).to_contain_text("https://example.com/hook")
    await expect(main).not_to_contain_text("db-down")  # the cluster's rule is the admin's
    assert secret not in await page.content()

    admin = await context.new_page()
    await sign_in(admin, ADMIN_KEY)
    await admin.goto("/console/alerts")
    await expect(admin.locator("main")).to_contain_text("db-down")
    await expect(admin.locator("main")).to_contain_text("dlq")
