"""A migration whose upgrade of one logical database fails waits for the upgrades still running on the others
before it disposes of its engines: it raised at once and disposed of them while another upgrade held a
connection, which went back, when that upgrade ended, to the pool its engine had dropped, and nothing
closed it (aiosqlite's ``ResourceWarning`` in some later test: dd1ca13's CI failure, "the leaked connections
of that failure also failed the next test")."""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine

from tjobs.settings import StorageSettings
from tjobs.stores import migrate as migrate_module
from tjobs.stores.migrate import migrate
from tjobs.stores.sql_layout import DatabaseHome, Layout

UPGRADE_S = 0.3  # the other database's upgrade, still running when the first one fails


async def test_a_failed_upgrade_leaves_no_connection_of_another_database_to_the_garbage_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended: list[str] = []

    async def upgrade(engine: AsyncEngine, layout: Layout, home: DatabaseHome, script: ScriptDirectory) -> None:
        if home.index == layout.apps_database.index:
            raise RuntimeError("this upgrade failed")
        async with engine.connect():  # an upgrade under way on another database: its connection in use
            await asyncio.sleep(UPGRADE_S)
        ended.append(home.name)

    monkeypatch.setattr(migrate_module, "_upgrade_database", upgrade)
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x2x4")
    with pytest.raises(RuntimeError, match="this upgrade failed"):
        await migrate(settings)
    await asyncio.sleep(2 * UPGRADE_S)  # the other upgrade has ended, whenever migrate returned
    assert ended == ["tjobs_01"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(warning.message) for warning in caught if warning.category is ResourceWarning] == []
