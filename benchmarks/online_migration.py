"""An online migration on big task tables while a node fires (issue 28 item 5).

::

    python -m benchmarks online_migration --tasks 10000000 --rate 1000 --window-s 90 --alter-at-s 30

Starts a MariaDB server of its own (as ``shard_move`` does: free loopback port, data in a temporary
directory, stopped by its PID at the end; ``--storage`` uses a running server instead), one node on it
(``--topology``, default 1x4x16: 4 logical databases of 16 task tables) and the callback sink. Straight
into the shard tables (multi-row ``INSERT``; valid tasks of the bench's app, ids minted for their shards):

- ``--tasks`` parked one-shot tasks due in 30 days (they never fire), every shard evenly: the table size
  the migration meets. Their rows are built from one template row (only id, name and instant vary) and
  written by ``--load-workers`` connections, each its share of the tables; the load time per million is
  reported;
- ``--rate`` × ``--window-s`` one-shot tasks due across the window on random shards, calling the sink.

``--alter-at-s`` into the window it runs a migration, as ``tjobs migrate`` would send it, on every
``tasks_TT``, one after the other. By default (``--change task_purge_index``) that is migration 0026, the
one online migration of ours whose time grows with the task tables' rows: its virtual column
(``ALGORITHM=INSTANT``) and that column's index, built while writes go on (``INPLACE, LOCK=NONE``); the
bench undoes 0026 on every (still empty) task table before the load. ``--change add_column`` sends
``ALTER TABLE … ADD COLUMN bench_probe TEXT NULL`` instead, with
``--algorithm``: ``INSTANT`` (metadata only: what docs/operations.md "Upgrades" calls online),
``INPLACE`` (rebuilt with ``LOCK=NONE``), ``INPLACE_SHARED`` (rebuilt with writes blocked,
``LOCK=SHARED``: what MariaDB does for a column added to ``tasks_TT``, refusing the other two there
because of its indexed virtual column), ``COPY`` (every row copied, writes blocked). ``--change
table_options`` sends migration 0010's ``STATS_AUTO_RECALC=0`` instead (with ``INSTANT``: an online
migration of ours on big task tables, re-applied). A refusal by the
server (``ALGORITHM=INSTANT is not supported for this operation``) ends the migration and is reported.
Each statement's time is recorded (it includes the wait for the table's metadata lock behind open fire
transactions). After the window and the drain the sink's callbacks are matched against the due tasks
(:func:`benchmarks.report.account`): lateness p50/p99/max by scheduled instant before, during and after
the migration, per second around it, the largest gap between callbacks during it, and missing and
duplicate fires, which must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import secrets
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pymysql
from aiohttp import ClientSession

from benchmarks._stored_set import load_parked
from benchmarks.report import account, machine
from benchmarks.shard_move import (
    PARKED_DUE_IN_MS,
    Phases,
    _connect,
    _lateness_json,
    _round,
    _sleep_until,
    _values,
    bench_mariadb,
    create_app,
    drain,
    largest_gap_ms,
    lateness_between,
    load_average,
    mint_ids,
    now_ms,
    one_shot,
    say,
    seed,
    timeline,
)
from testkit.databases import drop_databases
from testkit.node_process import node_process
from testkit.sink import SinkConfig, SinkProcess
from tjobs.settings import StorageSettings
from tjobs.specs import CallbackSpec
from tjobs.stores.schema import COMPLETED_AT_COLUMN, COMPLETED_AT_EXPRESSION, purge_task_indexes
from tjobs.stores.sql_layout import Layout, ShardTables

NODE_SETTINGS: dict[str, Any] = {"rate_limits": {"enabled": False}}
PROBE_COLUMN = "bench_probe"
# --algorithm: (ALGORITHM, LOCK) of the ALTER. INPLACE_SHARED is what MariaDB does for a column added to tasks_TT
# (migration 0023): it refuses INSTANT and LOCK=NONE there ("online rebuild with indexed virtual columns").
ALGORITHMS = {"INSTANT": ("INSTANT", ""), "INPLACE": ("INPLACE", "NONE"), "INPLACE_SHARED": ("INPLACE", "SHARED"),
              "COPY": ("COPY", "")}  # fmt: skip


# ---- the migration ---------------------------------------------------------------------------------


def alter_statement(table_sql: str, algorithm: str, change: str = "add_column") -> str:
    """What the bench's migration sends to one task table: a nullable column added last (an INPLACE one
    with ``LOCK=NONE``: the table is rebuilt while writes go on)."""
    algorithm, lock = ALGORITHMS[algorithm]
    locking = f", LOCK={lock}" if lock else ""
    what = f"ADD COLUMN `{PROBE_COLUMN}` TEXT NULL" if change == "add_column" else "STATS_AUTO_RECALC=0"
    return f"ALTER TABLE {table_sql} {what}, ALGORITHM={algorithm}{locking}"


def purge_index_statements(home: ShardTables) -> tuple[list[str], list[str]]:
    """``--change task_purge_index``: (what undoes migration 0026 on one task table before the load, what
    0026 sends to it during the window). The second is 0026's own pair: its virtual column
    (``ALGORITHM=INSTANT``) and that column's index, built while writes go on (``INPLACE, LOCK=NONE``): the
    one migration of ours whose time grows with the table's rows and that claims to be online."""
    indexes = purge_task_indexes(home.tasks.name, "mysql")
    undo = [f"ALTER TABLE {home.tasks_sql} " + ", ".join(f"DROP INDEX `{name}`" for name, _ in indexes)]
    undo.append(f"ALTER TABLE {home.tasks_sql} DROP COLUMN `{COMPLETED_AT_COLUMN}`")
    redo = [
        f"ALTER TABLE {home.tasks_sql} ADD COLUMN `{COMPLETED_AT_COLUMN}` BIGINT AS ({COMPLETED_AT_EXPRESSION}) "
        "VIRTUAL, ALGORITHM=INSTANT"
    ]
    for name, columns in indexes:
        keys = ", ".join(f"`{column}`" for column in columns)
        redo.append(f"ALTER TABLE {home.tasks_sql} ADD INDEX `{name}` ({keys}), ALGORITHM=INPLACE, LOCK=NONE")
    return undo, redo


