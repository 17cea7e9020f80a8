"""Limits: each default refuses just past its bound with a field-named 422, and each is configurable.

Validation does not depend on the store, so these run on the memory twin only.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from testkit import run_node
from tests.api.conftest import task_body
from tjobs.settings import load_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

DAY_MS = 86_400_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _client(limits: dict[str, Any], **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    config = load_settings(None, storage={"urls": ["memory://"], "topology": "1x1x4"}, limits=limits, **settings)
    async with run_node(config) as running:
        _, key = await running.create_app("limits")
        async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
            yield client


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async for made in _client({}, allow_loopback_callbacks=True):
        yield made


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def tight() -> AsyncIterator[httpx.AsyncClient]:
    limits = {
        "max_payload_bytes": 100,
        "max_url_chars": 40,
        "max_headers": 2,
        "min_period_ms": 10_000,
        "max_future_days": 1,
        "max_active_tasks_per_app": 3,
    }
    async for made in _client(limits, allow_loopback_callbacks=True):
        yield made


async def status_of(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[int, str | None, str | None]:
    response = await client.post("/v1/tasks", json=body)
    error = response.json().get("error", {}) if response.status_code >= 400 else {}
    return response.status_code, error.get("field"), error.get("code")


def url_of_length(length: int) -> str:
    base = "http://127.0.0.1:9/"
    return base + "a" * (length - len(base))


def at(offset_ms: int) -> dict[str, Any]:
    return {"kind": "at", "at_ms": now_ms() + offset_ms}


# ---- defaults -------------------------------------------------------------------------------------------


async def test_payload_up_to_64_kib_is_accepted_and_beyond_refused(client: httpx.AsyncClient) -> None:
    overhead = len(b'""')
    assert (await status_of(client, task_body(payload="x" * (65536 - overhead))))[0] == 201
    assert await status_of(client, task_body(payload="x" * (65536 - overhead + 1))) == (422, "payload", "too_large")


async def test_url_up_to_2048_chars_is_accepted_and_beyond_refused(client: httpx.AsyncClient) -> None:
    assert (await status_of(client, task_body(callback={"url": url_of_length(2048)})))[0] == 201
    assert (await status_of(client, task_body(callback={"url": url_of_length(2049)})))[:2] == (422, "callback.url")


async def test_up_to_20_custom_headers_are_accepted_and_21_refused(client: httpx.AsyncClient) -> None:
    headers = {f"x-h{i}": "v" for i in range(21)}
    ok = task_body(callback={"url": "http://127.0.0.1:9/", "headers": dict(list(headers.items())[:20])})
    assert (await status_of(client, ok))[0] == 201
    bad = task_body(callback={"url": "http://127.0.0.1:9/", "headers": headers})
    assert (await status_of(client, bad))[:2] == (422, "callback.headers")


async def test_periods_under_one_second_are_refused(client: httpx.AsyncClient) -> None:
    assert (await status_of(client, task_body(schedule={"kind": "interval", "every_ms": 1000})))[0] == 201
    assert await status_of(client, task_body(schedule={"kind": "interval", "every_ms": 999})) == (
        422,
        "schedule.every_ms",
        "too_frequent",
    )
    assert (await status_of(client, task_body(schedule={"kind": "cron", "expr": "* * * * * *"})))[0] == 201


async def test_at_within_the_misfire_threshold_in_the_past_is_accepted_and_older_refused(
    client: httpx.AsyncClient,
) -> None:
    assert (await status_of(client, task_body(schedule=at(-30_000))))[0] == 201
    assert (await status_of(client, task_body(schedule=at(-61_000))))[1:] == ("schedule.at_ms", "in_past")


async def test_at_up_to_ten_years_ahead_is_accepted_and_later_refused(client: httpx.AsyncClient) -> None:
    assert (await status_of(client, task_body(schedule=at(3649 * DAY_MS))))[0] == 201
    assert (await status_of(client, task_body(schedule=at(3651 * DAY_MS))))[1:] == ("schedule.at_ms", "too_far")


async def test_a_cron_that_never_fires_is_refused(client: httpx.AsyncClient) -> None:
    code, field, error = await status_of(client, task_body(schedule={"kind": "cron", "expr": "0 0 30 2 *"}))
    assert (code, error) == (422, "never_fires") and field is not None and field.startswith("schedule")


async def test_non_http_schemes_are_refused(client: httpx.AsyncClient) -> None:
    for url in ("ftp://example.com/", "file:///etc/passwd", "gopher://example.com/", "javascript:alert(1)"):
        assert (await status_of(client, task_body(callback={"url": url})))[:2] == (422, "callback.url"), url


# ---- configured -------------------------------------------------------------------------------------------


async def test_every_limit_follows_its_setting(tight: httpx.AsyncClient) -> None:
    assert await status_of(tight, task_body(payload="x" * 200)) == (422, "payload", "too_large")
    assert (await status_of(tight, task_body(callback={"url": url_of_length(41)})))[:2] == (422, "callback.url")
    headers = {"a": "1", "b": "2", "c": "3"}
    three = task_body(callback={"url": "http://127.0.0.1:9/", "headers": headers})
    assert (await status_of(tight, three))[:2] == (422, "callback.headers")
    assert (await status_of(tight, task_body(schedule={"kind": "interval", "every_ms": 5000})))[2] == "too_frequent"
    assert (await status_of(tight, task_body(schedule=at(2 * DAY_MS))))[2] == "too_far"
    for i in range(3):
        assert (await status_of(tight, task_body(name=f"q{i}")))[0] == 201
    assert (await status_of(tight, task_body(name="q3")))[::2] == (429, "quota_exceeded")
