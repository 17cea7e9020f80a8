"""Store backends for the contract suite: memory, SQLite files in a temp dir, and a real MariaDB.

SQL backends are migrated once per session (topology 2x2x4: 16 shards in 4 logical databases) and
wiped before each test. MariaDB databases get a random prefix (``tjobsct_<hex>_NN``) and are dropped
at the end of the session; the server comes from ``TJOBS_TEST_MYSQL_URL`` (see ``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, closing
from typing import Any, TypeVar

from sharding import TaskIdGenerator, Topology, shard_for_key
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.model import (
    DeliveryMode,
    FireIntent,
    FirePlan,
    Flow,
    FlowKind,
    FlowRun,
    FlowStatus,
    FlowUpdate,
    MisfirePolicy,
    NewFlow,
    RunStatus,
    Task,
    TaskStatus,
)
from tjobs.settings import StorageSettings
from tjobs.specs import CallbackSpec, IntervalSpec
from tjobs.stores.base import TaskStore
from tjobs.stores.sql_layout import MYSQL, DatabaseHome, Layout, create_engine_for, sqlite_path

T = TypeVar("T")

TOPOLOGY = "2x2x4"
NOW_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z
IDS = TaskIdGenerator(Topology.parse(TOPOLOGY).shard_count)
_ID_CLOCK = itertools.count(1)  # every minted id gets its own millisecond: unique and ascending


def run_in_thread(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion on a fresh event loop in another thread (fixtures may be
    set up while a test's loop is already running)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())
        except BaseException as error:  # handed back to the caller
            box["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def mariadb_settings(url: str) -> StorageSettings:
    return StorageSettings(urls=[url], topology=TOPOLOGY, database_prefix=f"tjobsct_{secrets.token_hex(4)}")


async def wipe(settings: StorageSettings) -> None:
    """Delete every row of every table of the topology (much faster than re-migrating). SQLite: one
    script per file over sqlite3 (an engine per file and a statement per table took ~50 ms of CPU a test)."""
    layout = Layout(settings)
    if layout.dialect != MYSQL:
        await asyncio.to_thread(_wipe_sqlite, layout)
        return
    for url in layout.engine_urls():
        engine = create_engine_for(url, settings)
        try:
            async with engine.begin() as conn:
                for home in layout.databases:
                    if home.engine_url != url:
                        continue
                    for name in _wiped_tables(layout, home):
                        await conn.exec_driver_sql(f"DELETE FROM `{home.name}`.{name}")
        finally:
            await engine.dispose()


def _wiped_tables(layout: Layout, home: DatabaseHome) -> list[str]:
    tables = range(layout.topology.tables_per_database)
    names = [f"tasks_{t:02d}" for t in tables] + [f"flows_{t:02d}" for t in tables]
    names += [f"task_targets_{t:02d}" for t in tables] + ["task_counts"]
    if home.index == 0:
        names += ["apps", "targets", "slo_minutes", "slo_hours", "hot_changes"]
        names += ["users", "api_tokens", "console_sessions", "operator_jobs"]
    return names


def _wipe_sqlite(layout: Layout) -> None:
    for home in layout.databases:
        with closing(sqlite3.connect(sqlite_path(home.engine_url), timeout=30)) as conn:
            conn.executescript(
                "PRAGMA synchronous=OFF;" + "".join(f"DELETE FROM {name};" for name in _wiped_tables(layout, home))
            )


async def drop_databases(settings: StorageSettings) -> None:
    layout = Layout(settings)
    for url in layout.engine_urls():
        engine = create_engine_for(url, settings)
        try:
            async with engine.begin() as conn:
                for home in layout.databases:
                    if home.engine_url == url:
                        await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{home.name}`")
        finally:
            await engine.dispose()


def make_task(
    *,
    app_id: str = "app-a",
    key: str | None = None,
    shard: int | None = None,
    next_run_at_ms: int | None = NOW_MS,
    every_ms: int = 60_000,
    status: TaskStatus = TaskStatus.ACTIVE,
    max_fires: int | None = None,
    now_ms: int = NOW_MS,
    name: str = "t",
) -> Task:
    """A task in ``shard`` (or the key's shard, or a random one) with an interval-like schedule."""
    if key is not None:
        shard = shard_for_key(app_id, key, IDS.shard_count)
    elif shard is None:
        shard = IDS.random_shard()
    schedule = IntervalSpec(every_ms, start_at_ms=now_ms, max_fires=max_fires)
    return Task(
        id=IDS.mint(shard, NOW_MS + next(_ID_CLOCK)),
        app_id=app_id,
        name=name,
        key=key,
        schedule=schedule,
        callback=CallbackSpec(("https://receiver.example/hook",), "POST", {"x": "1"}),
        payload={"order": 123, "note": "héllo ✓"},
        misfire_policy=MisfirePolicy.FIRE_NOW,
        delivery=DeliveryMode.AT_LEAST_ONCE,
        status=status,
        next_run_at_ms=next_run_at_ms,
        version=1,
        fire_count=0,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
    )


def interval_planner(task: Task, intent: FireIntent, now_ms: int) -> FirePlan | None:
    """Deterministic test planner: one pending flow at the instant, next run one period later;
    ``max_fires`` completes the task."""
    assert isinstance(task.schedule, IntervalSpec)
    every_ms = task.schedule.every_ms
    flow = NewFlow(intent.scheduled_at_ms, FlowKind.SCHEDULED, FlowStatus.PENDING, 0, now_ms)
    next_run: int | None = intent.scheduled_at_ms + every_ms
    max_fires = task.schedule.max_fires
    if max_fires is not None and task.fire_count + 1 >= max_fires:
        next_run = None
    status = TaskStatus.ACTIVE if next_run is not None else TaskStatus.COMPLETED
    return FirePlan([flow], next_run, status, 1)


def intent_of(task: Task) -> FireIntent:
    assert task.next_run_at_ms is not None
    return FireIntent(task.id, task.next_run_at_ms, task.version)


async def fire_once(store: TaskStore, shard: int, task: Task | None = None) -> tuple[Task, Flow]:
    """``task`` (else an interval task on ``shard``) stored and fired once at its next run: the task as the
    fire left it and the flow it wrote. A task given is planned by the real planner (its own schedule)."""
    planner = interval_planner if task is None else FirePlanner(FirePolicy(60_000, 10, 3_600_000, 2_000))
    task = await store.insert_task(task or make_task(shard=shard))
    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS, planner)
    assert outcome.task is not None
    [flow] = outcome.flows
    return outcome.task, flow


