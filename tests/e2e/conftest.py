"""End-to-end fixtures: a real node (API + scheduler) in the test's loop, on each storage backend.

``node_settings`` is parametrized over the in-memory twin, SQLite files and a real MariaDB (each
MariaDB run gets a set of databases of its own, as ``tjobs migrate`` leaves new ones: a set of the
worker's, put back, from ``testkit/mariadb_template.py``). Callbacks go to the real HTTP receiver in
``tests/receiver.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from testkit import RunningNode, run_node
from testkit.mariadb_template import fresh_mariadb, release_mariadb
from tests.receiver import Receiver
from tjobs.settings import Settings, StorageSettings, load_settings

FAST_SETTINGS: dict[str, Any] = {
    "scheduler": {"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3},
    "compensator": {"interval_s": 0.5, "grace_s": 2.0},
    "callbacks": {"backoff_base_ms": 100, "backoff_max_ms": 1000, "timeout_ms": 2000},
    "allow_loopback_callbacks": True,
}


@pytest.fixture(params=["memory", "sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The storage settings; MariaDB's databases are already migrated, SQLite's directory not yet."""
    if request.param == "memory":
        yield {"urls": ["memory://"], "topology": "2x2x4"}
    elif request.param == "sqlite":
        yield {"urls": [f"sqlite+aiosqlite:///{tmp_path / 'data'}"], "topology": "2x2x4"}
    else:
        url = request.getfixturevalue("mysql_url")
        prefix = f"tje2e_{secrets.token_hex(3)}"
        fresh = await fresh_mariadb(StorageSettings(urls=[url], topology="2x2x4", database_prefix=prefix))
        yield {"urls": [url], "topology": "2x2x4", "database_prefix": fresh.database_prefix}
        release_mariadb(fresh)


@pytest.fixture
async def node_settings(storage: dict[str, Any]) -> Settings:
    settings = load_settings(None, storage=storage, **FAST_SETTINGS)
    if storage["urls"][0].startswith("sqlite"):  # MariaDB's came migrated
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
