"""Bytes per stored task and flow on MariaDB, and the fire path's index per million tasks (issue 29).

::

    python -m benchmarks capacity --storage mysql+asyncmy://root@127.0.0.1:3306

It migrates a fresh ``tjbench_<hex>`` prefix (topology ``--topology``, default 1x1x2: few tables, so each
holds enough rows that a table's fixed pages do not count), writes ``--tasks`` tasks of the design's shape
(``close-order-<n>`` with a key, a URL, a header, a small body and payload; 6 in 10 ``delay``, 2 ``at``, 1
``cron``, 1 ``interval``; ids minted in time order as registration mints them; next runs spread over 30
days) and ``--flows`` delivered flows (one attempt: its attempt history and kept answer as the deliverer
writes them), inserted in instant order as fires insert them, straight into the shard tables. Then
``ANALYZE TABLE`` (tjobs tables keep no automatic statistics) and from ``information_schema.TABLES`` and
``mysql.innodb_index_stats``: rows (``COUNT(*)``), data (the clustered index: the rows) and indexes, per
table and per index; it prints bytes per task and per flow and the ``due`` index (``status,
next_run_at``: what each cycle load reads) per million tasks. The databases are dropped afterwards
unless ``--keep``. A bench reports; :func:`capacity_figures` is its arithmetic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks._shard_rows import write_shard_rows
from sharding import TaskIdGenerator
from testkit.databases import drop_databases
from tjobs.model import (
    AttemptAnswer,
    AttemptLog,
    AttemptRecord,
    DeliveryMode,
    FlowKind,
    FlowStatus,
    MisfirePolicy,
    Task,
    TaskStatus,
)
from tjobs.settings import StorageSettings
from tjobs.specs import AtSpec, CallbackSpec, CronSpec, DelaySpec, IntervalSpec, ScheduleSpec
from tjobs.stores.flow_documents import answers_to_text, attempt_log_to_text
from tjobs.stores.migrate import migrate
from tjobs.stores.sql_layout import create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

NOW_MS = 1_800_000_000_000
DAY_MS = 86_400_000
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class TableSize:
    """One shard table as InnoDB counts it: ``rows`` (exact), ``data_bytes`` (its clustered index, the
    rows) and ``index_bytes`` (every secondary index); ``indexes``: each secondary index's bytes by its
    name without the table's (``due``, ``app``, ``app_name`` …)."""

    table: str
    rows: int
    data_bytes: int
    index_bytes: int
    indexes: dict[str, int]


def capacity_figures(tables: Sequence[TableSize]) -> dict[str, Any]:
    """Bytes per stored task (``tasks_*`` tables) and per flow (``flows_*``), rows and indexes, and each
    index's bytes per row of its kind; ``due_mib_per_million_tasks``: the ``due`` index per 10**6 tasks."""
    figures: dict[str, Any] = {}
    for kind in ("tasks", "flows"):
        mine = [t for t in tables if t.table.startswith(f"{kind}_")]
        rows = sum(t.rows for t in mine)
        if not rows:
            raise ValueError(f"no {kind} rows measured")
        data = sum(t.data_bytes for t in mine)
        index = sum(t.index_bytes for t in mine)
        named: dict[str, int] = {}
        for t in mine:
            for name, size in t.indexes.items():
                named[name] = named.get(name, 0) + size
        figures[kind] = {
            "rows": rows,
            "data_bytes": data,
            "index_bytes": index,
            "bytes_per_row": round((data + index) / rows, 1),
            "data_bytes_per_row": round(data / rows, 1),
            "index_bytes_per_row": round(index / rows, 1),
            "index_bytes_per_row_by_index": {name: round(size / rows, 1) for name, size in sorted(named.items())},
        }
    due_per_task = figures["tasks"]["index_bytes_per_row_by_index"].get("due", 0.0)
    figures["due_mib_per_million_tasks"] = round(due_per_task * 1_000_000 / MIB, 1)
    return figures


def typical_task(task_id: int, n: int, created_ms: int, rng: random.Random) -> Task:
    """The design's create request (docs/design.md) as a stored row: mostly one-shot delays."""
    kind = n % 10
    schedule: ScheduleSpec
    if kind < 6:
        delay_ms = rng.randrange(60_000, 30 * DAY_MS)
        schedule, next_ms = DelaySpec(delay_ms, created_ms + delay_ms), created_ms + delay_ms
    elif kind < 8:
        next_ms = created_ms + rng.randrange(60_000, 30 * DAY_MS)
        schedule = AtSpec(next_ms)
    elif kind == 8:
        schedule, next_ms = CronSpec("0 9 * * *", "Asia/Shanghai"), created_ms + rng.randrange(DAY_MS)
    else:
        schedule, next_ms = IntervalSpec(30_000, created_ms), created_ms + rng.randrange(30_000)
    callback = CallbackSpec(
        ("https://orders.example/close",), "POST", {"x-order": str(n)}, f'{{"order": {n}, "action": "close"}}', 3000
    )
    return Task(
        task_id,
        f"app-{n % 10}",
        f"close-order-{n}",
        f"order-{n}-close",
        schedule,
        callback,
        {"order": n},
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.ACTIVE,
        next_ms,
        1,
        0,
        created_ms,
        created_ms,
    )


