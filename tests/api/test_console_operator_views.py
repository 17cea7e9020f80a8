"""The console views an on-call operator reaches for, served by one in-process node on the in-memory store
(no browser: tests/console has one browser test per page): pools and executors with the empty-pool
warning (also on the overview), the overview's refreshed figures, every node's runtime figures on the
cluster page, and HTML error pages for whatever goes wrong under /console while /v1 keeps its JSON."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from testkit import RunningNode
from tests.api.conftest import ADMIN_KEY
from tests.empty_pools import starve_pool
from tjobs.console.session import COOKIE_NAME

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(scope="module")
def api_storage() -> Iterator[dict[str, Any]]:
    yield {"urls": ["memory://"], "topology": "2x2x4"}


@contextlib.asynccontextmanager
async def session_of(node: RunningNode, key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client signed in to the console with ``key`` (an app key or the admin key)."""
    async with httpx.AsyncClient(base_url=node.base_url) as client:
        form = await client.get("/console/signin")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        reply = await client.post("/console/signin", data={"csrf": token.group(1), "key": key, "next": "/console/"})
        assert reply.status_code == 303 and reply.cookies.get(COOKIE_NAME), reply.text[:300]
        client.cookies.set(COOKIE_NAME, reply.cookies[COOKIE_NAME])
        yield client


async def test_the_pools_page_lists_live_executors_and_warns_of_an_empty_pool_on_it_and_the_overview(
    api_node: RunningNode,
) -> None:
    app, key = await api_node.create_app("pools-page")
    async with httpx.AsyncClient(base_url=api_node.base_url, headers={"authorization": f"Bearer {key}"}) as api:
        executor = {"id": "web-7", "address": "http://127.0.0.1:9001/", "zone": "eu-1", "ttl_s": 30}
        assert (await api.post("/v1/pools/workers/executors", json=executor)).status_code == 201
    await starve_pool(api_node, key, app.id, "reports")

    async with session_of(api_node, key) as console:
        pools = await console.get("/console/pools")
        assert pools.status_code == 200
        assert "<code>web-7</code>" in pools.text and "eu-1" in pools.text and "(TTL 30 s)" in pools.text
        assert re.search(r"[\d.]+ (ms|s) ago", pools.text)  # the last heartbeat's age
        assert "Pool <strong>reports</strong> has no live executor" in pools.text
        overview = await console.get("/console/")
        assert "Pool <strong>reports</strong> has no live executor" in overview.text
        assert 'data-refresh="/console/overview/figures?window=1h"' in overview.text

        # an executor in the pool ends the warning
        async with httpx.AsyncClient(base_url=api_node.base_url, headers={"authorization": f"Bearer {key}"}) as api:
            reports = {"id": "rep-1", "address": "http://127.0.0.1:9002/"}
            assert (await api.post("/v1/pools/reports/executors", json=reports)).status_code == 201
        assert "has no live executor" not in (await console.get("/console/pools")).text
        assert "has no live executor" not in (await console.get("/console/")).text


async def test_the_overviews_figures_refresh_as_a_fragment_with_charts_on_a_utc_time_axis(
    api_node: RunningNode,
) -> None:
    _, key = await api_node.create_app("overview-refresh")
    async with session_of(api_node, key) as console:
        fragment = await console.get("/console/overview/figures", params={"window": "5m"})
        assert fragment.status_code == 200 and fragment.headers["content-type"].startswith("text/html")
        assert "<html" not in fragment.text and "Figures as of" in fragment.text
        assert fragment.text.count(">UTC</text>") == 4  # each chart's time axis says its zone
        assert fragment.headers["content-security-policy"].startswith("default-src 'none'; script-src 'self'")
        refused = await console.get("/console/overview/figures", params={"window": "2m"})
        assert refused.status_code == 422 and "window" in refused.text and "<html" in refused.text
    async with httpx.AsyncClient(base_url=api_node.base_url) as anonymous:
        signed_out = await anonymous.get("/console/overview/figures")
        assert signed_out.status_code == 303 and "/console/signin" in signed_out.headers["location"]


async def test_the_cluster_page_shows_every_nodes_published_runtime_figures(api_node: RunningNode) -> None:
    await api_node.node.figures.run_once()
    async with session_of(api_node, ADMIN_KEY) as admin:
        shown = await admin.get("/console/cluster")
    assert shown.status_code == 200
    figures = shown.text[shown.text.index('id="node-figures"') :]
    assert f"<code>{api_node.node.node_id}</code> (this node)" in figures
    for label in ("Wheel size", "Fire backlog", "Delivery backlog", "Callbacks in flight", "Sync lag", "Published"):
        assert f">{label}" in figures
    assert api_node.node.node_id in await api_node.node.coordinator.node_figures()


async def test_console_errors_are_pages_in_the_console_layout_and_v1_errors_stay_json(
    api_node: RunningNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, key = await api_node.create_app("error-pages")
    async with httpx.AsyncClient(base_url=api_node.base_url) as anonymous:
        unknown = await anonymous.get("/console/nothing/here")
        assert unknown.status_code == 404 and "<h1>Not found</h1>" in unknown.text and "Sign out" not in unknown.text
        api = await anonymous.get("/v1/no-such-route")
        assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"
        assert (await anonymous.put("/v1/tasks")).json()["error"]["code"] == "method_not_allowed"
    async with session_of(api_node, key) as console:
        for path, status in (
            ("/console/no-such-page", 404),
            ("/console/tasks/123456789", 404),  # a task that does not exist
            ("/console/flows/123456789-1780000000000", 404),
            ("/console/cluster", 404),  # the admin's page does not exist for an app session
        ):
            reply = await console.get(path)
            assert reply.status_code == status, (path, reply.text[:300])
            assert reply.headers["content-type"].startswith("text/html"), path
            assert 'href="/console/">Back to the overview</a>' in reply.text and "Sign out" in reply.text, path

        refused = await console.post("/console/tasks/1/pause", data={})  # no CSRF token
        assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/html")
        wrong_method = await console.put("/console/pools")
        assert wrong_method.status_code == 405 and "<h1>Error 405</h1>" in wrong_method.text

        async def broken(*args: Any) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(api_node.node.accounts, "session", broken)  # every page reads the session first
        failed = await console.get("/console/pools")
        assert failed.status_code == 500 and failed.headers["content-type"].startswith("text/html")
        assert "<h1>Error 500</h1>" in failed.text and "a bug" not in failed.text
