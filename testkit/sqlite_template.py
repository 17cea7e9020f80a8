"""``tjobs migrate`` on a new SQLite data directory, for tests: a copy of this process's first migration.

A test module's node migrates its own SQLite directory (two Alembic upgrades and the layout record: about
0.3-0.6 s of CPU, once per API module and storage). What that makes of a new directory depends only on
the topology and the database prefix, with one exception: the recorded shard map names the directory
as the server (:func:`tjobs.stores.sql_layout.server_name`), so a plain copy is refused by the next
start. :func:`migrate_sqlite` therefore migrates a template directory once per process and layout,
copies its files (SQLite's online backup, as :func:`tjobs.stores.migrate` copies its own databases),
and records in the copy the seed map ``migrate`` would have recorded there (the template's map,
epoch 1, replaced by the same seed for the new directory). Anything else (MariaDB, several URLs, a
directory that holds data already) goes to :func:`tjobs.stores.migrate.migrate` itself.
``tests/unit/test_sqlite_template.py`` holds a copy equal to a migration: same tables, schema revisions,
layout record and shard map.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

from sharding.shard_map import ShardMap
from tjobs.settings import StorageSettings
from tjobs.stores.migrate import _placed_servers, migrate
from tjobs.stores.shard_fence import read_recorded_map, swap_recorded_map
from tjobs.stores.sql_layout import MYSQL, Layout, create_engine_for, dialect_of, sqlite_path

_TEMPLATES: dict[tuple[str, str], StorageSettings] = {}  # (topology, prefix) -> the migrated template


def _copyable(settings: StorageSettings) -> bool:
    urls = list(dict.fromkeys(settings.urls))
    if len(urls) != 1 or dialect_of(urls[0]) == MYSQL or urls[0].startswith("memory:"):
        return False
    layout = Layout(settings)
    return not any(Path(sqlite_path(home.engine_url)).exists() for home in layout.databases)


async def migrate_sqlite(settings: StorageSettings) -> None:
    """``migrate(settings)``; on one new SQLite directory, a copy of the process's template for its layout."""
    if not _copyable(settings):
        await migrate(settings)
        return
    key = (str(settings.parsed_topology()), settings.database_prefix)
    template = _TEMPLATES.get(key)
    if template is None:
        directory = Path(tempfile.mkdtemp(prefix="tjobs-sqlite-template-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        template = settings.model_copy(update={"urls": [f"sqlite+aiosqlite:///{directory}"]})
        await migrate(template)
        _TEMPLATES[key] = template
    await asyncio.to_thread(_copy_files, Layout(template), Layout(settings))
    await _record_seed_map(template, settings)


def _copy_files(source: Layout, target: Layout) -> None:
    for home_from, home_to in zip(source.databases, target.databases, strict=True):
        path = Path(sqlite_path(home_to.engine_url))
        path.parent.mkdir(parents=True, exist_ok=True)
        with (
            closing(sqlite3.connect(sqlite_path(home_from.engine_url))) as origin,
            closing(sqlite3.connect(path)) as copy,
        ):
            origin.backup(copy)


async def _record_seed_map(template: StorageSettings, settings: StorageSettings) -> None:
    """Replace the template's seed map, copied along, by the seed ``migrate`` records for ``settings``."""
    layout = Layout(settings)
    seed = ShardMap.seed(_placed_servers(settings), layout.topology)
    engine = create_engine_for(layout.apps_database.engine_url, settings)
    try:
        async with engine.begin() as conn:
            copied = await read_recorded_map(conn, layout)
            expected = ShardMap.seed(_placed_servers(template), layout.topology)
            assert copied == expected, f"the template's map is {copied}, not its seed {expected}"
            assert await swap_recorded_map(conn, layout, seed, copied.epoch), "the copied map changed"
    finally:
        await engine.dispose()