def delivered_flow(task: Task, scheduled_at: int) -> dict[str, Any]:
    """A flow after one delivered attempt: the row the fire inserts, then the outcome's ``UPDATE``."""
    started = scheduled_at + 12
    log = AttemptLog((AttemptRecord(1, started, 14, 200, None, task.callback.urls[0]),), 1)
    answer = AttemptAnswer(
        1, task.callback.urls[0], 200, (("content-type", "application/json"), ("content-length", "11")),
        '{"ok":true}', 11, 1,
    )  # fmt: skip
    return {
        "task_id": task.id,
        "scheduled_at": scheduled_at,
        "app_id": task.app_id,
        "kind": FlowKind.SCHEDULED.value,
        "status": FlowStatus.DELIVERED.value,
        "attempts": 1,
        "next_attempt_at": None,
        "missed": 0,
        "last_status_code": 200,
        "last_error": None,
        "created_at": scheduled_at,
        "updated_at": started + 14,
        "attempt_log": attempt_log_to_text(log),
        "answers": answers_to_text((answer,)),
    }


async def seed(store: SQLAlchemyTaskStore, settings: StorageSettings, tasks: int, flows: int) -> None:
    """Tasks in id order and flows in instant order, each shard's in statements of ``BATCH`` rows."""
    rng = random.Random(29)
    shards = store.topology.shard_count
    ids = TaskIdGenerator(shards)
    engines: dict[str, AsyncEngine] = {}
    for shard in range(shards):
        home = store.layout.shards[shard]
        numbers = range(shard, tasks, shards)
        made = [typical_task(ids.mint(shard, NOW_MS + n), n, NOW_MS + n, rng) for n in numbers]
        mine = flows // shards + (1 if shard < flows % shards else 0)
        fired = [made[i % len(made)] for i in range(mine)] if made else []
        flow_rows = sorted(
            (delivered_flow(task, task.created_at_ms - (i // len(made)) * DAY_MS - rng.randrange(DAY_MS))
             for i, task in enumerate(fired)),
            key=lambda row: row["scheduled_at"],
        )  # fmt: skip
        await write_shard_rows(engines, settings, home, made, flow_rows)
    for engine in engines.values():
        await engine.dispose()


async def measure(store: SQLAlchemyTaskStore, settings: StorageSettings) -> list[TableSize]:
    """``ANALYZE`` every shard table, then read its rows, data and index bytes."""
    sizes: list[TableSize] = []
    engines: dict[str, AsyncEngine] = {}
    for home in store.layout.shards:
        url = home.database.engine_url
        engine = engines.setdefault(url, create_engine_for(url, settings))
        async with engine.connect() as conn:
            page = int((await conn.execute(text("SELECT @@innodb_page_size"))).scalar_one())
            for table in (home.tasks, home.flows):
                db, name = home.database.name, table.name
                await conn.execute(text(f"ANALYZE TABLE `{db}`.`{name}`"))
                rows = int((await conn.execute(text(f"SELECT COUNT(*) FROM `{db}`.`{name}`"))).scalar_one())
                data, index = (
                    await conn.execute(
                        text(
                            "SELECT data_length, index_length FROM information_schema.TABLES"
                            " WHERE table_schema = :db AND table_name = :name"
                        ),
                        {"db": db, "name": name},
                    )
                ).one()
                pages = (
                    await conn.execute(
                        text(
                            "SELECT index_name, stat_value FROM mysql.innodb_index_stats WHERE database_name = :db"
                            " AND table_name = :name AND stat_name = 'size' AND index_name <> 'PRIMARY'"
                        ),
                        {"db": db, "name": name},
                    )
                ).all()
                indexes = {str(i).removeprefix(f"{name}_"): int(p) * page for i, p in pages}
                sizes.append(TableSize(name, rows, int(data), int(index), indexes))
    for engine in engines.values():
        await engine.dispose()
    return sizes


async def run(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"tjbench_{secrets.token_hex(3)}"
    settings = StorageSettings(urls=[args.storage], topology=args.topology, database_prefix=prefix)
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        started = time.perf_counter()
        await seed(store, settings, args.tasks, args.flows)
        seeded_s = time.perf_counter() - started
        figures = capacity_figures(await measure(store, settings))
        figures["seed_s"] = round(seeded_s, 1)
        figures["prefix"] = prefix
        return figures
    finally:
        await store.close()
        if not args.keep:
            drop_databases(settings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks capacity", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--storage", required=True, help="a MariaDB URL (mysql+asyncmy://...)")
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--flows", type=int, default=200_000)
    parser.add_argument("--topology", default="1x1x2", help="few tables: each holds many rows, as in production")
    parser.add_argument("--keep", action="store_true", help="keep the databases (named in the output)")
    args = parser.parse_args(argv)
    if not args.storage.startswith("mysql"):
        parser.error("--storage must be a MariaDB URL: the figures are InnoDB's")
    figures = asyncio.run(run(args))
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
