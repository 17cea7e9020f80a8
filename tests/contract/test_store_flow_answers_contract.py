"""A flow's newest answers on every backend: an outcome that carries them replaces them whole (in the same
write as the outcome), one that does not leaves them, every read returns them as given (headers in order,
the body's text, its size and the task revision), and several flows of one shard written in one call each
keep their own."""

from __future__ import annotations

from tests.contract.backends import NOW_MS, make_task
from tjobs.model import (
    ANSWER_BODY_BYTES,
    MAX_ANSWER_RECORDS,
    AttemptAnswer,
    Flow,
    FlowKind,
    FlowStatus,
    FlowUpdate,
)
from tjobs.stores.base import TaskStore

URL = "https://receiver.example/hook"


def _answer(attempt: int, status: int, body: str = "", size: int | None = None) -> AttemptAnswer:
    headers = (("Content-Type", "text/plain; charset=utf-8"), ("Set-Cookie", "[masked]"), ("X-Trace", f"t-{attempt}"))
    return AttemptAnswer(attempt, URL, status, headers, body, len(body.encode()) if size is None else size, 3)


async def _manual_flow(store: TaskStore, task_id: int, at_ms: int) -> None:
    await store.insert_manual_flow(
        task_id, Flow(task_id, at_ms, "app-a", FlowKind.MANUAL, FlowStatus.PENDING, 0, at_ms, at_ms, at_ms)
    )


async def test_a_503_then_a_200_answer_are_kept_in_order_with_their_headers_and_bodies(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=2))
    at_ms = NOW_MS - 10
    await _manual_flow(store, task.id, at_ms)
    fresh = await store.get_flow(task.id, at_ms)
    assert fresh is not None and fresh.answers is None  # nothing answered yet

    refused = (_answer(1, 503, "busy, try later ✓"),)
    await store.record_flow_updates(
        [FlowUpdate(task.id, at_ms, FlowStatus.PENDING, 1, NOW_MS + 100, 503, "HTTP 503", None, None, refused)],
        NOW_MS,
    )
    await store.record_flow_updates([FlowUpdate(task.id, at_ms, FlowStatus.PENDING, 1, NOW_MS + 120)], NOW_MS)
    kept = await store.get_flow(task.id, at_ms)
    assert kept is not None and kept.answers == refused  # an outcome without answers leaves them

    long_body = "x" * ANSWER_BODY_BYTES
    both = (*refused, _answer(2, 200, long_body, size=ANSWER_BODY_BYTES + 900))
    await store.record_flow_updates(
        [FlowUpdate(task.id, at_ms, FlowStatus.DELIVERED, 2, None, 200, None, None, None, both)], NOW_MS + 200
    )
    (listed,) = await store.list_flows(task.id, 10)
    assert listed.status is FlowStatus.DELIVERED and listed.answers == both
    assert listed.answers is not None and listed.answers[1].truncated and not listed.answers[0].truncated


async def test_flows_of_one_shard_written_together_each_keep_their_own_answers(store: TaskStore) -> None:
    one = await store.insert_task(make_task(shard=6))
    other = await store.insert_task(make_task(shard=6))
    at = [NOW_MS - 50, NOW_MS - 40, NOW_MS - 30]
    for at_ms in at:
        await _manual_flow(store, one.id, at_ms)
    await _manual_flow(store, other.id, at[0])
    earlier = (_answer(1, 500, "boom"),)
    await store.record_flow_updates(
        [FlowUpdate(one.id, at[2], FlowStatus.PENDING, 1, NOW_MS + 500, 500, "HTTP 500", None, None, earlier)], NOW_MS
    )

    many = tuple(_answer(n, 503) for n in range(1, MAX_ANSWER_RECORDS + 1))
    updates = [
        FlowUpdate(one.id, at[0], FlowStatus.DELIVERED, 1, None, 200, None, None, None, (_answer(1, 200, "ok"),)),
        FlowUpdate(one.id, at[1], FlowStatus.DEAD, 5, None, 503, "HTTP 503", None, None, many),
        FlowUpdate(one.id, at[2], FlowStatus.PENDING, 2, NOW_MS + 900, None, "timed out"),  # keeps its answer
        FlowUpdate(other.id, at[0], FlowStatus.DELIVERED, 1, None, 204, None, None, None, (_answer(1, 204),)),
    ]
    await store.record_flow_updates(updates, NOW_MS + 10)

    answers = {f.scheduled_at_ms: f.answers for f in await store.list_flows(one.id, 10)}
    assert answers == {at[0]: (_answer(1, 200, "ok"),), at[1]: many, at[2]: earlier}
    (flow,) = await store.list_flows(other.id, 10)
    assert flow.answers == (_answer(1, 204),)
