"""Cluster-wide service levels (issue 16): ``GET /v1/slo?window=`` over a week of stored minutes, and what
the per-minute accounting costs a fire.

::

    python -m benchmarks slo --storage mysql+asyncmy://root@127.0.0.1:3306 [--apps 10] [--nodes 3] [--days 7]
    python -m benchmarks slo --fold [--fires 1000000] [--apps 20]

**Windows** (the default): migrates a fresh ``tjbench_<hex>`` prefix (``--topology``, dropped afterwards
unless ``--keep``), writes ``slo_minutes`` and ``slo_hours`` as ``--nodes`` nodes would have left them
after ``--days`` days of ``--apps`` busy apps (one row per app, minute and node, every minute up to the
current one, and the hours they add up to, through :meth:`TaskStore.add_slo_minutes`: the statements
the nodes' recorders use, ``--batch`` minutes a transaction), then starts a node on those databases
in this process and times ``GET /v1/slo?window=`` over HTTP on loopback for 7d, 1d and 1h: with one
app's key and with the admin key (every app), each ``--samples`` times; p50 and p99 in ms, every answer
a 200 whose fires match the seeded minutes, and the CPU per answer of this process (node and client)
and, with ``--server-pid``, of the MariaDB server (every client of it counts). The node's expensive-read
limit is raised so the samples are not throttled.

**Fold** (``--fold``, no database): CPU per fire of the per-minute accounting alone, in process
(``process_time``): :meth:`ServiceLevels.observe_fire` against what it did before the minutes existed
(the lateness slot only), the minute fold of one flow outcome, and the recorder's hand-over
(:meth:`MinuteFolds.take` and its rows) shared by a minute's fires at ``--rate`` fires/s.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import json
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.dialects import mysql

from testkit import run_node
from testkit.databases import drop_databases
from tjobs.model import SLO_LATENESS_SLOTS, App, SloCounts, SloMinute
from tjobs.observability.metrics import LATENESS_BUCKETS_S
from tjobs.observability.slo import MS_PER_MINUTE, MinuteFolds, RecentLateness, ServiceLevels
from tjobs.service.apps import hash_api_key
from tjobs.settings import StorageSettings, load_settings
from tjobs.stores.migrate import migrate
from tjobs.stores.sql_layout import create_engine_for
from tjobs.stores.sql_slo import _row, sum_statement
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

WINDOWS = ("7d", "1d", "1h")
ADMIN_KEY = "slo-bench-admin-key-0123456789abcdef"
APP_KEY = "slo-bench-app-key-0123456789abcdef"


def node_ids(nodes: int) -> list[str]:
    """Node ids as ``tjobs serve`` makes them (``<host>-<port>``)."""
    return [f"tjobs-bench-host-{n}-8080" for n in range(nodes)]


def seeded_minutes(
    apps: int, to_minute: int, minutes: int, rng: random.Random, fires_per_minute: int = 6_000
) -> Iterator[SloMinute]:
    """One node's rows: every app, every minute of ``[to_minute - minutes, to_minute)``, about
    ``fires_per_minute`` fires each, nearly all delivered on time, a few late, dead, missed or throttled."""
    for minute in range(to_minute - minutes, to_minute):
        for app in range(apps):
            fires = fires_per_minute + rng.randrange(-fires_per_minute // 10, fires_per_minute // 10 + 1)
            late = rng.randrange(0, fires // 100 + 1)
            lateness = [0] * SLO_LATENESS_SLOTS
            lateness[1] = fires - late
            lateness[2 + rng.randrange(SLO_LATENESS_SLOTS - 2)] = late
            dead = rng.randrange(3) // 2
            counts = SloCounts(fires, fires - dead, dead, rng.randrange(3) // 2, rng.randrange(5) // 4, tuple(lateness))
            yield SloMinute(f"app-{app}", minute, counts)


def batched(minutes: Iterator[SloMinute], size: int) -> Iterator[list[SloMinute]]:
    batch: list[SloMinute] = []
    for minute in minutes:
        batch.append(minute)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def p50_p99(samples_ms: Sequence[float]) -> tuple[float, float]:
    """Nearest-rank p50 and p99 of the samples."""
    ordered = sorted(samples_ms)
    return ordered[(len(ordered) - 1) // 2], ordered[min(len(ordered) - 1, -(-len(ordered) * 99 // 100) - 1)]


async def timed(samples: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    spent: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        spent.append((time.perf_counter() - started) * 1000)
    return spent


async def seed(store: SQLAlchemyTaskStore, args: argparse.Namespace, to_minute: int) -> dict[str, dict[int, int]]:
    """Write every node's rows; return the fires per app (``"*"``: all) and minute."""
    seeded: dict[str, dict[int, int]] = {}
    for n, node_id in enumerate(node_ids(args.nodes)):
        rng = random.Random(n)
        for batch in batched(seeded_minutes(args.apps, to_minute, args.days * 1440, rng), args.batch):
            await store.add_slo_minutes(node_id, batch)
            for minute in batch:
                for subject in (minute.app_id, "*"):
                    per_minute = seeded.setdefault(subject, {})
                    per_minute[minute.minute] = per_minute.get(minute.minute, 0) + minute.counts.fires
    return seeded


