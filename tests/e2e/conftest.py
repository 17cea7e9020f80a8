"""End-to-end fixtures: a real node (API + scheduler) in the test's loop, on each storage backend.

``node_settings`` is parametrized over the in-memory twin, SQLite files and a real MariaDB (each
MariaDB run gets its own database prefix, dropped afterwards). Callbacks go to the real HTTP
receiver in ``tests/receiver.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit import RunningNode, run_node
from testkit.databases import drop_databases
from tests.receiver import Receiver
from tjobs.settings import Settings, StorageSettings, load_settings

FAST_SETTINGS: dict[str, Any] = {
    "scheduler": {"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3},
    "compensator": {"interval_s": 0.5, "grace_s": 2.0},
    "callbacks": {"backoff_base_ms": 100, "backoff_max_ms": 1000, "timeout_ms": 2000},
    "allow_loopback_callbacks": True,
}


@pytest.fixture(params=["memory", "sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "memory":
        yield {"urls": ["memory://"], "topology": "2x2x4"}
    elif request.param == "sqlite":
        yield {"urls": [f"sqlite+aiosqlite:///{tmp_path / 'data'}"], "topology": "2x2x4"}
    else:
        url = request.getfixturevalue("mysql_url")
        prefix = f"tje2e_{secrets.token_hex(3)}"
        yield {"urls": [url], "topology": "2x2x4", "database_prefix": prefix}
        drop_databases(StorageSettings(urls=[url], database_prefix=prefix))


@pytest.fixture
async def node_settings(storage: dict[str, Any]) -> Settings:
    settings = load_settings(None, storage=storage, **FAST_SETTINGS)
    if not storage["urls"][0].startswith("memory:"):
        from tjobs.stores.migrate import migrate

        await migrate(settings.storage)
    return settings


@pytest.fixture
async def running(node_settings: Settings) -> AsyncIterator[RunningNode]:
    async with run_node(node_settings) as handle:
        yield handle


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as started:
        yield started
