"""A flows ``UPDATE`` of one flow reads that flow's row, not its table (MariaDB).

The outcome flush, a run's start and the compensator's lease name their flows by key and force the primary
key (:data:`tjobs.stores.sql_flow_updates.BY_PRIMARY_KEY`, against a deadlock). MariaDB 10.11 finds the rows of
a one-element row list, ``(task_id, scheduled_at) IN ((%s, %s))``, in a single-table ``UPDATE`` through no
index (a ``SELECT`` makes it a constant; an ``UPDATE`` does not), so with the primary key forced it read the
whole table: the cycle_load_tail bench with 2.5 M stored flows examined ~5,000 rows an outcome (every row of
its table), its disk reads set the fire path's lateness (p50 84 ms, p99 628 ms at 2,000 fires/s). Counted
here by the server: the ``Handler_read%`` counters of the session that ran the statement, before and after.
"""

from __future__ import annotations

from typing import Any

import pytest

from testkit.databases import connect_mysql
from tests.contract.backends import NOW_MS, fill_ended_flows, fire_once, fire_running
from tests.contract.test_store_fire_statements_contract import _counters, _fire_pool
from tjobs.model import FlowStatus, FlowUpdate
from tjobs.stores.base import TaskStore
from tjobs.stores.sql.fire_path import lease_update

SHARD = 7
FILLER = 2000  # flows of other tasks in the table: what a read of the whole table would count
ROW_READS = ("Handler_read_first", "Handler_read_next", "Handler_read_prev", "Handler_read_rnd_next")
AT_MOST = 8  # rows a statement may read beyond its own: a handful, whatever the table holds

pytestmark = pytest.mark.mariadb  # the server's row counters: MariaDB only


async def _pool_reads(pool: Any) -> int:
    return sum((await _counters(pool, ROW_READS)).values())


async def _flush_reads(store: TaskStore, updates: list[FlowUpdate], now_ms: int) -> int:
    """The rows the outcome flush of ``updates`` read (the fire pool's one connection runs it)."""
    pool = _fire_pool(store)
    before = await _pool_reads(pool)
    await store.record_flow_updates(updates, now_ms)
    return await _pool_reads(pool) - before


async def _filled(store: TaskStore) -> Any:
    _, first = await fire_once(store, SHARD)
    home = store._shard(SHARD)  # type: ignore[attr-defined]
    probe = connect_mysql(home.database.engine_url, autocommit=True)
    try:
        fill_ended_flows(probe, home, first.task_id, FILLER)
    finally:
        probe.close()
    return home


async def test_one_outcome_of_a_table_reads_its_row_only(mariadb_store: TaskStore) -> None:
    await _filled(mariadb_store)
    _, flow = await fire_once(mariadb_store, SHARD)
    delivered = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 204, None)
    assert await _flush_reads(mariadb_store, [delivered], NOW_MS + 50) <= AT_MOST
    stored = await mariadb_store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.DELIVERED


async def test_one_retry_of_a_table_reads_its_row_only(mariadb_store: TaskStore) -> None:
    await _filled(mariadb_store)
    _, flow = await fire_once(mariadb_store, SHARD)
    retry = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.PENDING, 1, NOW_MS + 60_000, 503, None)
    assert await _flush_reads(mariadb_store, [retry], NOW_MS + 50) <= AT_MOST
    stored = await mariadb_store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and (stored.status, stored.attempts) == (FlowStatus.PENDING, 1)


async def test_a_runs_start_reads_its_row_only(mariadb_store: TaskStore) -> None:
    await _filled(mariadb_store)
    pool = _fire_pool(mariadb_store)
    before = await _pool_reads(pool)
    _, flow = await fire_running(mariadb_store, SHARD)  # its fire, then its run's start (one flush of one update)
    fired_and_started = await _pool_reads(pool) - before
    stored = await mariadb_store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.RUNNING
    assert fired_and_started <= 2 * AT_MOST


async def test_two_outcomes_of_a_table_read_their_rows_only(mariadb_store: TaskStore) -> None:
    await _filled(mariadb_store)
    flows = [(await fire_once(mariadb_store, SHARD))[1] for _ in range(2)]
    updates = [FlowUpdate(f.task_id, f.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 204, None) for f in flows]
    assert await _flush_reads(mariadb_store, updates, NOW_MS + 50) <= AT_MOST


async def test_a_lease_of_one_flow_reads_its_row_only(mariadb_store: TaskStore) -> None:
    home = await _filled(mariadb_store)
    _, flow = await fire_once(mariadb_store, SHARD)
    key = (flow.task_id, flow.scheduled_at_ms)
    async with mariadb_store._write(home.database.engine_url) as conn:  # type: ignore[attr-defined]
        status = "SHOW SESSION STATUS WHERE Variable_name IN (" + ", ".join(f"'{name}'" for name in ROW_READS) + ")"
        before = sum(int(value) for _, value in (await conn.exec_driver_sql(status)).all())
        await conn.execute(lease_update(home, [key], {key}, NOW_MS + 30_000), execution_options=home.options)
        after = sum(int(value) for _, value in (await conn.exec_driver_sql(status)).all())
    assert after - before <= AT_MOST
    stored = await mariadb_store.get_flow(*key)
    assert stored is not None and stored.next_attempt_at_ms == NOW_MS + 30_000
