"""Fire-transaction throughput of the SQL store on one MariaDB server, topology 8x4x16 (512 shards).

::

    python -m benchmarks store_fire --storage mysql+asyncmy://root@127.0.0.1:3306

It migrates 32 databases under a fresh ``tjbench_<hex>`` prefix (dropped afterwards), writes ~20k
tasks, and prints, per batch size, committed fires per second with one batch in flight (one node's
commit loop), for intents spread over all 512 shards and for intents of one shard: the store alone,
no node, no delivery.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import time

from sharding import TaskIdGenerator
from testkit.databases import drop_databases
from tjobs.model import (
    DeliveryMode,
    FireIntent,
    FirePlan,
    FlowKind,
    FlowStatus,
    MisfirePolicy,
    NewFlow,
    Task,
    TaskStatus,
)
from tjobs.settings import StorageSettings
from tjobs.specs import CallbackSpec, IntervalSpec
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

NOW_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def interval_planner(task: Task, intent: FireIntent, now_ms: int) -> FirePlan | None:
    """One pending flow at the instant, the next run one period later."""
    assert isinstance(task.schedule, IntervalSpec)
    flow = NewFlow(intent.scheduled_at_ms, FlowKind.SCHEDULED, FlowStatus.PENDING, 0, now_ms)
    return FirePlan([flow], intent.scheduled_at_ms + task.schedule.every_ms, TaskStatus.ACTIVE, 1)


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
            if task is None or task.next_run_at_ms is None:
                raise RuntimeError(f"fire of {outcome.intent.task_id} not committed")
            fired += 1
            state[task.id] = FireIntent(task.id, task.next_run_at_ms, task.version)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return fired / elapsed, latencies[len(latencies) // 2] * 1000


async def run(storage_url: str) -> None:
    settings = StorageSettings(urls=[storage_url], topology="8x4x16", database_prefix=f"tjbench_{secrets.token_hex(3)}")
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
        drop_databases(settings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks store_fire", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--storage", required=True, help="a MariaDB URL (mysql+asyncmy://...)")
    args = parser.parse_args(argv)
    asyncio.run(run(args.storage))


if __name__ == "__main__":
    main()
