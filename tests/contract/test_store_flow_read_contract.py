"""A flow read by its key (``get_flow``): before each retry the deliverer reads its flow (is it still
open?), and in the soak's retry storm of 2026-12-05 that read was 29.5 % of a node's py-spy samples, each
through SQLAlchemy (a compiled ``select``, an engine connection, its ``ROLLBACK``). On MariaDB it is one
``SELECT`` on the server's raw pool (:mod:`tjobs.stores.sql_direct`), counted by the server on that pool's
one connection as :mod:`tests.contract.test_store_fire_statements_contract` counts the fire pool's."""

from __future__ import annotations

from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task
from tests.contract.test_store_fire_statements_contract import _counters, _only_pool, _statements
from tjobs.model import FlowStatus, FlowUpdate
from tjobs.stores.base import TaskStore


async def test_mariadb_reads_a_flow_by_its_key_in_one_select_on_the_raw_pool(store: TaskStore) -> None:
    pool = _only_pool(store, "_direct")
    task = await store.insert_task(make_task(shard=3))
    assert task.next_run_at_ms is not None
    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS + 5, interval_planner)
    [fired] = outcome.flows
    delivered = FlowUpdate(task.id, task.next_run_at_ms, FlowStatus.DELIVERED, 1, None, 204, None)
    await store.record_flow_updates([delivered], NOW_MS + 50)
    before = await _counters(pool)

    flow = await store.get_flow(task.id, task.next_run_at_ms)
    missing = await store.get_flow(task.id, task.next_run_at_ms + 1)

    assert await _statements(pool, before) == {"Com_select": 2}
    assert missing is None
    assert flow is not None
    assert (flow.task_id, flow.scheduled_at_ms, flow.app_id, flow.kind) == (
        fired.task_id,
        fired.scheduled_at_ms,
        fired.app_id,
        fired.kind,
    )
    assert (flow.status, flow.attempts, flow.last_status_code) == (FlowStatus.DELIVERED, 1, 204)
