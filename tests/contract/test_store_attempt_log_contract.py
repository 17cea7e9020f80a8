"""A flow's attempt history on every backend: an outcome that carries it replaces it whole (in the same
write as the outcome), one that does not leaves it, every read returns it oldest first, and the store
keeps what it was given: the newest MAX_ATTEMPT_RECORDS records and the total count."""

from __future__ import annotations

from tests.contract.backends import NOW_MS, make_task
from tjobs.model import (
    MAX_ATTEMPT_RECORDS,
    AttemptLog,
    AttemptRecord,
    Flow,
    FlowKind,
    FlowStatus,
    FlowUpdate,
)
from tjobs.stores.base import TaskStore
from tjobs.stores.schema import MAX_ERROR_CHARS

URL = "https://receiver.example/hook"


async def _manual_flow(store: TaskStore, at_ms: int) -> Flow:
    task = await store.insert_task(make_task(shard=3))
    await store.insert_manual_flow(
        task.id, Flow(task.id, at_ms, task.app_id, FlowKind.MANUAL, FlowStatus.PENDING, 0, at_ms, at_ms, at_ms)
    )
    fresh = await store.get_flow(task.id, at_ms)
    assert fresh is not None
    return fresh


async def test_two_attempts_503_then_200_are_kept_in_order(store: TaskStore) -> None:
    at_ms = NOW_MS - 10
    flow = await _manual_flow(store, at_ms)
    assert flow.attempt_log is None  # nothing sent yet
    first = AttemptRecord(1, NOW_MS, 12, 503, "HTTP 503", URL)
    second = AttemptRecord(2, NOW_MS + 150, 0, 200, None, URL)

    log = AttemptLog((), 0).appended([first])
    await store.record_flow_updates(
        [FlowUpdate(flow.task_id, at_ms, FlowStatus.PENDING, 1, NOW_MS + 100, 503, "HTTP 503", None, log)], NOW_MS
    )
    await store.record_flow_updates([FlowUpdate(flow.task_id, at_ms, FlowStatus.PENDING, 1, NOW_MS + 120)], NOW_MS)
    kept = await store.get_flow(flow.task_id, at_ms)
    assert kept is not None and kept.attempt_log == log  # an outcome without a history leaves it

    log = log.appended([second])
    await store.record_flow_updates(
        [FlowUpdate(flow.task_id, at_ms, FlowStatus.DELIVERED, 2, None, 200, None, None, log)], NOW_MS + 200
    )
    (listed,) = await store.list_flows(flow.task_id, 10)
    assert listed.status is FlowStatus.DELIVERED
    assert listed.attempt_log is not None
    assert [(r.attempt, r.status_code, r.error) for r in listed.attempt_log.records] == [
        (1, 503, "HTTP 503"),
        (2, 200, None),
    ]
    assert all(r.duration_ms >= 0 and r.destination == URL for r in listed.attempt_log.records)
    assert listed.attempt_log.total == 2


async def test_the_history_keeps_the_newest_records_and_counts_them_all(store: TaskStore) -> None:
    at_ms = NOW_MS - 20
    flow = await _manual_flow(store, at_ms)
    records = [
        AttemptRecord(n, NOW_MS + n, 1, None, "x" * (MAX_ERROR_CHARS + 50), "pool:workers", "e1")
        for n in range(1, MAX_ATTEMPT_RECORDS + 6)
    ]
    log = AttemptLog((), 0).appended(records)
    await store.record_flow_updates(
        [FlowUpdate(flow.task_id, at_ms, FlowStatus.DEAD, len(records), None, None, "gave up", None, log)], NOW_MS
    )
    stored = await store.get_flow(flow.task_id, at_ms)
    assert stored is not None and stored.attempt_log is not None
    assert stored.attempt_log.total == MAX_ATTEMPT_RECORDS + 5
    assert [r.attempt for r in stored.attempt_log.records] == list(range(6, MAX_ATTEMPT_RECORDS + 6))
    assert all(r.error is not None and len(r.error) == MAX_ERROR_CHARS for r in stored.attempt_log.records)
    assert stored.attempt_log.records[0].executor == "e1"
