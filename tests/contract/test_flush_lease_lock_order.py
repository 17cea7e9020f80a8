"""A compensator's lease and an outcome flush of the same flows wait for each other, never deadlock (MariaDB).

The lease locks its flows' rows through ``(status, next_attempt_at)`` and the primary key, then writes them
(:func:`tjobs.stores.sql.fire_path.lease_update`); a flush updates rows by their keys
(:mod:`tjobs.stores.sql_flow_updates`). A node under overload met 1213 between the two: each ``UPDATE``
located its rows through the secondary index ``flows_TT_at`` (``scheduled_at``, then the key), so the flush
held that index's entry of a row whose primary record the lease held, and the lease's own ``UPDATE`` then
asked for the entry. The two are interleaved here with the lease's own statements on a connection of the
store, the flush through the store, waiting for the lease's row locks.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from testkit.databases import connect_mysql
from tests.contract.backends import NOW_MS, fill_ended_flows, fire_once
from tjobs.model import FlowStatus, FlowUpdate
from tjobs.stores.base import TaskStore
from tjobs.stores.sql.fire_path import lease_update, stale_flows_pick

SHARD = 5
FILLER = 5000
LEASE_UNTIL = NOW_MS + 30_000
RETRY_AT = NOW_MS + 60_000


def _lock_waits(probe: Any, schema: str) -> int:
    """How many transactions wait for a lock in a statement naming ``schema`` (this test's database)."""
    with probe.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE %s",
            (f"%{schema}%",),
        )
        [(count,)] = cursor.fetchall()
    return int(count)


async def test_a_flush_waiting_for_a_lease_lets_the_lease_write_its_flows(store: TaskStore) -> None:
    if not getattr(store, "_fire_pools", None):
        pytest.skip("MariaDB only")
    flows = [(await fire_once(store, SHARD))[1] for _ in range(3)]
    home = store._shard(SHARD)  # type: ignore[attr-defined]
    url = home.database.engine_url
    retried, *delivered = sorted(flows, key=lambda f: (f.task_id, f.scheduled_at_ms))
    outcomes = [FlowUpdate(retried.task_id, retried.scheduled_at_ms, FlowStatus.PENDING, 1, RETRY_AT, 503)]
    outcomes += [FlowUpdate(f.task_id, f.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 200) for f in delivered]
    probe = connect_mysql(url, autocommit=True)
    fill_ended_flows(probe, home, flows[0].task_id, FILLER)
    flush: asyncio.Task[None] | None = None
    try:
        async with store._write(url) as conn:  # type: ignore[attr-defined]
            pick = stale_flows_pick(home, FlowStatus.PENDING.value, NOW_MS + 1_000, 10)
            rows = (await conn.execute(pick, execution_options=home.options)).mappings().all()
            keys = [(int(r["task_id"]), int(r["scheduled_at"])) for r in rows]
            assert sorted(keys) == sorted((f.task_id, f.scheduled_at_ms) for f in flows)
            flush = asyncio.create_task(store.record_flow_updates(outcomes, NOW_MS + 500))
            for _ in range(60):  # the flush reaches the lease's rows and waits (3 s at most)
                await asyncio.sleep(0.05)
                if _lock_waits(probe, home.database.schema):
                    break
            assert _lock_waits(probe, home.database.schema) == 1 and not flush.done()
            await conn.execute(lease_update(home, keys, set(keys), LEASE_UNTIL), execution_options=home.options)
        await flush
    finally:
        probe.close()
        if flush is not None and not flush.done():
            flush.cancel()

    # the lease came first: one attempt counted on each; the flush's outcomes (attempt 1) all landed after it
    stored = {f.task_id: await store.get_flow(f.task_id, f.scheduled_at_ms) for f in flows}
    again = stored[retried.task_id]
    assert again is not None
    assert (again.status, again.attempts, again.next_attempt_at_ms) == (FlowStatus.PENDING, 1, RETRY_AT)
    for flow in delivered:
        ended = stored[flow.task_id]
        assert ended is not None and (ended.status, ended.attempts) == (FlowStatus.DELIVERED, 1)
