"""What the fire path costs MariaDB in statements (issue 29 item 1: <= 1.3 statements a fire), counted by the
server itself: the ``Com_*`` counters of the fire pool's one connection (``SHOW SESSION STATUS``), read before
and after on that same connection, so other clients of the server (a soak, other tests) do not count. A
multi-statement counts each of its statements. Memory and SQLite have no such counters: MariaDB only."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task
from tjobs.model import FlowStatus, FlowUpdate
from tjobs.stores.base import TaskStore

_KINDS = ("Com_select", "Com_insert", "Com_update", "Com_delete", "Com_insert_select", "Com_update_multi")


def _only_pool(store: TaskStore, attribute: str = "_fire_pools") -> Any:
    """The store's one MariaDB pool of ``attribute`` (the fire pools by default; ``_direct``: the raw pools)."""
    pools: dict[str, Any] | None = getattr(store, attribute, None)
    if not pools:
        pytest.skip(f"MariaDB's {attribute} only: its session counters")
    [pool] = pools.values()  # the contract topology is on one server
    return pool


def _fire_pool(store: TaskStore) -> Any:
    return _only_pool(store)


async def _counters(pool: Any, kinds: tuple[str, ...] = _KINDS) -> dict[str, int]:
    """The statement counters (or other ``kinds``) of the fire pool's connection (the pool holds one:
    asserted)."""
    async with pool.transaction() as conn:
        cursor = conn.cursor()
        await cursor.execute(
            "SHOW SESSION STATUS WHERE Variable_name IN (" + ", ".join(["%s"] * len(kinds)) + ")", kinds
        )
        rows = await cursor.fetchall()
        await cursor.close()
    assert (pool._pool.size, pool._pool.freesize) == (1, 1)  # one connection: what it counted is ours
    return {str(name): int(value) for name, value in rows}


async def _statements(pool: Any, before: dict[str, int]) -> dict[str, int]:
    after = await _counters(pool)
    return {kind: after[kind] - before[kind] for kind in _KINDS if after[kind] != before[kind]}


@pytest.mark.parametrize("fires", [2, 12])
async def test_mariadb_commits_the_fires_of_one_shard_table_in_one_insert_and_one_update(
    store: TaskStore, fires: int
) -> None:
    # Fires of one shard table committed together: one multi-row INSERT of their flows, one UPDATE … CASE of
    # their tasks, one count upsert for the tasks they completed, whatever their number; the lock read and the
    # shard-map fence once a transaction
    pool = _fire_pool(store)
    half = fires // 2
    tasks = [await store.insert_task(make_task(shard=6, name=f"r{i}")) for i in range(half)]
    tasks += [await store.insert_task(make_task(shard=6, name=f"c{i}", max_fires=1)) for i in range(fires - half)]
    before = await _counters(pool)

    outcomes = await store.commit_fires([intent_of(task) for task in tasks], NOW_MS + 5, interval_planner)

    assert all(outcome.committed and len(outcome.flows) == 1 for outcome in outcomes)
    # SELECT: the fence, the locking read; INSERT: the flows, the count upsert (tasks completed); UPDATE: the tasks
    assert await _statements(pool, before) == {"Com_select": 2, "Com_insert": 2, "Com_update": 1}
    for task in tasks:
        assert [flow.scheduled_at_ms for flow in await store.list_flows(task.id, 10)] == [task.next_run_at_ms]


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="issue 29 item 1, not met: the fire transaction sends one flow INSERT and one task UPDATE per shard "
    "table it touches, and the outcome flush one UPDATE per flows table; fires spread one a table (512 tables "
    "under ~50 fires a batch at 5,000/s) cost ~3 statements a fire. Fewer needs a layout whose batch touches "
    "fewer tables (docs/design.md, 'Statements per fire')",
)
async def test_mariadb_fires_spread_over_the_shard_tables_cost_at_most_1_3_statements_a_fire(
    store: TaskStore,
) -> None:
    # One fire in each of the server's 16 shard tables (2x2x4), then their outcomes flushed together: the bench's
    # shape at 5,000 fires/s over 8x4x16, where nearly every statement carries one row
    pool = _fire_pool(store)
    tasks = [await store.insert_task(make_task(shard=shard)) for shard in store.topology.shards()]
    before = await _counters(pool)

    outcomes = await store.commit_fires([intent_of(task) for task in tasks], NOW_MS + 5, interval_planner)
    assert all(outcome.committed for outcome in outcomes)
    delivered = [FlowUpdate(t.id, t.next_run_at_ms or 0, FlowStatus.DELIVERED, 1, None, 204, None) for t in tasks]
    await store.record_flow_updates(delivered, NOW_MS + 50)

    statements = await _statements(pool, before)
    assert sum(statements.values()) <= 1.3 * len(tasks), statements