def change_statements(home: ShardTables, algorithm: str, change: str) -> list[str]:
    """What the migration sends to one task table during the window."""
    if change == "task_purge_index":
        return purge_index_statements(home)[1]
    return [alter_statement(home.tasks_sql, algorithm, change)]


def undo_purge_index(layout: Layout) -> None:
    """Before the load, every task table as it was before migration 0026 (blocking; empty tables: fast)."""
    connections: dict[str, Any] = {}
    try:
        for home in layout.shards:
            url = home.database.engine_url
            connection = connections.get(url) or connections.setdefault(url, _connect(url))
            with connection.cursor() as cursor:
                for statement in purge_index_statements(home)[0]:
                    cursor.execute(statement)
    finally:
        for connection in connections.values():
            connection.close()


def run_alters(layout: Layout, algorithm: str, change: str) -> tuple[list[tuple[str, float]], str | None]:
    """The migration on every task table, one after the other (blocking): (table, seconds) of each, and
    the server's refusal (say, ``ALGORITHM=INSTANT is not supported``) that stopped it, if one did."""
    tables: list[ShardTables] = list(layout.shards)
    timings: list[tuple[str, float]] = []
    connections: dict[str, Any] = {}
    try:
        for home in tables:
            url = home.database.engine_url
            connection = connections.get(url) or connections.setdefault(url, _connect(url))
            began = time.perf_counter()
            try:
                with connection.cursor() as cursor:
                    for statement in change_statements(home, algorithm, change):
                        cursor.execute(statement)
            except pymysql.err.OperationalError as error:
                return timings, f"{home.tasks_sql}: {error.args[-1]}"
            timings.append((home.tasks_sql, time.perf_counter() - began))
    finally:
        for connection in connections.values():
            connection.close()
    return timings, None


