"""The ``store`` fixture: every contract test runs on memory, SQLite and MariaDB."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from sharding import Topology
from tests.contract.backends import TOPOLOGY, drop_databases, mariadb_settings, run_in_thread, wipe
from tjobs.settings import StorageSettings
from tjobs.stores.base import TaskStore
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


@pytest.fixture(scope="session")
def sqlite_store_settings(tmp_path_factory: pytest.TempPathFactory) -> StorageSettings:
    directory: Path = tmp_path_factory.mktemp("shards")
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{directory}"], topology=TOPOLOGY)
    run_in_thread(lambda: migrate(settings))
    return settings


@pytest.fixture(scope="session")
def mariadb_store_settings(mysql_url: str) -> Iterator[StorageSettings]:
    settings = mariadb_settings(mysql_url)
    run_in_thread(lambda: migrate(settings))
    yield settings
    run_in_thread(lambda: drop_databases(settings))


@pytest.fixture(params=["memory", "sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    if request.param == "memory":
        yield MemoryTaskStore(Topology.parse(TOPOLOGY))
        return
    settings: StorageSettings = request.getfixturevalue(f"{request.param}_store_settings")
    async with _started(settings) as sql_store:
        yield sql_store


@pytest.fixture
async def mariadb_store(mariadb_store_settings: StorageSettings) -> AsyncIterator[SQLAlchemyTaskStore]:
    """A MariaDB store alone, its databases wiped: for what only the server can count."""
    async with _started(mariadb_store_settings) as store:
        yield store


@asynccontextmanager
async def _started(settings: StorageSettings) -> AsyncIterator[SQLAlchemyTaskStore]:
    """A SQL store on ``settings``, its databases wiped first, started, and closed afterwards."""
    await wipe(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        yield store
    finally:
        await store.close()
