"""Fire-transaction throughput on a real MariaDB, topology 8x4x16 (512 shards) on one server.

Run by hand (it migrates 32 databases and writes ~100k rows)::

    TJOBS_STORE_BENCH=1 .venv/bin/pytest tests/integration/test_store_fire_throughput.py -s -q

It prints, per batch size, committed fires per second with one batch in flight (one node's commit
loop), for intents spread over all 512 shards and for intents of one shard. The databases
(``tjobs_test_bench_<hex>_NN``) are dropped.
"""

from __future__ import annotations

import os
import random
import secrets
import time

import pytest

from sharding import TaskIdGenerator
from tests.contract.backends import NOW_MS, drop_databases, interval_planner
from tjobs.model import DeliveryMode, FireIntent, MisfirePolicy, Task, TaskStatus
from tjobs.settings import StorageSettings
from tjobs.specs import CallbackSpec, IntervalSpec
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.skipif(not os.environ.get("TJOBS_STORE_BENCH"), reason="set TJOBS_STORE_BENCH=1")

TASKS_PER_SHARD = 40
RUN_S = 8.0


def _task(task_id: int) -> Task:
    return Task(
        task_id,
        "bench",
        "bench",
        None,
        IntervalSpec(1000, 0),
        CallbackSpec(("https://receiver.example/hook",)),
        {"n": 1},
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.ACTIVE,
        NOW_MS,
        1,
        0,
        NOW_MS,
        NOW_MS,
    )


async def _fire_loop(store: SQLAlchemyTaskStore, state: dict[int, FireIntent], batch: int) -> tuple[float, float]:
    """Commit batches back to back for RUN_S; return (fires/s, p50 batch ms). ``state`` holds each
    task's current intent and is kept up to date from the outcomes."""
    order = list(state)
    random.Random(batch).shuffle(order)
    cursor = 0
    fired = 0
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < RUN_S:
        ids = [order[(cursor + i) % len(order)] for i in range(batch)]
        cursor += batch
        t0 = time.perf_counter()
        outcomes = await store.commit_fires([state[i] for i in ids], NOW_MS, interval_planner)
        latencies.append(time.perf_counter() - t0)
        for outcome in outcomes:
            task = outcome.task
            assert task is not None and task.next_run_at_ms is not None
            fired += 1
            state[task.id] = FireIntent(task.id, task.next_run_at_ms, task.version)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return fired / elapsed, latencies[len(latencies) // 2] * 1000


async def test_fire_throughput_on_mariadb(mysql_url: str) -> None:
    settings = StorageSettings(
        urls=[mysql_url], topology="8x4x16", database_prefix=f"tjobs_test_bench_{secrets.token_hex(3)}"
    )
    started = time.perf_counter()
    await migrate(settings)
    migrate_s = time.perf_counter() - started
    started = time.perf_counter()
    await migrate(settings)
    remigrate_s = time.perf_counter() - started
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        ids = TaskIdGenerator(512)
        tasks = [_task(ids.mint(shard, NOW_MS + n)) for n in range(TASKS_PER_SHARD) for shard in range(512)]
        started = time.perf_counter()
        for start in range(0, len(tasks), 1000):
            await store.insert_tasks(tasks[start : start + 1000])
        insert_rate = len(tasks) / (time.perf_counter() - started)
        spread = {t.id: FireIntent(t.id, NOW_MS, 1) for t in tasks}
        single = [_task(ids.mint(7, NOW_MS + 1000 + n)) for n in range(1000)]
        await store.insert_tasks(single)
        one_shard = {t.id: FireIntent(t.id, NOW_MS, 1) for t in single}

        print(
            f"\nmigrate 8x4x16 fresh: {migrate_s:.1f} s, again: {remigrate_s:.2f} s; "
            f"insert_tasks: {insert_rate:,.0f} tasks/s ({len(tasks)} tasks)"
        )
        print(f"{'intents':>8} {'batch':>6} {'fires/s':>9} {'p50 ms':>8}")
        for spread_label, pool in (("512 sh", spread), ("1 shard", one_shard)):
            for batch in (10, 100, 1000):
                rate, p50 = await _fire_loop(store, pool, batch)
                print(f"{spread_label:>8} {batch:>6} {rate:>9,.0f} {p50:>8.1f}")
    finally:
        await store.close()
        await drop_databases(settings)