def alter_figures(timings: Sequence[tuple[str, float]]) -> dict[str, Any]:
    seconds = sorted(took for _, took in timings)
    slowest = max(timings, key=lambda timing: timing[1]) if timings else ("", 0.0)
    return {
        "tables": len(timings),
        "total_s": round(sum(seconds), 3),
        "per_table_p50_ms": round(seconds[len(seconds) // 2] * 1000, 1) if seconds else None,
        "per_table_max_ms": round(slowest[1] * 1000, 1),
        "slowest_table": slowest[0],
    }


# ---- the run ---------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, url: str) -> dict[str, Any]:
    prefix = f"tjbench_{secrets.token_hex(3)}"
    storage = StorageSettings(urls=[url], topology=args.topology, database_prefix=prefix)
    layout = Layout(storage)
    loads = {"start": load_average()}
    warnings: list[str] = []
    try:
        scheduler = {"cycle_s": args.cycle_s, "load_lead_s": args.load_lead_s}
        settings = {**NODE_SETTINGS, "scheduler": scheduler, "storage": {"database_prefix": prefix}}
        with node_process(storage_urls=[url], topology=args.topology, settings=settings) as node:
            say(f"node {node.pid} on {node.base_url} (log {node.log_path}); {len(layout.shards)} task tables")
            async with ClientSession() as session:
                app_id, _ = await create_app(session, node.base_url, node.admin_key)
            async with SinkProcess(SinkConfig()) as sink:
                callback = CallbackSpec((sink.callback_url,), timeout_ms=3000)
                started = now_ms()
                template = _values(one_shot(0, app_id, started + PARKED_DUE_IN_MS, callback, started))
                if args.change == "task_purge_index":
                    await asyncio.to_thread(undo_purge_index, layout)
                    say("migration 0026 undone on every task table (its index and virtual column dropped)")
                say(f"loading {args.tasks:,} parked tasks ({args.load_workers} connections)")
                clock = time.perf_counter()
                await asyncio.to_thread(
                    load_parked, layout, template, args.tasks, started + PARKED_DUE_IN_MS, args.load_workers
                )
                load_s = time.perf_counter() - clock
                say(f"loaded in {load_s:.1f} s ({load_s / max(args.tasks / 1e6, 1e-9):.1f} s per million)")

                due_count = round(args.rate * args.window_s)
                lead_s = due_count / 20_000 + args.cycle_s + args.load_lead_s + 10
                window_start = now_ms() + round(lead_s * 1000)
                window_end = window_start + round(args.window_s * 1000)
                rng = random.Random(7)
                shards = list(range(len(layout.shards)))
                due_ids = mint_ids([rng.choice(shards) for _ in range(due_count)], started - 2 * 86_400_000)
                instants = [window_start + math.floor(n * 1000 / args.rate) for n in range(due_count)]
                registered = dict(zip(due_ids, instants, strict=True))
                due = [one_shot(task_id, app_id, at, callback, started) for task_id, at in registered.items()]
                say(f"seeding {due_count:,} due tasks ({args.rate:g}/s over {args.window_s:g} s)")
                await asyncio.to_thread(seed, layout, due)
                del due
                if now_ms() > window_start - (args.cycle_s + args.load_lead_s) * 1000:
                    warnings.append("the due tasks were seeded after their first cycle's load began: early ones late")

                await _sleep_until(window_start + round(args.alter_at_s * 1000))
                loads["alter_start"] = load_average()
                say(f"migrating: {args.change}, {args.algorithm}, on {len(shards)} task tables")
                alter_start = now_ms()
                timings, refused = await asyncio.to_thread(run_alters, layout, args.algorithm, args.change)
                alter_end = now_ms()
                loads["alter_end"] = load_average()
                say(
                    f"migrated in {(alter_end - alter_start) / 1000:.2f} s"
                    if refused is None
                    else f"refused: {refused}"
                )
                if refused is not None:
                    warnings.append(f"the server refused the migration after {len(timings)} tables: {refused}")
                if alter_end > window_end:
                    warnings.append("the migration outlasted the window: its end was not measured")

                records = await drain(sink, len(registered), window_end, args.drain_timeout_s, loads)
    finally:
        if not args.keep:
            drop_databases(storage)

    delivery = account(registered, records)
    phases = Phases(window_start, window_end, alter_start, alter_end)
    lateness = {
        phase: _lateness_json(lateness_between(delivery, start, end)) for phase, (start, end) in phases.spans().items()
    }
    return {
        "bench": "online_migration",
        "tasks": args.tasks,
        "topology": args.topology,
        "rate_per_s": args.rate,
        "window_s": args.window_s,
        "load": {"s": round(load_s, 1), "s_per_million": round(load_s / max(args.tasks / 1e6, 1e-9), 1)},
        "migration": {
            "change": args.change,
            "algorithm": args.algorithm,
            "wall_s": round((alter_end - alter_start) / 1000, 3),
        }
        | alter_figures(timings)
        | {"refused": refused},
        "fires": {
            "due": delivery.registered,
            "delivered": delivery.delivered,
            "missing": delivery.missing,
            "duplicates": delivery.duplicates,
            "unexpected": delivery.unexpected,
            "lateness_ms": lateness,
            "largest_gap_during_ms": _round(largest_gap_ms(delivery.first_receipts_us, alter_start, alter_end)),
            "around_migration_by_1s": timeline(delivery, alter_start - 5000, 15.0, 1.0),
        },
        "load_average": loads,
        "warnings": warnings,
        "machine": machine(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        if args.storage:
            url = args.storage
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tjobs-migration-bench-")))
            url, _pid = stack.enter_context(bench_mariadb(root, args.buffer_pool, args.redo_log))
        say(f"server: {url.split('@', 1)[1]}")
        return asyncio.run(bench(args, url))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks online_migration", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--tasks", type=int, default=10_000_000, help="parked tasks in the task tables")
    parser.add_argument("--rate", type=float, default=1000.0, help="due one-shot fires per second")
    parser.add_argument("--window-s", type=float, default=90.0, help="how long the due tasks come due")
    parser.add_argument("--alter-at-s", type=float, default=30.0, help="start the migration this far into it")
    parser.add_argument("--algorithm", choices=tuple(ALGORITHMS), default="INSTANT", help="ALGORITHM and LOCK")
    parser.add_argument(
        "--change",
        choices=("task_purge_index", "add_column", "table_options"),
        default="task_purge_index",
        help="task_purge_index: migration 0026 (undone before the load, --algorithm ignored); add_column: ADD "
        "COLUMN bench_probe; table_options: 0010's STATS_AUTO_RECALC=0 re-applied",
    )
    parser.add_argument("--topology", default="1x4x16", help="the node's storage.topology")
    parser.add_argument("--load-workers", type=int, default=2, help="connections loading the parked tasks")
    parser.add_argument("--drain-timeout-s", type=float, default=60.0)
    parser.add_argument("--cycle-s", type=int, default=10, help="the node's scheduler.cycle_s")
    parser.add_argument("--load-lead-s", type=int, default=5, help="the node's scheduler.load_lead_s")
    parser.add_argument("--buffer-pool", default="2G", help="innodb_buffer_pool_size of the bench's server")
    parser.add_argument("--redo-log", default="1G", help="innodb_log_file_size of the bench's server")
    parser.add_argument("--storage", help="a running MariaDB (default: one of the bench's own)")
    parser.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    args = parser.parse_args(argv)
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
