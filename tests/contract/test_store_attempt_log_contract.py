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
from tjobs.stores.flow_documents import MAX_ERROR_CHARS

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


async def _flow_of(store: TaskStore, task_id: int, at_ms: int, status: FlowStatus = FlowStatus.PENDING) -> None:
    await store.insert_manual_flow(
        task_id, Flow(task_id, at_ms, "app-a", FlowKind.MANUAL, status, 0, at_ms, at_ms, at_ms)
    )


async def test_outcomes_in_one_shard_each_keep_their_own_history_and_guards(store: TaskStore) -> None:
    # One shard, one call: each flow gets its own values (history, status, attempts, next attempt,
    # code, error), an outcome without a history leaves the stored one, an outdated open outcome and a
    # terminal flow are left alone, and a flow that does not exist is not made up. Flows of one task
    # and flows of distinct tasks side by side.
    one = await store.insert_task(make_task(shard=5))
    others = [await store.insert_task(make_task(shard=5)) for _ in range(3)]
    at = [NOW_MS - 100 + n for n in range(6)]
    for at_ms in at[:5]:
        await _flow_of(store, one.id, at_ms)
    await _flow_of(store, one.id, at[5], FlowStatus.DELIVERED)
    for task in others:
        await _flow_of(store, task.id, at[0])

    def log(n: int, code: int | None, error: str | None) -> AttemptLog:
        return AttemptLog((), 0).appended([AttemptRecord(1, NOW_MS + n, n, code, error, f"{URL}/{n}")])

    first = log(2, 503, "HTTP 503")
    await store.record_flow_updates(  # flow 2 is at attempt 2 with a history; flow 3 has one to keep
        [
            FlowUpdate(one.id, at[2], FlowStatus.PENDING, 2, NOW_MS + 900, 503, "HTTP 503", None, first),
            FlowUpdate(one.id, at[3], FlowStatus.PENDING, 1, NOW_MS + 800, 500, "HTTP 500", None, log(3, 500, "x")),
        ],
        NOW_MS,
    )
    logs = {n: log(n, 200 if n % 2 else None, None if n % 2 else f"error {n}") for n in range(10)}
    updates = [
        FlowUpdate(one.id, at[0], FlowStatus.DELIVERED, 1, None, 200, None, None, logs[1]),
        FlowUpdate(one.id, at[1], FlowStatus.PENDING, 1, NOW_MS + 700, None, "timed out", None, logs[0]),
        FlowUpdate(one.id, at[2], FlowStatus.PENDING, 1, NOW_MS + 50, 502, "outdated", None, logs[4]),  # 1 < 2
        FlowUpdate(one.id, at[3], FlowStatus.DEAD, 4, None, 410, "gone", None, None),  # keeps its history
        FlowUpdate(one.id, at[4], FlowStatus.PENDING, 3, NOW_MS + 600, 429, "slow down", None, logs[6]),
        FlowUpdate(one.id, at[5], FlowStatus.DEAD, 9, None, None, "after terminal", None, logs[8]),  # ignored
        FlowUpdate(one.id, NOW_MS + 77, FlowStatus.DELIVERED, 1, None, 200, None, None, logs[9]),  # no such flow
        *(
            FlowUpdate(task.id, at[0], FlowStatus.DELIVERED, 1, None, 200 + n, None, None, logs[n + 1])
            for n, task in enumerate(others)
        ),
    ]
    await store.record_flow_updates(updates, NOW_MS + 10)

    flows = {f.scheduled_at_ms: f for f in await store.list_flows(one.id, 10)}
    assert set(flows) == set(at)  # nothing made up
    got = {
        at_ms: (f.status, f.attempts, f.next_attempt_at_ms, f.last_status_code, f.last_error, f.attempt_log)
        for at_ms, f in flows.items()
    }
    assert got[at[0]] == (FlowStatus.DELIVERED, 1, None, 200, None, logs[1])
    assert got[at[1]] == (FlowStatus.PENDING, 1, NOW_MS + 700, None, "timed out", logs[0])
    assert got[at[2]] == (FlowStatus.PENDING, 2, NOW_MS + 900, 503, "HTTP 503", first)  # not lowered
    assert got[at[3]] == (FlowStatus.DEAD, 4, None, 410, "gone", log(3, 500, "x"))
    assert got[at[4]] == (FlowStatus.PENDING, 3, NOW_MS + 600, 429, "slow down", logs[6])
    assert got[at[5]] == (FlowStatus.DELIVERED, 0, at[5], None, None, None)  # terminal: untouched
    assert flows[at[0]].updated_at_ms == NOW_MS + 10 and flows[at[2]].updated_at_ms == NOW_MS
    for n, task in enumerate(others):
        (flow,) = await store.list_flows(task.id, 10)
        assert (flow.status, flow.last_status_code, flow.attempt_log) == (FlowStatus.DELIVERED, 200 + n, logs[n + 1])
