"""``tjobs index-children`` on a SQLite directory whose tasks named children before migration 0024 (their
``children`` stored, no reverse-index rows): the command indexes them, says how many links, and refuses a bad
option naming it before touching anything."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from testkit.sqlite_template import migrate_sqlite
from tests.contract.backends import make_task
from tjobs.cli.main import app
from tjobs.model import TaskChildren
from tjobs.settings import StorageSettings
from tjobs.stores.sql.task_parents import SqlTaskParents
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


def test_the_command_indexes_the_children_set_before_the_index(tmp_path: Path) -> None:
    storage = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="2x2x4")
    config = tmp_path / "tjobs.toml"
    config.write_text(f'[storage]\nurls = ["{storage.urls[0]}"]\ntopology = "2x2x4"\n')

    async def seed() -> tuple[int, int]:
        await migrate_sqlite(storage)
        store = SQLAlchemyTaskStore(storage)
        await store.start()
        try:
            child = await store.insert_task(make_task(shard=2))
            parent = await store.insert_task(replace(make_task(shard=11), children=TaskChildren((child.id,))))
            return child.id, parent.id
        finally:
            await store.close()

    async def parents_of(child_id: int) -> object:
        store = SQLAlchemyTaskStore(storage)
        await store.start()
        try:
            return await SqlTaskParents(store).parents_of([child_id])
        finally:
            await store.close()

    child_id, parent_id = asyncio.run(seed())
    refused = CliRunner().invoke(app, ["index-children", "--config", str(config), "--batch", "0"])
    assert refused.exit_code == 2 and "--batch" in refused.output
    assert asyncio.run(parents_of(child_id)) == {}

    done = CliRunner().invoke(app, ["index-children", "--config", str(config), "--batch", "2"])

    assert done.exit_code == 0, done.output
    assert "indexed: 1 links over every shard" in done.output
    assert asyncio.run(parents_of(child_id)) == {child_id: TaskChildren((parent_id,))}
