"""The delivery side of the storage contract on every backend: claiming stale flows counts an attempt,
and deleting a task cancels its pending flows while keeping them as history."""

from __future__ import annotations

from tests.contract.backends import NOW_MS, make_task
from tjobs.model import Flow, FlowKind, FlowStatus, FlowUpdate, Task
from tjobs.stores.base import TaskStore


def _flow(task: Task, at_ms: int, status: FlowStatus = FlowStatus.PENDING, attempts: int = 0) -> Flow:
    return Flow(task.id, at_ms, task.app_id, FlowKind.MANUAL, status, attempts, at_ms, at_ms, at_ms)


async def test_a_leased_pending_flow_counts_the_attempt_a_crash_may_have_lost(store: TaskStore) -> None:
    shard = 3
    task = await store.insert_task(make_task(shard=shard))
    gone = await store.insert_task(make_task(shard=shard, name="gone"))
    await store.insert_manual_flow(task.id, _flow(task, NOW_MS - 500))  # never recorded an attempt
    await store.insert_manual_flow(task.id, _flow(task, NOW_MS - 400, attempts=2))
    await store.insert_manual_flow(task.id, _flow(task, NOW_MS - 300, FlowStatus.SENDING, attempts=1))
    await store.insert_manual_flow(gone.id, _flow(gone, NOW_MS - 200, attempts=1))
    await store.delete_task(gone.id)

    leased = await store.lease_stale_flows(shard, NOW_MS, 10_000, 10)

    assert [(f.scheduled_at_ms - NOW_MS, f.attempts) for f, _ in leased] == [(-500, 1), (-400, 3), (-300, 1), (-200, 1)]
    stored = [await store.get_flow(f.task_id, f.scheduled_at_ms) for f, _ in leased]
    assert [(f.attempts, f.status, f.next_attempt_at_ms) for f in stored if f is not None] == [
        (1, FlowStatus.PENDING, NOW_MS + 10_000),
        (3, FlowStatus.PENDING, NOW_MS + 10_000),
        (1, FlowStatus.SENDING, NOW_MS + 10_000),
        (1, FlowStatus.PENDING, NOW_MS + 10_000),
    ]
    # each lease of the same flow is one more possible attempt
    again = await store.lease_stale_flows(shard, NOW_MS + 10_000, 10_000, 1)
    assert [(f.scheduled_at_ms - NOW_MS, f.attempts) for f, _ in again] == [(-500, 2)]


async def test_deleting_a_task_cancels_its_pending_flows_and_keeps_them_all(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=6))
    other = await store.insert_task(make_task(shard=6, name="other"))
    await store.insert_manual_flow(task.id, _flow(task, NOW_MS - 3, attempts=2))
    await store.insert_manual_flow(task.id, _flow(task, NOW_MS - 2, FlowStatus.SENDING, attempts=1))
    await store.insert_manual_flow(task.id, _flow(task, NOW_MS - 1, FlowStatus.DELIVERED, attempts=1))
    await store.insert_manual_flow(other.id, _flow(other, NOW_MS - 3))

    assert await store.delete_task_cancelling_flows(task.id, NOW_MS) is True

    assert await store.get_task(task.id) is None
    flows = {f.scheduled_at_ms - NOW_MS: f for f in await store.list_flows(task.id, 10)}
    assert {k: (f.status, f.attempts) for k, f in flows.items()} == {
        -3: (FlowStatus.CANCELLED, 2),
        -2: (FlowStatus.SENDING, 1),
        -1: (FlowStatus.DELIVERED, 1),
    }
    assert flows[-3].next_attempt_at_ms is None and flows[-3].updated_at_ms == NOW_MS
    untouched = await store.get_flow(other.id, NOW_MS - 3)
    assert untouched is not None and untouched.status is FlowStatus.PENDING
    # a cancelled flow is terminal: a late outcome never revives it
    await store.record_flow_updates(
        [FlowUpdate(task.id, NOW_MS - 3, FlowStatus.PENDING, 3, NOW_MS + 1_000)], NOW_MS + 1
    )
    late = await store.get_flow(task.id, NOW_MS - 3)
    assert late is not None and (late.status, late.attempts) == (FlowStatus.CANCELLED, 2)
    assert await store.delete_task_cancelling_flows(task.id, NOW_MS) is False


async def test_a_stale_pending_outcome_never_lowers_the_attempts_a_claim_counted(store: TaskStore) -> None:
    # Given a flow claimed by the compensator (attempts 2 -> 3) and re-driven as attempt 4, failing
    shard = 9
    task = await store.insert_task(make_task(shard=shard))
    await store.insert_manual_flow(task.id, _flow(task, NOW_MS - 500, attempts=2))
    [(claimed, _)] = await store.lease_stale_flows(shard, NOW_MS, 10_000, 10)
    assert claimed.attempts == 3
    await store.record_flow_updates(
        [FlowUpdate(task.id, NOW_MS - 500, FlowStatus.PENDING, 4, NOW_MS + 2_000, 500)], NOW_MS
    )
    # When a node that lost the flow (frozen, then resumed) flushes its outdated outcome of attempt 2
    await store.record_flow_updates(
        [FlowUpdate(task.id, NOW_MS - 500, FlowStatus.PENDING, 2, NOW_MS + 1_000, 503)], NOW_MS + 1
    )
    # Then the count stays (a later claim never reuses attempt 3 or 4) ...
    kept = await store.get_flow(task.id, NOW_MS - 500)
    assert kept is not None and (kept.attempts, kept.next_attempt_at_ms, kept.last_status_code) == (
        4,
        NOW_MS + 2_000,
        500,
    )
    # ... while a terminal outcome always lands: a delivery is never forgotten
    await store.record_flow_updates([FlowUpdate(task.id, NOW_MS - 500, FlowStatus.DELIVERED, 2, None, 200)], NOW_MS + 2)
    done = await store.get_flow(task.id, NOW_MS - 500)
    assert done is not None and (done.status, done.attempts) == (FlowStatus.DELIVERED, 2)
