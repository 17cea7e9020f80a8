"""The store's app deletion: an app's row, and its tasks shard by shard with their pending flows cancelled."""

from __future__ import annotations

import pytest

from tests.contract.backends import NOW_MS, make_task
from tjobs.model import App, Flow, FlowKind, FlowStatus, FlowUpdate
from tjobs.stores.base import TaskStore

pytestmark = pytest.mark.asyncio


async def test_delete_app_tasks_takes_only_that_apps_tasks_of_the_shard_in_batches(store: TaskStore) -> None:
    doomed = [make_task(app_id="app-a", shard=3, name=f"a{i}") for i in range(5)]
    kept = [make_task(app_id="app-b", shard=3), make_task(app_id="app-a", shard=4)]
    for task in doomed + kept:
        await store.insert_task(task)

    assert await store.delete_app_tasks("app-a", 3, 3, NOW_MS) == 3
    assert await store.delete_app_tasks("app-a", 3, 3, NOW_MS) == 2
    assert await store.delete_app_tasks("app-a", 3, 3, NOW_MS) == 0

    for task in doomed:
        assert await store.get_task(task.id) is None
    for task in kept:
        assert await store.get_task(task.id) is not None


async def test_delete_app_tasks_cancels_pending_flows_and_keeps_the_others_as_history(store: TaskStore) -> None:
    task = make_task(app_id="app-a", shard=2)
    await store.insert_task(task)
    pending = Flow(task.id, NOW_MS, "app-a", FlowKind.MANUAL, FlowStatus.PENDING, 0, NOW_MS, NOW_MS, NOW_MS)
    delivered = Flow(task.id, NOW_MS - 1, "app-a", FlowKind.MANUAL, FlowStatus.PENDING, 0, NOW_MS, NOW_MS, NOW_MS)
    await store.insert_manual_flow(task.id, pending)
    await store.insert_manual_flow(task.id, delivered)
    await store.record_flow_updates([FlowUpdate(task.id, NOW_MS - 1, FlowStatus.DELIVERED, 1, None, 204)], NOW_MS)

    assert await store.delete_app_tasks("app-a", 2, 100, NOW_MS + 5) == 1

    flows = {f.scheduled_at_ms: f for f in await store.list_flows(task.id, 10)}
    assert flows[NOW_MS].status is FlowStatus.CANCELLED and flows[NOW_MS].next_attempt_at_ms is None
    assert flows[NOW_MS].updated_at_ms == NOW_MS + 5
    assert flows[NOW_MS - 1].status is FlowStatus.DELIVERED


async def test_delete_app_removes_the_row_once(store: TaskStore) -> None:
    await store.put_app(App("app-x", "x", "hash-x", ["secret"]))
    await store.put_app(App("app-y", "y", "hash-y", ["secret"]))
    assert await store.delete_app("app-x") is True
    assert await store.delete_app("app-x") is False
    assert await store.get_app("app-x") is None
    assert [app.id for app in await store.list_apps()] == ["app-y"]