def fires_between(per_minute: dict[int, int], start_iso: str, end_iso: str) -> int:
    """The seeded fires of the minutes an answer's ``from`` .. ``to`` (ISO instants, end excluded) covers."""
    start, end = (int(datetime.fromisoformat(iso).timestamp()) // 60 for iso in (start_iso, end_iso))
    return sum(fires for minute, fires in per_minute.items() if start <= minute < end)


async def windows_run(args: argparse.Namespace) -> None:
    prefix = f"tjbench_{secrets.token_hex(3)}"
    storage = StorageSettings(urls=[args.storage], topology=args.topology, database_prefix=prefix)
    await migrate(storage)
    try:
        expected = await seed_and_explain(storage, args)
        await time_windows(storage, args, expected)
    finally:
        if not args.keep:
            drop_databases(storage)


async def seed_and_explain(storage: StorageSettings, args: argparse.Namespace) -> dict[str, dict[int, int]]:
    store = SQLAlchemyTaskStore(storage)
    await store.start()
    try:
        to_minute = time.time_ns() // 1_000_000 // MS_PER_MINUTE  # the node's current minute is not seeded
        started = time.perf_counter()
        expected = await seed(store, args, to_minute)
        rows = args.apps * args.nodes * args.days * 1440
        print(f"seeded {rows:,} rows ({args.apps} apps x {args.nodes} nodes x {args.days * 1440:,} minutes)", end="")
        print(f" in {time.perf_counter() - started:.0f} s; databases {storage.database_prefix}_*")
        await store.put_app(App("app-0", "app-0", hash_api_key(APP_KEY), [secrets.token_hex(16)]))
        if args.explain and store.layout.apps_database.schema:
            await explain(storage, store.layout.apps_database.schema, to_minute)
    finally:
        await store.close()
    return expected


async def time_windows(storage: StorageSettings, args: argparse.Namespace, expected: dict[str, dict[int, int]]) -> None:
    settings = load_settings(
        None,
        storage=storage.model_dump(),
        api={"admin_key": ADMIN_KEY},
        rate_limits={"app_expensive_reads_per_s": 1_000_000.0},
    )
    async with run_node(settings) as running, httpx.AsyncClient(base_url=running.base_url, timeout=60) as client:

        async def get(key: str, window: str, subject: str) -> None:
            answer = await client.get(f"/v1/slo?window={window}", headers={"authorization": f"Bearer {key}"})
            if answer.status_code != 200:
                raise RuntimeError(f"{window}: {answer.status_code} {answer.text}")
            body = answer.json()
            if body["fires"] != fires_between(expected[subject], body["from"], body["to"]):
                raise RuntimeError(f"{window} fires {body['fires']} do not match the seeded minutes")

        columns = f"{'caller':<16} {'window':<7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'cpu ms':>7}"
        print(columns + (f" {'db cpu ms':>9}" if args.server_pid else ""))
        for caller, key, subject in (("app key", APP_KEY, "app-0"), ("admin, all apps", ADMIN_KEY, "*")):
            for window in WINDOWS:
                call = functools.partial(get, key, window, subject)
                await timed(args.warmup, call)
                cpu_started, db_started = time.process_time(), server_cpu_s(args.server_pid)
                spent = await timed(args.samples, call)
                cpu_ms = (time.process_time() - cpu_started) / args.samples * 1000
                p50, p99 = p50_p99(spent)
                line = f"{caller:<16} {window:<7} {p50:>8.1f} {p99:>8.1f} {max(spent):>8.1f} {cpu_ms:>7.2f}"
                if args.server_pid:
                    line += f" {(server_cpu_s(args.server_pid) - db_started) / args.samples * 1000:>9.2f}"
                print(line)


def server_cpu_s(pid: int | None) -> float:
    """The CPU seconds (user + system) the database server process has used (``/proc/<pid>/stat``); 0
    without a pid. Every client of that server counts, so a busy shared server inflates it."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tables(plan: Any) -> list[dict[str, Any]]:
    """Every ``"table"`` object of an ``ANALYZE FORMAT=JSON`` plan, in order (a ``UNION ALL`` has one per part)."""
    if isinstance(plan, dict):
        table = plan.get("table")
        if isinstance(table, dict):
            return [table]
        children: Any = plan.values()
    elif isinstance(plan, list):
        children = plan
    else:
        return []
    return [table for child in children for table in _tables(child)]


def _total_ms(plan: Any) -> float:
    """The statement's time: its query block's ``r_total_time_ms``, or those of a ``UNION ALL``'s parts."""
    if isinstance(plan, dict):
        if "r_total_time_ms" in plan:
            return float(plan["r_total_time_ms"])
        return sum(_total_ms(child) for child in plan.values())
    if isinstance(plan, list):
        return sum(_total_ms(child) for child in plan)
    return 0.0


async def explain(storage: StorageSettings, schema: str, to_minute: int) -> None:
    """MariaDB's ``ANALYZE FORMAT=JSON`` of the statements the store sends for the 7-day and 1-day sums
    (one app, every app; :func:`tjobs.stores.sql_slo.sum_statement`): per table read, plan, rows, time."""
    engine = create_engine_for(storage.urls[0], storage)
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f"USE `{schema}`"))
            for window, minutes in (("7d", 10_080), ("1d", 1_440)):
                for label, app_id in (("app-0", "app-0"), ("all apps", None)):
                    statement = sum_statement(app_id, to_minute + 1 - minutes, to_minute + 1)
                    sql = str(statement.compile(dialect=mysql.dialect(), compile_kwargs={"literal_binds": True}))
                    plan = json.loads((await conn.execute(text(f"ANALYZE FORMAT=JSON {sql}"))).scalar_one())
                    print(f"ANALYZE {window} {label}: total {_total_ms(plan):.1f} ms")
                    for table in _tables(plan):
                        keys = ("table_name", "access_type", "key", "rows", "r_rows", "r_table_time_ms")
                        print(f"    { ({key: table.get(key) for key in keys}) }")
    finally:
        await engine.dispose()


