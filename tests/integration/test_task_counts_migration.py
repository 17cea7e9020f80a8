"""Revision 0022 on a deployment that has tasks: a node refuses the schema before it; ``tjobs migrate``
creates ``task_counts`` in every logical database and fills it from a count of the tasks already stored,
so the counts are exact from the first start on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.contract.backends import IDS, drop_databases, make_task, mariadb_settings
from tjobs.model import TaskStatus
from tjobs.settings import StorageSettings
from tjobs.stores.layout_record import StorageNotMigrated
from tjobs.stores.migrate import migrate
from tjobs.stores.schema_revision import known_revisions
from tjobs.stores.sql_layout import MYSQL, create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.asyncio

HEAD_REVISION = known_revisions()[0]


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
async def settings(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageSettings]:
    if request.param == "sqlite":
        yield StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="2x2x4")
        return
    mariadb = mariadb_settings(request.getfixturevalue("mysql_url"))
    try:
        yield mariadb
    finally:
        await drop_databases(mariadb)


async def as_before_revision_0022(store: SQLAlchemyTaskStore, settings: StorageSettings) -> None:
    """Every logical database as revision 0021 left it: no counts table."""
    for home in store.layout.databases:
        engine = create_engine_for(home.engine_url, settings)
        qualifier = f"`{home.name}`." if store.layout.dialect == MYSQL else ""
        try:
            async with engine.begin() as conn:
                await conn.exec_driver_sql(f"DROP TABLE {qualifier}task_counts")
                await conn.exec_driver_sql(f"UPDATE {qualifier}alembic_version SET version_num = '0021_flow_runs'")
        finally:
            await engine.dispose()


async def test_migrate_fills_the_task_counts_from_the_tasks_already_stored(settings: StorageSettings) -> None:
    assert IDS.shard_count == 16  # make_task's ids are of the 2x2x4 topology
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        for shard, app_id, status in (
            (0, "app-a", TaskStatus.ACTIVE),
            (0, "app-a", TaskStatus.ACTIVE),
            (3, "app-a", TaskStatus.PAUSED),
            (4, "app-a", TaskStatus.COMPLETED),  # database 1
            (15, "app-b", TaskStatus.ACTIVE),  # database 3
        ):
            await store.insert_task(make_task(shard=shard, app_id=app_id, status=status))
        await as_before_revision_0022(store, settings)

        with pytest.raises(StorageNotMigrated, match=rf"0021_flow_runs.*{HEAD_REVISION}.*tjobs migrate"):
            await store.check_layout()

        await migrate(settings)
        await store.check_layout()
        assert await store.read_task_counts(0) == {"app-a": {"active": 2, "paused": 1}}
        assert await store.read_task_counts(1) == {"app-a": {"completed": 1}}
        assert await store.read_task_counts(2) == {}
        assert await store.read_task_counts(3) == {"app-b": {"active": 1}}
        for shard in (0, 3, 4, 15):
            assert await store.reconcile_task_counts(shard) == []  # what migrate wrote is exact
    finally:
        await store.close()
