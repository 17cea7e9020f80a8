"""The SQL store against real databases: migration, query plans, racing nodes, unreachable servers."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from sharding import shard_of_task_id
from testkit.mariadb_template import fresh_mariadb, release_mariadb
from tests.contract.backends import (
    NOW_MS,
    drop_databases,
    intent_of,
    interval_planner,
    make_task,
    mariadb_settings,
)
from tjobs.errors import StorageUnavailable
from tjobs.model import TaskStatus
from tjobs.settings import StorageSettings
from tjobs.stores import create_store, sql_load
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.migrate import MIGRATIONS_DIR, migrate
from tjobs.stores.sql_layout import create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


@pytest.fixture
async def mariadb(mysql_url: str) -> AsyncIterator[StorageSettings]:
    settings = mariadb_settings(mysql_url)
    try:
        yield settings
    finally:
        await drop_databases(settings)


@pytest.fixture
async def migrated_mariadb(mysql_url: str) -> AsyncIterator[StorageSettings]:
    """Databases as ``migrate`` leaves new ones (testkit/mariadb_template.py), for tests not of migrate."""
    settings = await fresh_mariadb(mariadb_settings(mysql_url))
    try:
        yield settings
    finally:
        release_mariadb(settings)


HEAD_REVISION = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()

# ---- migrate ------------------------------------------------------------------------------------


async def test_migrate_creates_one_file_per_database_and_is_idempotent_on_sqlite(tmp_path: Path) -> None:
    settings = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="2x2x4")
    seen: list[tuple[str, int, int]] = []
    await migrate(settings, lambda name, done, total: seen.append((name, done, total)))

    assert sorted(name for name, _, _ in seen) == [f"tjobs_{i:02d}" for i in range(4)]
    assert [done for _, done, _ in seen] == [1, 2, 3, 4] and {total for _, _, total in seen} == {4}
    for index in range(4):
        with sqlite3.connect(tmp_path / "data" / f"tjobs_{index:02d}.db") as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD_REVISION,)]
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        expected = {f"{kind}_{t:02d}" for kind in ("tasks", "flows", "task_targets") for t in range(4)}
        first_only = {"apps", "tjobs_layout", "hot_changes", "targets", "tjobs_shard_map", "slo_minutes", "slo_hours"}
        first_only |= {"alert_settings", "alert_states", "users", "api_tokens", "console_sessions", "audit_log"}
        first_only |= {"calendars", "operator_jobs", "task_parents"}
        assert tables == expected | {"alembic_version", "tjobs_fence", "task_counts"} | (
            first_only if index == 0 else set()
        )

    started = time.perf_counter()
    await migrate(settings)  # second run: nothing to do
    assert time.perf_counter() - started < 5


async def test_migrate_keeps_a_hot_changes_table_an_earlier_node_created(tmp_path: Path) -> None:
    """Nodes before revision 0004 created the DB-poll table themselves on start."""
    (tmp_path / "data").mkdir()
    with sqlite3.connect(tmp_path / "data" / "tjobs_00.db") as db:
        db.execute("CREATE TABLE hot_changes (id INTEGER PRIMARY KEY, task_id BIGINT NOT NULL)")
        db.execute("INSERT INTO hot_changes (task_id) VALUES (7)")
    await migrate(StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x4"))
    with sqlite3.connect(tmp_path / "data" / "tjobs_00.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD_REVISION,)]
        assert db.execute("SELECT task_id FROM hot_changes").fetchall() == [(7,)]


@pytest.mark.mariadb
async def test_migrate_on_mariadb_is_idempotent(mariadb: StorageSettings) -> None:
    await migrate(mariadb)
    await migrate(mariadb)
    engine = create_engine_for(SQLAlchemyTaskStore(mariadb).layout.engine_urls()[0], mariadb)
    try:
        async with engine.connect() as conn:
            prefix = mariadb.database_prefix
            rows = (
                await conn.exec_driver_sql(
                    "SELECT TABLE_SCHEMA, COUNT(*) FROM information_schema.TABLES "
                    f"WHERE TABLE_SCHEMA LIKE '{prefix}\\_%%' GROUP BY TABLE_SCHEMA ORDER BY TABLE_SCHEMA"
                )
            ).all()
            assert [tuple(row) for row in rows] == [
                (f"{prefix}_00", 31),
                (f"{prefix}_01", 15),
                (f"{prefix}_02", 15),
                (f"{prefix}_03", 15),
            ]
            engines = (
                await conn.exec_driver_sql(
                    "SELECT DISTINCT ENGINE, TABLE_COLLATION FROM information_schema.TABLES "
                    f"WHERE TABLE_SCHEMA LIKE '{prefix}\\_%%'"
                )
            ).all()
            assert [tuple(row) for row in engines] == [("InnoDB", "utf8mb4_bin")]
            assert await tables_recalculating_statistics(conn, prefix) == []
    finally:
        await engine.dispose()


async def tables_recalculating_statistics(conn: AsyncConnection, prefix: str) -> list[str]:
    """The deployment's tables InnoDB would re-sample in the background as rows change: every
    table is created with STATS_AUTO_RECALC=0, because that background pass held the dictionary
    while saving and stalled every statement opening a table for 1-4 s under 2,000 fires/s
    (docs/benchmarks.md, "InnoDB statistics stall")."""
    rows = await conn.exec_driver_sql(
        "SELECT CONCAT(TABLE_SCHEMA, '.', TABLE_NAME), CREATE_OPTIONS FROM information_schema.TABLES "
        f"WHERE TABLE_SCHEMA LIKE '{prefix}\\_%%' ORDER BY 1"
    )
    tables = cast(list[tuple[str, str | None]], rows.all())
    return [name for name, options in tables if "stats_auto_recalc=0" not in (options or "").lower()]


@pytest.mark.mariadb
async def test_migrating_an_earlier_deployment_turns_background_statistics_off(mariadb: StorageSettings) -> None:
    await migrate(mariadb)
    engine = create_engine_for(SQLAlchemyTaskStore(mariadb).layout.engine_urls()[0], mariadb)
    try:
        prefix = mariadb.database_prefix
        async with engine.begin() as conn:  # as a deployment migrated before revision 0010 has it
            await conn.exec_driver_sql(f"DROP TABLE `{prefix}_00`.slo_hours")  # revision 0013 adds it
            for index in range(4):
                database = f"{prefix}_{index:02d}"
                names = await conn.exec_driver_sql(
                    f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{database}'"
                )
                for (name,) in names.all():
                    await conn.exec_driver_sql(f"ALTER TABLE `{database}`.`{name}` STATS_AUTO_RECALC=DEFAULT")
                    if name.startswith("flows_"):  # revisions 0011, 0012 and 0020 added them
                        await conn.exec_driver_sql(f"ALTER TABLE `{database}`.`{name}` DROP COLUMN payload")
                        await conn.exec_driver_sql(f"ALTER TABLE `{database}`.`{name}` DROP COLUMN attempt_log")
                        await conn.exec_driver_sql(f"ALTER TABLE `{database}`.`{name}` DROP COLUMN answers")
                await conn.exec_driver_sql(f"UPDATE `{database}`.alembic_version SET version_num = '0009_flow_routes'")
            assert len(await tables_recalculating_statistics(conn, prefix)) == 30 + 3 * 15  # slo_hours dropped
        await migrate(mariadb)
        async with engine.connect() as conn:
            assert await tables_recalculating_statistics(conn, prefix) == []
    finally:
        await engine.dispose()


# ---- query plans --------------------------------------------------------------------------------


@pytest.mark.mariadb
async def test_load_due_is_a_range_scan_of_the_status_next_run_index(migrated_mariadb: StorageSettings) -> None:
    mariadb = migrated_mariadb
    store = SQLAlchemyTaskStore(mariadb)
    await store.start()
    try:
        shard = 5
        rng = random.Random(7)
        tasks = [
            make_task(
                shard=shard,
                next_run_at_ms=NOW_MS + rng.randrange(0, 86_400_000),
                status=rng.choice([TaskStatus.ACTIVE] * 8 + [TaskStatus.PAUSED, TaskStatus.COMPLETED]),
            )
            for _ in range(3000)
        ]
        for start in range(0, len(tasks), 500):
            await store.insert_tasks(tasks[start : start + 500])
        home = store.layout.shards[shard]
        skip = (NOW_MS + 30_000, NOW_MS + 300_000)
        forms: dict[str, tuple[int, tuple[int, int] | None, tuple[int, int] | None]] = {
            "overdue and due": (NOW_MS + 60_000, None, None),
            "overdue and due, after": (NOW_MS + 60_000, (NOW_MS + 10_000, 1 << 40), None),
            # the cycle load: the overdue and the new cycle, not the span between; first page and later ones
            "skip": (NOW_MS + 600_000, None, skip),
            "skip, after below it": (NOW_MS + 600_000, (NOW_MS + 10_000, 1 << 40), skip),
            "skip, after above it": (NOW_MS + 600_000, (NOW_MS + 400_000, 1 << 40), skip),
        }
        # each form as the one text statement every path runs (sql_load: the direct pool's %s marks;
        # SQLite, or a URL without a direct pool, the same text with its driver's marks), parameters bound
        statements: dict[str, tuple[str, tuple[int, ...]]] = {}
        for name, (before_ms, after, skip_) in forms.items():
            statements[name] = sql, params = sql_load.load_due_query(home, before_ms, 5000, after, skip_)
            assert sql_load.load_due_query(home, before_ms, 5000, after, skip_, "?") == (sql.replace("%s", "?"), params)
        engine = create_engine_for(home.database.engine_url, mariadb)
        try:
            async with engine.connect() as conn:
                await conn.exec_driver_sql(f"USE `{home.database.name}`")
                await conn.exec_driver_sql(f"ANALYZE TABLE {home.tasks.name}")
                for name, (sql, params) in statements.items():
                    plan = (await conn.exec_driver_sql("EXPLAIN " + sql, params or None)).mappings().all()
                    assert len(plan) == 1, (name, plan)
                    row = plan[0]
                    assert (row["type"], row["key"]) == ("range", f"{home.tasks.name}_due"), (name, dict(row))
                    assert "filesort" not in (row["Extra"] or ""), (name, dict(row))
        finally:
            await engine.dispose()
    finally:
        await store.close()


# ---- racing nodes -------------------------------------------------------------------------------


@pytest.mark.mariadb
async def test_two_nodes_firing_the_same_batch_fire_each_task_once(migrated_mariadb: StorageSettings) -> None:
    # Given two nodes (two stores, two connection pools) that both believe they own every shard
    mariadb = migrated_mariadb
    node_a, node_b = SQLAlchemyTaskStore(mariadb), SQLAlchemyTaskStore(mariadb)
    await node_a.start()
    await node_b.start()
    try:
        tasks = [make_task(shard=i % 16, next_run_at_ms=NOW_MS) for i in range(240)]
        await node_a.insert_tasks(tasks)
        rng = random.Random(1)
        for round_ in range(4):
            current = [t for t in await asyncio.gather(*(node_a.get_task(t.id) for t in tasks)) if t]
            intents_a = [intent_of(t) for t in current]
            intents_b = list(intents_a)
            rng.shuffle(intents_a)
            rng.shuffle(intents_b)
            now_ms = NOW_MS + round_ * 60_000

            # When both commit the same intents at the same time, in different orders
            results = await asyncio.gather(
                *(
                    node.commit_fires(batch, now_ms, interval_planner)
                    for node, intents in ((node_a, intents_a), (node_b, intents_b))
                    for batch in (intents[:120], intents[120:])
                )
            )

            # Then every task fired exactly once this round (no deadlock surfaced, no duplicate)
            committed = [o.intent.task_id for outcomes in results for o in outcomes if o.committed]
            assert sorted(committed) == sorted(t.id for t in tasks)
        for task in tasks:
            flows = await node_b.list_flows(task.id, 10)
            assert [f.scheduled_at_ms for f in flows] == [NOW_MS + k * 60_000 for k in (3, 2, 1, 0)]
            stored = await node_b.get_task(task.id)
            assert stored is not None and (stored.version, stored.fire_count) == (5, 4)
    finally:
        await node_a.close()
        await node_b.close()


# ---- failures -----------------------------------------------------------------------------------


async def test_an_unreachable_server_is_storage_unavailable_without_the_password() -> None:
    settings = StorageSettings(urls=["mysql+asyncmy://tjobs:s3cret@127.0.0.1:1"], topology="2x2x4", connect_timeout_s=1)
    store = create_store(settings)
    await store.start()
    try:
        for call in (
            store.ping(),
            store.get_task(make_task(shard=3).id),
            store.commit_fires([intent_of(make_task(shard=9))], NOW_MS, interval_planner),
        ):
            with pytest.raises(StorageUnavailable) as error:
                await call
            assert "127.0.0.1:1" in error.value.message and "s3cret" not in error.value.message
    finally:
        await store.close()


async def test_ping_answers_while_every_pooled_connection_is_busy(mariadb: StorageSettings) -> None:
    # A burst of fires can hold every pooled connection for seconds; a node whose ping fails for
    # cluster.db_unreachable_max_s fences itself, so the ping must not queue behind them.
    store = SQLAlchemyTaskStore(mariadb)
    await store.start()
    url = store.layout.engine_urls()[0]
    capacity = 2 * mariadb.pool_size  # pool_size + max_overflow (tjobs.stores.sql_layout)
    holding = asyncio.Semaphore(0)
    release = asyncio.Event()

    async def hold() -> None:
        async with store._connect(url) as conn:  # what a fire transaction or a load holds
            await conn.execute(text("SELECT 1"))
            holding.release()
            await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(capacity)]
    try:
        for _ in range(capacity):
            await asyncio.wait_for(holding.acquire(), 10)
        await asyncio.wait_for(store.ping(), 1.0)
    finally:
        release.set()
        await asyncio.gather(*holders)
        await store.close()


async def test_a_missing_sqlite_directory_is_storage_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = create_store(StorageSettings(urls=[f"sqlite+aiosqlite:///{blocker}"], topology="1x1x2"))
    others = set(threading.enumerate())  # the workers of other tests' open connections on this xdist worker
    await store.start()
    try:
        with pytest.raises(StorageUnavailable):
            await store.ping()
    finally:
        await store.close()
        # aiosqlite 0.22 stops the worker of a failed connect without waiting for it; were this loop to
        # close first, the worker raises in its thread ("Event loop is closed", aiosqlite PR #389) and
        # pytest blames whichever test runs next. Wait for it while the loop is open: for this store's
        # workers only. Joining every aiosqlite worker alive waited 5 s on each open connection of the
        # module-scoped SQLite nodes sharing the xdist worker: 130 s in a clean-clone run (2026-12-03).
        workers = [t for t in threading.enumerate() if "_connection_worker_thread" in t.name and t not in others]
        for worker in workers:
            await asyncio.to_thread(worker.join, 5.0)
        assert not any(worker.is_alive() for worker in workers), workers


def test_create_store_chooses_by_url_scheme(tmp_path: Path) -> None:
    assert isinstance(create_store(StorageSettings(urls=["memory://"], topology="1x1x4")), MemoryTaskStore)
    sql = create_store(StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path}"], topology="1x2x4"))
    assert isinstance(sql, SQLAlchemyTaskStore)
    assert sql.layout.engine_urls() == [
        f"sqlite+aiosqlite:///{tmp_path}/tjobs_00.db",
        f"sqlite+aiosqlite:///{tmp_path}/tjobs_01.db",
    ]


def test_merged_deployment_maps_instances_onto_fewer_servers() -> None:
    settings = StorageSettings(
        urls=["mysql+asyncmy://root@db-a:3306", "mysql+asyncmy://root@db-b:3306/ignored"],
        topology="3x2x4",
        database_prefix="tj",
    )
    layout = SQLAlchemyTaskStore(settings).layout
    servers = [home.engine_url.split("@")[1].split("?")[0] for home in layout.databases]
    assert servers == ["db-a:3306"] * 2 + ["db-b:3306"] * 2 + ["db-a:3306"] * 2  # instance i → urls[i % 2]
    assert [home.name for home in layout.databases] == [f"tj_{i:02d}" for i in range(6)]
    assert layout.shards[13].tasks_sql == "`tj_03`.`tasks_01`"
    assert shard_of_task_id(make_task(shard=13).id) == 13
