"""Console fixtures: one real node (SQLite shards, the full scheduler) and one headless browser per module.

The browser is Debian's ``chromium`` driven by Playwright (``scripts/browser.sh`` installs it; Playwright's
own browser builds are never downloaded). Without it the tests FAIL: a console nobody opened is untested.

Screenshots: :func:`screenshot` always takes them (into the test's temporary folder); with
``TJOBS_CONSOLE_SCREENSHOTS=docs/console`` it writes them there instead, for docs/console.md.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from testkit import RunningNode, run_node
from tests.receiver import Receiver
from tjobs.settings import load_settings
from tjobs.stores.migrate import migrate

CHROMIUM = Path("/usr/bin/chromium")
ADMIN_KEY = "console-tests-admin-key-0123456789abcdef"
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
ROOT = Path(__file__).resolve().parents[2]
FAST_SETTINGS: dict[str, Any] = {  # flows arrive within a second or two, retries are quick
    "scheduler": {"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3},
    "compensator": {"interval_s": 0.5, "grace_s": 2.0},
    "callbacks": {"backoff_base_ms": 100, "backoff_max_ms": 1000, "timeout_ms": 2000},
    "allow_loopback_callbacks": True,
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningNode]:
    data = tmp_path_factory.mktemp("console-node") / "data"
    settings = load_settings(
        None,
        storage={"urls": [f"sqlite+aiosqlite:///{data}"], "topology": "1x2x4"},
        api={"admin_key": ADMIN_KEY},
        **FAST_SETTINGS,
    )
    await migrate(settings.storage)
    async with run_node(settings) as handle:
        yield handle


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as started:
        yield started


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's chromium; its absence fails the tests (never a skip)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/browser.sh (apt-get install chromium)", pytrace=False)
    return CHROMIUM


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(chromium), headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser, running: RunningNode) -> AsyncIterator[BrowserContext]:
    """A fresh browser profile (no cookies) with the node as its base URL."""
    opened = await browser.new_context(base_url=running.base_url, viewport=LAPTOP)  # type: ignore[arg-type]
    opened.set_default_timeout(15_000)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    wanted = os.environ.get("TJOBS_CONSOLE_SCREENSHOTS")
    folder = (ROOT / wanted) if wanted else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def screenshot(page: Page, folder: Path, name: str, *, full_page: bool = True) -> Path:
    path = folder / f"{name}.png"
    await page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 0
    return path


async def sign_in(page: Page, key: str) -> None:
    await page.goto("/console/signin")
    await page.get_by_label("API key or admin key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/console/")


async def api(running: RunningNode, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
        return await client.request(method, path, json=body)
