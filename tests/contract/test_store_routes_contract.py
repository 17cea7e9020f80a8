"""A pool flow's route log on every backend: an outcome that carries it replaces it, one that does not
leaves it as it is, and every read of the flow returns it (which executor got which attempt)."""

from __future__ import annotations

from tests.contract.backends import NOW_MS, make_task
from tjobs.model import Flow, FlowKind, FlowStatus, FlowUpdate
from tjobs.stores.base import TaskStore

FIRST = ((1, "pool:workers", "e1"),)
BOTH = ((1, "pool:workers", "e1"), (2, "pool:workers", "e2"))


async def test_an_outcome_with_routes_stores_them_and_one_without_keeps_them(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=5))
    at_ms = NOW_MS - 10
    await store.insert_manual_flow(
        task.id, Flow(task.id, at_ms, task.app_id, FlowKind.MANUAL, FlowStatus.PENDING, 0, at_ms, at_ms, at_ms)
    )
    fresh = await store.get_flow(task.id, at_ms)
    assert fresh is not None and fresh.routes == ()  # a flow of an inline callback has none

    await store.record_flow_updates(
        [FlowUpdate(task.id, at_ms, FlowStatus.PENDING, 1, NOW_MS + 100, 503, "e1: HTTP 503", FIRST)], NOW_MS
    )
    stored = await store.get_flow(task.id, at_ms)
    assert stored is not None and stored.routes == FIRST

    await store.record_flow_updates([FlowUpdate(task.id, at_ms, FlowStatus.PENDING, 1, NOW_MS + 200)], NOW_MS)
    kept = await store.get_flow(task.id, at_ms)
    assert kept is not None and kept.routes == FIRST and kept.next_attempt_at_ms == NOW_MS + 200

    await store.record_flow_updates(
        [FlowUpdate(task.id, at_ms, FlowStatus.DELIVERED, 2, None, 200, None, BOTH)], NOW_MS
    )
    (listed,) = await store.list_flows(task.id, 10)
    assert listed.status is FlowStatus.DELIVERED and listed.routes == BOTH
