"""Writing a bench's tasks and flows straight into one shard's tables, ``BATCH`` rows a statement, in one
transaction on that shard's database (an engine per server URL, kept in ``engines`` for the next shard;
the caller disposes them). Shared by the benches that seed large tables (:mod:`benchmarks.capacity`,
:mod:`benchmarks.search`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from tjobs.model import Task
from tjobs.settings import StorageSettings
from tjobs.stores.schema import task_to_row
from tjobs.stores.sql_layout import ShardTables, create_engine_for

BATCH = 2_000


async def write_shard_rows(
    engines: dict[str, AsyncEngine],
    settings: StorageSettings,
    home: ShardTables,
    tasks: Sequence[Task],
    flow_rows: Sequence[dict[str, Any]],
) -> None:
    """Insert ``tasks`` into the shard's ``tasks_TT``, then ``flow_rows`` into its ``flows_TT``, in order."""
    url = home.database.engine_url
    engine = engines.setdefault(url, create_engine_for(url, settings))
    async with engine.begin() as conn:
        for table, rows in ((home.tasks, [task_to_row(task) for task in tasks]), (home.flows, flow_rows)):
            for start in range(0, len(rows), BATCH):
                await conn.execute(insert(table), rows[start : start + BATCH], execution_options=home.options)
