"""Task health, two ways (docs/benchmarks.md, "A flow's answers and the task health").

1. **Read at page view** (what tjobs does): :meth:`TaskStore.task_health` for a page of 50 tasks, each with
   ``--flows`` flows in the last 24 h, counted up to the cap: the time one task-list page adds.
2. **Counted per outcome** (the alternative): an outcome flush of ``--outcomes`` delivered flows, one per
   task, as the deliverer writes it (:func:`tjobs.stores.sql_flow_updates.write_flow_updates`), with and
   without one ``INSERT … ON DUPLICATE KEY UPDATE`` per task and hour into a counters table in the same
   transaction: the time every flush would add, at every fire.

``python -m benchmarks.task_health --url mysql+asyncmy://root@127.0.0.1:3306`` (or an SQLite directory
URL); it makes its own databases (prefix ``tjbench_health``) and drops them afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from sqlalchemy import text

from sharding import shard_of_task_id
from testkit.databases import drop_databases
from tests.contract.backends import make_task
from tjobs.model import Flow, FlowKind, FlowStatus, FlowUpdate
from tjobs.service.task_health import HEALTH_CAP
from tjobs.settings import StorageSettings
from tjobs.stores.migrate import migrate
from tjobs.stores.schema import FLOW_COLUMNS, flow_to_row
from tjobs.stores.sql_flow_updates import write_flow_updates
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

PAGE = 50
DAY_MS = 86_400_000
COUNTERS_DDL = (
    "CREATE TABLE IF NOT EXISTS {db}.task_counters (task_id BIGINT NOT NULL, hour BIGINT NOT NULL, "
    "delivered INT NOT NULL DEFAULT 0, dead INT NOT NULL DEFAULT 0, PRIMARY KEY (task_id, hour)) ENGINE=InnoDB"
)
COUNTER_UPSERT = (  # one statement for the flush's rows, as the outcome UPDATEs are sent
    "INSERT INTO {db}.task_counters (task_id, hour, delivered) VALUES {rows} "
    "ON DUPLICATE KEY UPDATE delivered = delivered + VALUES(delivered)"
)


async def _insert_flows(store: SQLAlchemyTaskStore, shard: int, flows: list[Flow]) -> None:
    home = store._shard(shard)  # a benchmark writes rows straight in
    columns = ", ".join(FLOW_COLUMNS)
    marks = ", ".join(f":{c}" for c in FLOW_COLUMNS)
    async with store._write(home.database.engine_url) as conn:
        await conn.execute(
            text(f"INSERT INTO {home.flows_sql} ({columns}) VALUES ({marks})"), list(map(flow_to_row, flows))
        )


async def seed(store: SQLAlchemyTaskStore, flows_per_task: int, now_ms: int) -> list[int]:
    """:data:`PAGE` tasks of one app with ``flows_per_task`` delivered flows each over the last 24 h."""
    shards = store.topology.shard_count
    ids = [(await store.insert_task(make_task(shard=n % shards))).id for n in range(PAGE)]
    step = DAY_MS // flows_per_task
    for task_id in ids:
        flows = [
            Flow(task_id, now_ms - k * step, "app-a", FlowKind.SCHEDULED, FlowStatus.DELIVERED, 1, None, 0, 0)
            for k in range(flows_per_task)
        ]
        await _insert_flows(store, shard_of_task_id(task_id), flows)
    return ids


async def time_reads(store: SQLAlchemyTaskStore, ids: list[int], now_ms: int, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await store.task_health(ids, now_ms - DAY_MS, HEALTH_CAP)
        times.append((time.perf_counter() - started) * 1000)
    return times


async def time_flushes(
    store: SQLAlchemyTaskStore, outcomes: int, now_ms: int, counters: bool, rounds: int, run: int
) -> list[float]:
    """An outcome flush of ``outcomes`` pending flows of distinct tasks in the first database's shards,
    delivered, with or without the per-task counter upserts in the same transaction."""
    database = store.layout.databases[0]
    shards = [s for s in range(store.topology.shard_count) if store._shard(s).database == database]
    tables = [store._shard(s) for s in range(store.topology.shard_count)]
    times = []
    for r in range(rounds):
        at = now_ms + 1 + run * 1_000 + r  # each run's flows their own instants
        updates: dict[int, list[FlowUpdate]] = {s: [] for s in shards}
        for n in range(outcomes):
            updates[shards[n % len(shards)]].append(FlowUpdate(10_000_000 + n, at, FlowStatus.DELIVERED, 1, None, 200))
        for shard, items in updates.items():
            pending = FlowStatus.PENDING
            await _insert_flows(
                store, shard, [Flow(u.task_id, at, "app-a", FlowKind.SCHEDULED, pending, 0, at, at, at) for u in items]
            )
        started = time.perf_counter()
        async with store._write(database.engine_url) as conn:
            await write_flow_updates(conn, updates, tables, now_ms)
            if counters:
                raw = (await conn.get_raw_connection()).driver_connection
                assert raw is not None
                cursor = raw.cursor()
                params = [v for items in updates.values() for u in items for v in (u.task_id, at // 3_600_000)]
                marks = ", ".join(["(%s, %s, 1)"] * (len(params) // 2))
                await cursor.execute(COUNTER_UPSERT.format(db=f"`{database.name}`", rows=marks), params)
                await cursor.close()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def main(url: str, rounds: int, outcomes: int) -> None:
    settings = StorageSettings(urls=[url], topology="1x2x4", database_prefix="tjbench_health")
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    now_ms = int(time.time() * 1000)
    try:
        for flows_per_task in (24, 1_440, 2_880):
            ids = await seed(store, flows_per_task, now_ms)
            times = await time_reads(store, ids, now_ms, rounds)
            median, worst = statistics.median(times), max(times)
            print(f"read {PAGE} tasks x {flows_per_task} flows/24 h: median {median:.1f} ms, max {worst:.1f}")
        if url.startswith("mysql"):
            async with store._write(store.layout.databases[0].engine_url) as conn:
                await conn.exec_driver_sql(COUNTERS_DDL.format(db=f"`{store.layout.databases[0].name}`"))
            for run, counters in enumerate((False, True, False, True)):
                times = await time_flushes(store, outcomes, now_ms, counters, rounds, run)
                label = "with" if counters else "without"
                print(f"flush of {outcomes} outcomes {label} counters: median {statistics.median(times):.1f} ms")
    finally:
        await store.close()
        drop_databases(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--outcomes", type=int, default=500)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.rounds, args.outcomes))
