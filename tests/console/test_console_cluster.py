"""The console's cluster page (admin) in a real browser: the shard map (each logical database's server
and the map's epoch) and the moves of logical databases, readable without colour and on a phone,
never showing a credential (tjobs/console/pages_cluster.py, templates/cluster.html).

The node runs on SQLite, whose databases never move; the moves shown are handed to the page by the
store's read of the move record (what a MariaDB deployment's record would hold)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, expect

from testkit import RunningNode
from tests.console.conftest import ADMIN_KEY, PHONE, screenshot, sign_in
from tjobs.stores.contracts import MoveRow

pytestmark = pytest.mark.asyncio(loop_scope="module")

RECORDED_MOVES = [
    MoveRow(1, "mysql+asyncmy://root:s3cret@db-1:3306", "ops:pw@db-2:3306", "catching_up", 1, 0,
            rows_copied=12_345, lag_rows=67, started_at_ms=1_780_000_000_000),
    MoveRow(2, "db-1:3306", "db-3:3306", "done", 1, 3, rows_copied=500, started_at_ms=1_780_000_000_000,
            finished_at_ms=1_780_000_060_000, cut_over_pause_ms=840),
]  # fmt: skip


async def test_the_admin_sees_the_shard_map_and_the_moves_on_a_laptop_and_a_phone(
    running: RunningNode, context: BrowserContext, screenshots: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard_map = await running.node.coordinator.read_shard_map()
    assert shard_map is not None
    page = await context.new_page()
    await sign_in(page, ADMIN_KEY)

    # The map: one row per logical database with its server, and the epoch
    await page.get_by_role("link", name="Cluster").click()
    await expect(page.get_by_role("heading", name="Shard map")).to_be_visible()
    await expect(page.locator("main")).to_contain_text(f"Map epoch {shard_map.epoch}")
    rows = page.locator("#shard-map tbody tr")
    await expect(rows).to_have_count(len(shard_map.placement))
    for database, server in enumerate(shard_map.placement):
        await expect(rows.nth(database)).to_contain_text(str(database))
        await expect(rows.nth(database)).to_contain_text(server)
        await expect(rows.nth(database)).to_contain_text("no")  # not moving
    await expect(page.locator("main")).to_contain_text("No move is in progress")

    # Recorded moves: step, rows, lag, pause and outcome in words; servers without credentials
    async def recorded() -> list[MoveRow]:
        return RECORDED_MOVES

    monkeypatch.setattr(running.node.store, "read_shard_moves", recorded)
    await page.reload()
    moves = page.locator("#shard-moves tbody tr")
    await expect(moves).to_have_count(2)
    await expect(moves.nth(0)).to_contain_text("catching up")
    await expect(moves.nth(0)).to_contain_text("12,345")
    await expect(moves.nth(0)).to_contain_text("67")
    await expect(moves.nth(0)).to_contain_text("in progress")
    await expect(moves.nth(1)).to_contain_text("0.84 s")
    await expect(moves.nth(1)).to_contain_text("moved (old copy kept until drop-old)")
    await expect(page.locator("#shard-map tbody tr").nth(1)).to_contain_text("to db-2:3306, step: catching up")
    content = await page.content()
    assert "s3cret" not in content and "root:" not in content and "ops:pw" not in content
    await screenshot(page, screenshots, "cluster-shard-map")

    # On a phone: every column labelled in its block, nothing wider than the screen
    await page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    label = await moves.nth(0).locator("td").nth(4).evaluate("cell => getComputedStyle(cell, '::before').content")
    assert label == '"Rows copied"'
    await moves.nth(0).scroll_into_view_if_needed()
    await screenshot(page, screenshots, "phone-cluster-moves", full_page=False)


async def test_an_app_key_does_not_see_the_cluster_page(running: RunningNode, context: BrowserContext) -> None:
    _, key = await running.create_app("no-cluster")
    page = await context.new_page()
    await sign_in(page, key)
    answer = await page.goto("/console/cluster")
    assert answer is not None and answer.status in (403, 404)
    assert "Shard map" not in await page.content()