def fold_costs_us(fires: int, apps: int, rate: float) -> dict[str, float]:
    """CPU µs per fire of the per-minute accounting, in process (see the module's docstring)."""
    names = [f"app-{i}" for i in range(apps)]
    clock_ms = [1_800_000_000_000]

    def now_ms() -> int:
        return clock_ms[0]

    levels = ServiceLevels(now_ms)
    lateness_only = RecentLateness(now_ms)
    bounds = LATENESS_BUCKETS_S
    costs: dict[str, float] = {}

    def timed_loop(label: str, body: Callable[[], None]) -> None:
        started = time.process_time()
        body()
        costs[label] = (time.process_time() - started) / fires * 1e6

    def before() -> None:  # observe_fire without the minute fold
        for i in range(fires):
            now = now_ms()
            lateness_only.observe_slot(names[i % apps], bisect.bisect_left(bounds, 0.012), now)

    def fire() -> None:
        for i in range(fires):
            levels.observe_fire(names[i % apps], 0.012)

    def outcome_fold() -> None:  # the minute part of observe_outcome
        minutes = levels.minutes
        for i in range(fires):
            minutes.add(names[i % apps], now_ms(), 1)

    def empty() -> None:
        for i in range(fires):
            names[i % apps]

    timed_loop("loop", empty)
    for _ in range(2):  # the second round counts (warm dicts)
        timed_loop("before", before)
        timed_loop("fire", fire)
        timed_loop("outcome", outcome_fold)
    folds = MinuteFolds()
    for i in range(apps):
        folds.add(names[i], clock_ms[0], 0, 1)
    started = time.process_time()
    rounds = 200
    for _ in range(rounds):
        for minute in folds.take():
            _row("node", minute)
        for i in range(apps):
            folds.add(names[i], clock_ms[0], 0, 1)
    take_us = (time.process_time() - started) / rounds * 1e6
    fires_per_minute = rate * 60
    loop = costs.pop("loop")
    return {
        "fire_before_us": costs["before"] - loop,
        "fire_now_us": costs["fire"] - loop,
        "fire_fold_us": costs["fire"] - costs["before"],
        "outcome_fold_us": costs["outcome"] - loop,
        "take_per_minute_us": take_us,
        "take_per_fire_us": take_us / fires_per_minute,
        "total_per_fire_us": costs["fire"] - costs["before"] + costs["outcome"] - loop + take_us / fires_per_minute,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks slo", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--storage", help="a MariaDB URL (mysql+asyncmy://...) or a SQLite directory URL")
    parser.add_argument("--topology", default="8x4x16")
    parser.add_argument("--apps", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--days", type=int, default=7, help="minutes stored: days x 1,440 up to now")
    parser.add_argument("--batch", type=int, default=2_000, help="minutes per seeding statement")
    parser.add_argument("--samples", type=int, default=100, help="timed answers per window and caller")
    parser.add_argument("--warmup", type=int, default=3, help="untimed answers first")
    parser.add_argument("--keep", action="store_true", help="keep the databases (named in the output)")
    parser.add_argument("--explain", action="store_true", help="MariaDB's ANALYZE of the 7-day and 1-day sums first")
    parser.add_argument("--server-pid", type=int, help="the MariaDB server's pid: its CPU per answer too")
    parser.add_argument("--fold", action="store_true", help="the accounting's CPU per fire, in process")
    parser.add_argument("--fires", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=2_000.0, help="fires/s the take is shared by (--fold)")
    args = parser.parse_args(argv)
    if args.fold:
        for name, value in fold_costs_us(args.fires, args.apps, args.rate).items():
            print(f"{name:<20} {value:>8.3f}")
        return
    if not args.storage:
        parser.error("--storage is required (or --fold)")
    asyncio.run(windows_run(args))


if __name__ == "__main__":
    main()
