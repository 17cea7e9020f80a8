"""The on-call views in a real browser: pools and executors with the empty-pool warning (also on the
overview), the overview refreshing its figures in place with charts on a UTC time axis, every node's
runtime figures on the cluster page, and an error page inside the console
(tjobs/console/pages_pools.py, pages_overview.py, pages_cluster.py, error_pages.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, expect

from testkit import RunningNode
from tests.console.conftest import ADMIN_KEY, api, screenshot, sign_in
from tests.empty_pools import starve_pool
from tjobs.console import pages_overview

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_the_pools_page_shows_live_executors_and_an_empty_pool_is_warned_about_there_and_on_the_overview(
    running: RunningNode, context: BrowserContext, screenshots: Path
) -> None:
    app, key = await running.create_app("pools-browser")
    for executor in ({"id": "web-7", "address": "http://127.0.0.1:9001/", "zone": "eu-1", "ttl_s": 30},
                     {"id": "web-8", "address": "http://127.0.0.1:9002/", "zone": "eu-2", "ttl_s": 30}):  # fmt: skip
        assert (await api(running, key, "POST", "/v1/pools/workers/executors", executor)).status_code == 201
    await starve_pool(running, key, app.id, "reports")

    page = await context.new_page()
    await sign_in(page, key)
    await expect(page.get_by_role("alert")).to_contain_text("Pool reports has no live executor")
    await page.get_by_role("link", name="Pools", exact=True).click()
    await expect(page.get_by_role("heading", name="workers")).to_be_visible()
    rows = page.get_by_role("table", name="Live executors of pool workers").locator("tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0)).to_contain_text("web-7")
    await expect(rows.nth(0)).to_contain_text("eu-1")
    await expect(rows.nth(0)).to_contain_text(" ago")  # the last heartbeat's age
    await expect(rows.nth(0)).to_contain_text("(TTL 30 s)")  # the lease's expiry
    await expect(page.get_by_role("alert")).to_contain_text("Pool reports has no live executor")
    await screenshot(page, screenshots, "pools")


async def test_the_overview_refreshes_its_figures_in_place_and_its_charts_have_a_utc_time_axis(
    running: RunningNode, context: BrowserContext, screenshots: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages_overview, "REFRESH_S", 1)  # the page asks for a refresh every second
    app, key = await running.create_app("overview-refresh")
    page = await context.new_page()
    await sign_in(page, key)
    charts = page.locator("figure svg.chart")
    await expect(charts).to_have_count(4)
    await expect(charts.first.locator("text").last).to_have_text("UTC")
    await expect(page.locator("main")).to_contain_text("they refresh every 1 s while this page is open")
    await page.evaluate("window.notReloaded = true")

    await starve_pool(running, key, app.id, "late-pool")  # a change the open page has not seen yet
    await expect(page.get_by_role("alert")).to_contain_text("Pool late-pool has no live executor")
    assert await page.evaluate("window.notReloaded === true")  # in place: the page was not loaded again
    await screenshot(page, screenshots, "overview-empty-pool")


async def test_the_admin_sees_every_nodes_runtime_figures_on_the_cluster_page(
    running: RunningNode, context: BrowserContext, screenshots: Path
) -> None:
    page = await context.new_page()
    await sign_in(page, ADMIN_KEY)
    await page.get_by_role("link", name="Cluster").click()
    figures = page.get_by_role("table", name="Runtime figures, one column per node")
    await expect(figures).to_contain_text(f"{running.node.node_id} (this node)")
    for label in ("Published", "Wheel size", "Fire backlog", "Callbacks in flight", "Sync lag"):
        await expect(figures.get_by_role("rowheader", name=label)).to_be_visible()
    await screenshot(page, screenshots, "cluster-node-figures")


async def test_an_unknown_console_page_is_an_error_page_in_the_console_with_a_way_back(
    running: RunningNode, context: BrowserContext
) -> None:
    _, key = await running.create_app("error-page")
    page = await context.new_page()
    await sign_in(page, key)
    answer = await page.goto("/console/no-such-page")
    assert answer is not None and answer.status == 404
    await expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    await expect(page.get_by_role("navigation", name="Main")).to_be_visible()  # the console's layout
    await page.get_by_role("link", name="Back to the overview").click()
    await page.wait_for_url("**/console/")
    await expect(page.get_by_role("heading", name="Overview")).to_be_visible()
