"""Every case of the bad-input table (:mod:`tests.fuzz.cases`) is refused: a 4xx, never a 5xx, never
accepted, and a 422 names the field. Runs on the in-memory twin, SQLite and MariaDB: ids and cursors must
be parsed into their range before any store sees them.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from testkit import run_node
from testkit.databases import drop_databases
from tests.fuzz.cases import (
    SEEDED_TARGET,
    SERVER0,
    TARGET_ALLOWED_ADDRESSES,
    Case,
    all_cases,
    render,
    valid_target,
    valid_task,
)
from tjobs.settings import StorageSettings, load_settings
from tjobs.stores.migrate import migrate

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN_KEY = "tja_fuzz_admin_key_0123456789"
CASES = all_cases()


@dataclass
class Target:
    client: httpx.AsyncClient
    admin: httpx.AsyncClient
    task_id: str
    app_id: str
    server0: str  # the shard map's first server, which a plan's server list must start with


@pytest.fixture(scope="module", params=["memory", "sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def storage(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The memory twin, and the SQL stores, where an id beyond 64 bits used to overflow the driver."""
    if request.param == "memory":
        yield {"urls": ["memory://"], "topology": "1x2x4"}
    elif request.param == "sqlite":
        yield {"urls": [f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('fuzz') / 'data'}"], "topology": "1x2x4"}
    else:
        url = request.getfixturevalue("mysql_url")
        prefix = f"tjfuzz_{secrets.token_hex(3)}"
        yield {"urls": [url], "topology": "1x2x4", "database_prefix": prefix}
        drop_databases(StorageSettings(urls=[url], topology="1x2x4", database_prefix=prefix))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def target(storage: dict[str, Any]) -> AsyncIterator[Target]:
    settings = load_settings(
        None,
        storage=storage,
        api={"admin_key": ADMIN_KEY},
        allow_loopback_callbacks=True,
        targets={"allowed_addresses": TARGET_ALLOWED_ADDRESSES},
        rate_limits={"enabled": False},  # a 429 would answer before the input is judged (limits: tests/api)
    )
    if not storage["urls"][0].startswith("memory:"):
        await migrate(settings.storage)
    async with run_node(settings) as running:
        app, key = await running.create_app("fuzz")
        async with (
            httpx.AsyncClient(
                base_url=running.base_url, timeout=30, headers={"authorization": f"Bearer {key}"}
            ) as client,
            httpx.AsyncClient(
                base_url=running.base_url, timeout=30, headers={"authorization": f"Bearer {ADMIN_KEY}"}
            ) as admin,
        ):
            seeded = await client.post("/v1/tasks", json=valid_task())
            assert seeded.status_code == 201, seeded.text
            hook = await client.post("/v1/targets", json=valid_target(name=SEEDED_TARGET))
            assert hook.status_code == 201, hook.text
            shards = await admin.get("/v1/shards")
            assert shards.status_code == 200, shards.text
            yield Target(client, admin, seeded.json()["id"], app.id, shards.json()["servers"][0]["server"])


async def test_the_table_holds_at_least_300_cases() -> None:
    assert len(CASES) >= 300, len(CASES)


async def send(target: Target, case: Case) -> httpx.Response:
    path = case.path.replace("{task}", target.task_id).replace("{app}", target.app_id)
    headers = {k: v for k, v in case.headers.items() if v}
    content = case.content
    if content is None and case.body is not None:
        content = render(case.body).replace(SERVER0, target.server0).encode()
        headers.setdefault("content-type", "application/json")
    client = target.admin if case.admin else target.client
    return await client.request(case.method, path, content=content, headers=headers)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_bad_input_is_refused_with_a_4xx_naming_the_field(target: Target, case: Case) -> None:
    response = await send(target, case)
    status = response.status_code
    assert status < 500, f"{case.name}: {status} {response.text[:300]}"
    assert status != 429, f"{case.name}: rate limited, so the input was never judged: {response.text[:300]}"
    if case.batch_item and status == 200:
        answer = response.json()
        assert answer["failed"] == 1 and 400 <= answer["items"][0]["status"] < 500, response.text[:300]
        return
    if case.path.endswith("/dead-letters/redrive") and status == 200:
        assert response.json()["failed"] == len(case.body["flow_ids"]), response.text[:300]
        return
    if case.statuses:
        assert status in case.statuses, f"{case.name}: {status} {response.text[:300]}"
    else:
        assert 400 <= status < 500, f"{case.name}: accepted with {status} {response.text[:300]}"
    error = response.json()["error"]
    assert error["code"] and error["message"]
    if status == 422 and case.field is not None:
        assert (error.get("field") or "").startswith(case.field), f"{case.name}: {error}"
    if status == 405:
        assert response.headers.get("allow"), "405 without Allow"
