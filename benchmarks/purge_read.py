"""What retention's read of the completed tasks costs when nothing is old enough (issue 29 item 3).

::

    python -m benchmarks purge_read --storage mysql+asyncmy://root@127.0.0.1:3306 --tasks 100000

It migrates a fresh ``tjbench_<hex>`` prefix (topology 1x1x1: one tasks table), writes ``--tasks``
completed tasks of the capacity bench's shape (:func:`benchmarks.capacity.typical_task`, completed,
no next run), every one last updated after the cut-off, and ``ANALYZE TABLE``. Then ``--repeats`` times,
each in its own transaction as the purge runs it: the read the purge made before migration 0026 (the
completed tasks along ``due``, ``status = 'completed' AND updated_at < ?``, ``LIMIT --batch ... FOR
UPDATE``) and the read it makes now (:func:`tjobs.stores.sql.tasks._old_completed`, along
``tasks_TT_done``), each with the session's ``Handler_read%`` delta (rows examined) and its wall time;
then ``store.purge`` whole (flows and tasks, nothing to delete). Both reads in the same run, interleaved,
so a busy box weighs on both. Prints the medians, the ranges and the new index's bytes per task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import statistics
import time
from dataclasses import replace
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from benchmarks._shard_rows import write_shard_rows
from benchmarks.capacity import NOW_MS, typical_task
from sharding import TaskIdGenerator
from testkit.databases import drop_databases
from tjobs.model import TaskStatus
from tjobs.settings import StorageSettings
from tjobs.stores.migrate import migrate
from tjobs.stores.sql.tasks import _old_completed
from tjobs.stores.sql_layout import create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


def completed_tasks(count: int, updated_from_ms: int) -> list[Any]:
    """``count`` completed tasks of the typical shape, last updated 1 ms apart from ``updated_from_ms``."""
    rng = random.Random(29)
    ids = TaskIdGenerator(1)
    made = []
    for n in range(count):
        task = typical_task(ids.mint(0, NOW_MS + n), n, NOW_MS + n, rng)
        made.append(
            replace(
                task, status=TaskStatus.COMPLETED, next_run_at_ms=None, fire_count=1, updated_at_ms=updated_from_ms + n
            )
        )
    return made


async def _handler_reads(conn: AsyncConnection) -> int:
    rows: list[Any] = list((await conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'")).all())
    return sum(int(row[1]) for row in rows)


async def _examined(conn: AsyncConnection, statement: Any, options: dict[str, Any]) -> tuple[int, float]:
    """Rows examined (``Handler_read%`` less one ``SHOW``'s own) and milliseconds of one read in its
    own transaction."""
    async with conn.begin():
        first = await _handler_reads(conn)
        idle = await _handler_reads(conn) - first
        before = await _handler_reads(conn)
        started = time.perf_counter()
        await conn.execute(statement, execution_options=options)
        elapsed_ms = (time.perf_counter() - started) * 1000
        examined = await _handler_reads(conn) - before - idle
    return examined, elapsed_ms


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"tjbench_{secrets.token_hex(3)}"
    settings = StorageSettings(urls=[args.storage], topology="1x1x1", database_prefix=prefix)
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    engines: dict[str, AsyncEngine] = {}
    try:
        home = store.layout.shards[0]
        cutoff = NOW_MS
        await write_shard_rows(engines, settings, home, completed_tasks(args.tasks, cutoff), [])
        engine = create_engine_for(home.database.engine_url, settings)
        engines["read"] = engine
        before_0026 = text(
            f"SELECT id, app_id FROM {home.tasks_sql} WHERE status = 'completed' AND updated_at < :cutoff "
            "LIMIT :batch FOR UPDATE"
        ).bindparams(cutoff=cutoff, batch=args.batch)
        now = _old_completed(home, True, cutoff, args.batch)
        figures: dict[str, list[float]] = {k: [] for k in ("old_rows", "old_ms", "new_rows", "new_ms", "purge_ms")}
        async with engine.connect() as conn:
            db, name = home.database.name, home.tasks.name
            await conn.execute(text(f"ANALYZE TABLE `{db}`.`{name}`"))
            await conn.commit()
            page = int((await conn.execute(text("SELECT @@innodb_page_size"))).scalar_one())
            done_pages = (
                await conn.execute(
                    text(
                        "SELECT stat_value FROM mysql.innodb_index_stats WHERE database_name = :db AND "
                        "table_name = :name AND index_name = :index AND stat_name = 'size'"
                    ),
                    {"db": db, "name": name, "index": f"{name}_done"},
                )
            ).scalar_one()
            await conn.commit()
            for _ in range(args.repeats):
                for key, statement in (("old", before_0026), ("new", now)):
                    rows, ms = await _examined(conn, statement, home.options)
                    figures[f"{key}_rows"].append(rows)
                    figures[f"{key}_ms"].append(ms)
                started = time.perf_counter()
                assert await store.purge(0, cutoff, args.batch) == 0
                figures["purge_ms"].append((time.perf_counter() - started) * 1000)
        return {
            "tasks": args.tasks,
            "batch": args.batch,
            "repeats": args.repeats,
            **{key: _summary(values) for key, values in figures.items()},
            "done_index_bytes_per_task": round(int(done_pages) * page / args.tasks, 1),
            "prefix": prefix,
        }
    finally:
        await store.close()
        for engine in engines.values():
            await engine.dispose()
        if not args.keep:
            drop_databases(settings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks purge_read", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--storage", required=True, help="a MariaDB URL (mysql+asyncmy://...)")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=200, help="retention.batch")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--keep", action="store_true", help="keep the database (named in the output)")
    args = parser.parse_args(argv)
    if not args.storage.startswith("mysql"):
        parser.error("--storage must be a MariaDB URL: the figures are InnoDB's")
    print(json.dumps(asyncio.run(run(args)), indent=1))


if __name__ == "__main__":
    main()
