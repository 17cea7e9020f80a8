"""API fixtures: one running node per storage backend for a whole test module (fast), and clients.

The node runs API + scheduler in the module's event loop (``loop_scope="module"``) on the in-memory
twin, SQLite files (the embedded default) and a real MariaDB (marked ``mariadb``; its own database
prefix, dropped afterwards). Every test makes its own apps, so tests never see each other's tasks.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from testkit import RunningNode, run_node
from testkit.databases import drop_databases
from testkit.sqlite_template import migrate_sqlite
from tests.e2e.conftest import FAST_SETTINGS
from tests.receiver import Receiver
from tjobs.model import App
from tjobs.settings import StorageSettings, load_settings

ADMIN_KEY = "tja_test_admin_key"


@pytest.fixture(scope="module", params=["memory", "sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def api_storage(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if request.param == "memory":
        yield {"urls": ["memory://"], "topology": "2x2x4"}
    elif request.param == "sqlite":
        yield {"urls": [f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('api') / 'data'}"], "topology": "2x2x4"}
    else:
        url = request.getfixturevalue("mysql_url")
        prefix = f"tjapi_{secrets.token_hex(3)}"
        yield {"urls": [url], "topology": "2x2x4", "database_prefix": prefix}
        drop_databases(StorageSettings(urls=[url], topology="2x2x4", database_prefix=prefix))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api_node(api_storage: dict[str, Any]) -> AsyncIterator[RunningNode]:
    settings = load_settings(None, storage=api_storage, api={"admin_key": ADMIN_KEY}, **FAST_SETTINGS)
    if not api_storage["urls"][0].startswith("memory:"):
        await migrate_sqlite(settings.storage)  # MariaDB: migrate(); a new SQLite directory: the template's copy
    async with run_node(settings) as handle:
        yield handle


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as started:
        yield started


@dataclass
class Tenant:
    app: App
    api_key: str
    client: httpx.AsyncClient


# The API tests prove answers, not their speed (benchmarks do): httpx's default 5 s read timeout failed a
# MariaDB flow search in a clean-clone run at load 9 (tests/api/test_search_api.py, ReadTimeout).
CLIENT_TIMEOUT_S = 30.0


@pytest_asyncio.fixture(loop_scope="module")
async def tenant_factory(api_node: RunningNode) -> AsyncIterator[Any]:
    clients: list[httpx.AsyncClient] = []

    async def make(name: str = "tenant", **body: Any) -> Tenant:
        app, key = await api_node.create_app(name, **body)
        client = httpx.AsyncClient(
            base_url=api_node.base_url, headers={"authorization": f"Bearer {key}"}, timeout=CLIENT_TIMEOUT_S
        )
        clients.append(client)
        return Tenant(app, key, client)

    yield make
    for client in clients:
        await client.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def tenant(tenant_factory: Any) -> Tenant:
    made: Tenant = await tenant_factory()
    return made


@pytest_asyncio.fixture(loop_scope="module")
async def admin(api_node: RunningNode) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=api_node.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=CLIENT_TIMEOUT_S
    ) as client:
        yield client


def task_body(receiver: Receiver | None = None, **extra: Any) -> dict[str, Any]:
    url = receiver.url("/hook") if receiver is not None else "http://127.0.0.1:9/hook"
    body: dict[str, Any] = {
        "name": "t",
        "schedule": {"kind": "delay", "delay_ms": 3_600_000},
        "callback": {"url": url},
        "payload": {"n": 1},
    }
    body.update(extra)
    return body