RUN_DEADLINE_MS = NOW_MS + 60_000


async def fire_running(store: TaskStore, shard: int, task: Task | None = None) -> tuple[Task, Flow]:
    """:func:`fire_once`, then the flow's run started (its send answered 202 at ``NOW_MS + 10``, attempt 1,
    deadline :data:`RUN_DEADLINE_MS`): the task as the fire left it and the flow as the fire wrote it."""
    fired_task, flow = await fire_once(store, shard, task)
    run = FlowRun(RunStatus.RUNNING, 1, NOW_MS + 10, RUN_DEADLINE_MS)
    started = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.RUNNING, 1, RUN_DEADLINE_MS, 202, run=run)
    await store.record_flow_updates([started], NOW_MS + 10)
    return fired_task, flow


def manual_flow(task: Task, at_ms: int, status: FlowStatus = FlowStatus.PENDING) -> Flow:
    """A manual flow of ``task`` at ``at_ms``, no attempt made."""
    return Flow(task.id, at_ms, task.app_id, FlowKind.MANUAL, status, 0, at_ms, at_ms, at_ms)


STATEMENT_KINDS = ("Com_select", "Com_update", "Com_commit")


async def _session_counts(conn: Any) -> dict[str, int]:
    cursor = conn.cursor()
    try:
        await cursor.execute(f"SHOW SESSION STATUS WHERE Variable_name IN {STATEMENT_KINDS}")
        return {str(name): int(value) for name, value in await cursor.fetchall()}
    finally:
        await cursor.close()


def count_statements(pool: Any, monkeypatch: Any) -> list[dict[str, int]]:
    """Patch ``pool`` (a MariaDB :class:`~tjobs.stores.sql_direct.DirectPool`) so that each transaction it
    gives appends what the server counted of its session while the caller held it: statements by kind
    (:data:`STATEMENT_KINDS`), a ``COMMIT`` sent with them included, the pool's own ``COMMIT`` after the
    block not."""
    counted: list[dict[str, int]] = []
    plain = pool.transaction

    @asynccontextmanager
    async def transaction(*, commit: bool = True) -> AsyncIterator[Any]:
        async with plain(commit=commit) as conn:
            before = await _session_counts(conn)
            yield conn
            after = await _session_counts(conn)
            counted.append({kind: after[kind] - before[kind] for kind in STATEMENT_KINDS})

    monkeypatch.setattr(pool, "transaction", transaction)
    return counted


async def handler_reads(conn: Any) -> int:
    """The rows a MariaDB session has read so far: its ``Handler_read%`` counters summed."""
    rows: list[Any] = list((await conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'")).all())
    return sum(int(row[1]) for row in rows)


def measure_writes(monkeypatch: Any) -> list[int]:
    """The rows each write transaction of the SQL store examines from now on, on its own session: its
    ``Handler_read%`` counters read when it opens and before it commits, less what reading them costs."""
    from tjobs.stores.sql.connections import SqlBase

    reads: list[int] = []
    original = SqlBase._write

    @asynccontextmanager
    async def measured(self: Any, url: str) -> AsyncIterator[Any]:
        async with original(self, url) as conn:
            first = await handler_reads(conn)
            idle = await handler_reads(conn) - first  # what one SHOW costs
            before = await handler_reads(conn)
            yield conn
            reads.append(await handler_reads(conn) - before - idle)

    monkeypatch.setattr(SqlBase, "_write", measured)
    return reads


def fill_ended_flows(probe: Any, home: Any, like: int, count: int) -> None:
    """``count`` delivered flows more in ``home``'s flows table (MariaDB; copies of task ``like``'s flow at
    other keys, tasks 1..count, an instant each), its statistics renewed: a table of a deployment's rows,
    where the optimizer chooses among the indexes as it would there."""
    with probe.cursor() as cursor:
        cursor.execute(f"SHOW COLUMNS FROM {home.flows_sql}")
        copied = ", ".join(
            str(row[0]) for row in cursor.fetchall() if row[0] not in ("task_id", "scheduled_at", "status")
        )
        cursor.execute(
            f"INSERT INTO {home.flows_sql} (task_id, scheduled_at, status, {copied}) "
            f"SELECT seq, {NOW_MS} - 1000 * seq, 'delivered', {copied} FROM {home.database.schema}.seq_1_to_{count} "
            f"JOIN {home.flows_sql} f WHERE f.task_id = %s",
            (like,),
        )
        cursor.execute(f"ANALYZE TABLE {home.flows_sql}")
        cursor.fetchall()
