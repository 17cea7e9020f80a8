"""Job runs on every backend (README "Job runs"): the outcome that starts a run lands only on a flow
still being delivered, a run's transition is a compare-and-set on the flow (two racing writers: one
wins), a live run past its deadline is a stale flow the compensator leases (its attempts kept), and the
run log is appended in place under its line cap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest

from tests.contract.backends import NOW_MS, count_statements, fire_once, make_task
from tjobs.model import (
    AttemptLog,
    AttemptRecord,
    Flow,
    FlowRun,
    FlowStatus,
    FlowUpdate,
    Reschedule,
    RunStatus,
    Task,
)
from tjobs.specs import FixedDelaySpec
from tjobs.stores.base import TaskStore

DEADLINE_MS = NOW_MS + 60_000


def _started(flow: Flow, attempt: int = 1) -> FlowUpdate:
    """The outcome of an attempt that a target accepted as a run (the deliverer's)."""
    run = FlowRun(RunStatus.RUNNING, attempt, NOW_MS + 10, DEADLINE_MS)
    log = AttemptLog((AttemptRecord(attempt, NOW_MS, 10, 202, None, "https://receiver.example/hook"),), 1)
    return FlowUpdate(
        flow.task_id,
        flow.scheduled_at_ms,
        FlowStatus.RUNNING,
        attempt,
        DEADLINE_MS,
        202,
        None,
        attempt_log=log,
        run=run,
    )


def _ended(flow: Flow, status: FlowStatus, run_status: RunStatus, attempts: int = 1) -> FlowUpdate:
    run = FlowRun(run_status, attempts, NOW_MS + 10, DEADLINE_MS, NOW_MS + 500, NOW_MS + 500, 100, {"rows": 3})
    return FlowUpdate(flow.task_id, flow.scheduled_at_ms, status, attempts, None, run=run)


async def test_the_outcome_that_starts_a_run_is_stored_with_the_run(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=1)

    await store.record_flow_updates([_started(flow)], NOW_MS + 10)

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.RUNNING and not stored.status.terminal
    assert stored.run == FlowRun(RunStatus.RUNNING, 1, NOW_MS + 10, DEADLINE_MS)
    assert (stored.attempts, stored.next_attempt_at_ms, stored.last_status_code) == (1, DEADLINE_MS, 202)
    assert stored.attempt_log is not None and stored.attempt_log.total == 1
    assert (stored.run_log, stored.run_log_lines) == (None, 0)


async def test_a_run_start_never_overwrites_a_report_or_a_cancel_that_came_first(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=2)
    # the executor's report reached the flow before the deliverer wrote the run's start
    progress = FlowRun(RunStatus.RUNNING, 1, NOW_MS + 5, DEADLINE_MS, NOW_MS + 6, progress=40)
    reported = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.RUNNING, 1, DEADLINE_MS, run=progress)
    assert await store.write_run(FlowStatus.PENDING, reported, NOW_MS + 6, expected_attempts=0)

    await store.record_flow_updates([_started(flow)], NOW_MS + 10)

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.run == progress and stored.status is FlowStatus.RUNNING
    # the send that started the run is in the history all the same
    assert stored.last_status_code == 202 and stored.attempt_log is not None and stored.attempt_log.total == 1


class _Sent:
    """A raw connection of a fire pool that lists what it sends, one entry a round trip."""

    def __init__(self, conn: Any, sent: list[str]) -> None:
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_sent", sent)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._conn, name, value)

    def cursor(self) -> Any:
        return _SentCursor(self._conn.cursor(), self._sent)

    async def commit(self) -> None:
        self._sent.append("COMMIT")
        await self._conn.commit()

    async def rollback(self) -> None:
        self._sent.append("ROLLBACK")
        await self._conn.rollback()


class _SentCursor:
    def __init__(self, cursor: Any, sent: list[str]) -> None:
        self._cursor, self._sent = cursor, sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    async def execute(self, sql: str, params: Any = None) -> Any:
        self._sent.append(sql)
        return await self._cursor.execute(sql, params)


async def test_mariadb_writes_a_run_start_in_one_round_trip_and_keeps_its_connection(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fence, the start's UPDATE and the COMMIT in one multi-statement (issue 30: the COMMIT was a
    # round trip of its own after every flush, and a run's start is flushed at once)
    pools = getattr(store, "_fire_pools", None)
    if not pools:
        pytest.skip("MariaDB's fire pool only")
    _, flow = await fire_once(store, shard=3)
    pool = pools[store._shard_of_task(flow.task_id).database.engine_url]  # type: ignore[attr-defined]
    sent: list[str] = []
    plain = pool.transaction

    @asynccontextmanager
    async def counted(*, commit: bool = True) -> AsyncIterator[Any]:
        async with plain(commit=commit) as conn:
            yield _Sent(conn, sent)
        if commit:  # the pool's own COMMIT, a round trip of its own
            sent.append("COMMIT")

    monkeypatch.setattr(pool, "transaction", counted)
    await store.record_flow_updates([_started(flow)], NOW_MS + 10)

    assert len(sent) == 1 and sent[0].count("UPDATE") == 1 and sent[0].endswith("; COMMIT")
    assert (pool._pool.size, pool._pool.freesize) == (1, 1)  # the transaction ended: the connection kept
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)  # committed: another connection sees it
    assert stored is not None and stored.status is FlowStatus.RUNNING and stored.run == _started(flow).run
    sent.clear()  # a flush that passes no row commits the same way; the connection is kept for the next
    await store.record_flow_updates([_started(flow)], NOW_MS + 20)
    assert len(sent) == 1 and sent[0].endswith("; COMMIT")
    assert (pool._pool.size, pool._pool.freesize) == (1, 1)
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.updated_at_ms == NOW_MS + 10


async def test_mariadb_starts_a_run_with_one_statement_a_flow(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 30: a run's start was two UPDATEs of its flow (the guarded start, then the send's record where a
    # report came first); one under SIMULTANEOUS_ASSIGNMENT, whatever the flow's state
    pools = getattr(store, "_fire_pools", None)
    if not pools:
        pytest.skip("MariaDB's fire pool only")
    (_, first), (_, second), (_, overtaken), (_, later) = [await fire_once(store, shard=3) for _ in range(4)]
    progress = FlowRun(RunStatus.RUNNING, 1, NOW_MS + 5, DEADLINE_MS, NOW_MS + 6, progress=40)
    reported = FlowUpdate(
        overtaken.task_id, overtaken.scheduled_at_ms, FlowStatus.RUNNING, 1, DEADLINE_MS, run=progress
    )
    assert await store.write_run(FlowStatus.PENDING, reported, NOW_MS + 6, expected_attempts=0)
    retry = FlowUpdate(later.task_id, later.scheduled_at_ms, FlowStatus.PENDING, 2, NOW_MS + 7, None, "x")
    assert await store.write_run(FlowStatus.PENDING, retry, NOW_MS + 7, expected_attempts=0)
    pool = pools[store._shard_of_task(first.task_id).database.engine_url]  # type: ignore[attr-defined]
    counted = count_statements(pool, monkeypatch)

    await store.record_flow_updates([_started(f) for f in (first, second, overtaken, later)], NOW_MS + 10)

    assert counted == [
        {
            "Com_select": 1,  # the shard-map fence
            "Com_update": 4,  # one a flow: two started, one overtaken by a report, one at a later attempt
            "Com_commit": 1,
        }
    ]
    stored = {f.id: await store.get_flow(f.task_id, f.scheduled_at_ms) for f in (first, second, overtaken, later)}
    assert all(s is not None and s.status is FlowStatus.RUNNING for s in (stored[first.id], stored[second.id]))
    kept = stored[overtaken.id]
    assert kept is not None and (kept.run, kept.last_status_code, kept.updated_at_ms) == (progress, 202, NOW_MS + 6)
    untouched = stored[later.id]
    assert untouched is not None and (untouched.status, untouched.attempts) == (FlowStatus.PENDING, 2)
    assert (untouched.last_status_code, untouched.attempt_log, untouched.updated_at_ms) == (None, None, NOW_MS + 7)


async def test_a_run_start_of_an_earlier_attempt_changes_nothing(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=12)
    # attempt 1 failed to deliver and attempt 2 is due; attempt 1's start, written late, is not its history
    retry = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.PENDING, 2, NOW_MS + 7, 503, "busy")
    assert await store.write_run(FlowStatus.PENDING, retry, NOW_MS + 7, expected_attempts=0)
    before = await store.get_flow(flow.task_id, flow.scheduled_at_ms)

    await store.record_flow_updates([_started(flow)], NOW_MS + 10)

    assert await store.get_flow(flow.task_id, flow.scheduled_at_ms) == before


async def test_a_run_ended_before_its_start_was_written_keeps_the_send_in_its_history(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=11)
    ended = replace(_ended(flow, FlowStatus.DELIVERED, RunStatus.SUCCEEDED), last_status_code=None)
    assert await store.write_run(FlowStatus.PENDING, ended, NOW_MS + 6, expected_attempts=0)

    await store.record_flow_updates([_started(flow)], NOW_MS + 10)

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.DELIVERED and stored.run == ended.run
    assert stored.next_attempt_at_ms is None and stored.updated_at_ms == NOW_MS + 6
    assert stored.attempt_log is not None and stored.attempt_log.total == 1 and stored.last_status_code == 202


async def test_a_late_run_start_never_revives_an_attempt_that_a_report_already_failed(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=10)
    # the executor reported attempt 1 failed before the deliverer wrote its start: pending for a retry
    failed = FlowRun(RunStatus.FAILED, 1, NOW_MS + 5, DEADLINE_MS, NOW_MS + 6, NOW_MS + 6)
    retry = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.PENDING, 1, NOW_MS + 6, None, "x", run=failed)
    assert await store.write_run(FlowStatus.PENDING, retry, NOW_MS + 6, expected_attempts=0)

    await store.record_flow_updates([_started(flow)], NOW_MS + 10)

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and (stored.status, stored.run) == (FlowStatus.PENDING, failed)
    await store.record_flow_updates([_started(flow, attempt=2)], NOW_MS + 20)  # the retry's own run starts
    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.RUNNING and stored.attempts == 2


async def test_a_run_transition_lands_once_where_the_flow_is_as_read(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=3)
    await store.record_flow_updates([_started(flow)], NOW_MS + 10)
    succeeded = _ended(flow, FlowStatus.DELIVERED, RunStatus.SUCCEEDED)

    assert await store.write_run(FlowStatus.RUNNING, succeeded, NOW_MS + 500)
    assert not await store.write_run(FlowStatus.RUNNING, succeeded, NOW_MS + 501)  # the same report again
    failed = _ended(flow, FlowStatus.PENDING, RunStatus.FAILED)
    assert not await store.write_run(FlowStatus.RUNNING, failed, NOW_MS + 502)  # a racing writer lost

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.DELIVERED
    assert stored.run == succeeded.run and stored.run is not None and stored.run.result == {"rows": 3}
    assert stored.updated_at_ms == NOW_MS + 500 and stored.next_attempt_at_ms is None
    # what the send recorded is kept
    assert stored.last_status_code == 202 and stored.attempt_log is not None and stored.attempt_log.total == 1


async def test_a_run_transition_checks_the_attempt_count(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=4)
    await store.record_flow_updates([_started(flow, attempt=2)], NOW_MS + 10)

    assert not await store.write_run(
        FlowStatus.RUNNING, _ended(flow, FlowStatus.DELIVERED, RunStatus.SUCCEEDED), NOW_MS
    )
    assert await store.write_run(
        FlowStatus.RUNNING, _ended(flow, FlowStatus.DELIVERED, RunStatus.SUCCEEDED, attempts=2), NOW_MS
    )


async def test_a_transition_without_a_run_keeps_the_stored_run(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=5)
    await store.record_flow_updates([_started(flow)], NOW_MS + 10)
    cancel = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.CANCELLING, 1, NOW_MS + 70_000, None, "x")

    assert await store.write_run(FlowStatus.RUNNING, cancel, NOW_MS + 20)

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.CANCELLING and stored.last_error == "x"
    assert stored.run == FlowRun(RunStatus.RUNNING, 1, NOW_MS + 10, DEADLINE_MS)


async def test_a_fixed_delay_runs_end_sets_the_next_run_in_the_same_write(store: TaskStore) -> None:
    task = replace(make_task(shard=6), schedule=FixedDelaySpec(30_000, start_at_ms=NOW_MS))
    fired, flow = await fire_once(store, shard=6, task=task)
    assert fired.next_run_at_ms is not None
    await store.record_flow_updates([_started(flow)], NOW_MS + 10)
    moved = Reschedule(fired.app_id, fired.next_run_at_ms, fired.version, NOW_MS + 500 + 30_000)

    ended = replace(_ended(flow, FlowStatus.DELIVERED, RunStatus.SUCCEEDED), reschedule=moved)
    assert await store.write_run(FlowStatus.RUNNING, ended, NOW_MS + 500)

    stored = await store.get_task(task.id)
    assert stored is not None and stored.next_run_at_ms == NOW_MS + 500 + 30_000


async def test_a_live_run_past_its_deadline_is_leased_with_its_attempts_kept(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=7)
    _, untimed = await fire_once(store, shard=7)
    await store.record_flow_updates([_started(flow), replace(_started(untimed), next_attempt_at_ms=None)], NOW_MS)

    assert await store.shards_with_stale_flows([7], DEADLINE_MS - 1) == set()
    assert await store.shards_with_stale_flows([7], DEADLINE_MS) == {7}
    leased = await store.lease_stale_flows(7, DEADLINE_MS, 30_000, 10)

    assert [(f.id, f.status, f.attempts, f.next_attempt_at_ms) for f, _ in leased] == [
        (flow.id, FlowStatus.RUNNING, 1, DEADLINE_MS + 30_000)
    ]
    assert await store.lease_stale_flows(7, DEADLINE_MS, 30_000, 10) == []  # leased: not taken twice


async def test_a_terminal_outcome_lands_on_a_live_run(store: TaskStore) -> None:
    # the compensator's close of a deleted task's flow, or a stale node's final outcome
    _, flow = await fire_once(store, shard=8)
    await store.record_flow_updates([_started(flow)], NOW_MS)

    closed = FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.CANCELLED, 1, None, None, "task deleted")
    await store.record_flow_updates([closed], NOW_MS + 1)

    stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert stored is not None and stored.status is FlowStatus.CANCELLED


async def test_the_run_log_is_appended_in_place_under_its_line_cap(store: TaskStore) -> None:
    _, flow = await fire_once(store, shard=9)
    await store.record_flow_updates([_started(flow)], NOW_MS + 10)
    key = (flow.task_id, flow.scheduled_at_ms)

    assert await store.append_run_log(*key, '{"line": "a"}\n{"line": "é ✓"}\n', 2, 3)
    assert not await store.append_run_log(*key, '{"line": "b"}\n{"line": "c"}\n', 2, 3)  # 4 > 3
    assert await store.append_run_log(*key, '{"line": "b"}\n', 1, 3)
    assert not await store.append_run_log(flow.task_id, flow.scheduled_at_ms + 1, '{"line": "x"}\n', 1, 3)

    stored = await store.get_flow(*key)
    assert stored is not None
    assert (stored.run_log, stored.run_log_lines) == ('{"line": "a"}\n{"line": "é ✓"}\n{"line": "b"}\n', 3)
    assert stored.status is FlowStatus.RUNNING and stored.updated_at_ms == NOW_MS + 10


async def test_a_shards_live_runs_are_read_by_shard_in_pages_with_their_tasks(store: TaskStore) -> None:
    # Given in shard 9 two running flows, a cancelling one, a pending and a delivered one; a run in shard 10
    (task, late), (_, early), (_, asked), (_, pending), (_, done) = [await fire_once(store, shard=9) for _ in range(5)]
    _, elsewhere = await fire_once(store, shard=10)
    cancelling = FlowUpdate(asked.task_id, asked.scheduled_at_ms, FlowStatus.CANCELLING, 1, NOW_MS + 5_000)
    soon = replace(_started(early), next_attempt_at_ms=NOW_MS + 1_000)
    starts = [_started(late), soon, _started(asked), _started(done), _started(elsewhere)]
    await store.record_flow_updates(starts, NOW_MS)
    assert await store.write_run(FlowStatus.RUNNING, cancelling, NOW_MS + 1)
    assert await store.write_run(FlowStatus.RUNNING, _ended(done, FlowStatus.DELIVERED, RunStatus.SUCCEEDED), NOW_MS)

    # When they are read two at a time
    first = await store.live_runs(9, 2)
    last = first[-1][0]
    second = await store.live_runs(9, 2, (NOW_MS + 5_000, last.task_id, last.scheduled_at_ms))

    # Then the shards holding live runs are named, and the live runs of shard 9 come by deadline, with their
    # tasks, each once; nothing else
    assert await store.shards_with_live_runs([8, 9, 10, 12]) == {9, 10}
    assert [(f.id, f.status) for f, _ in first + second] == [
        (early.id, FlowStatus.RUNNING),
        (asked.id, FlowStatus.CANCELLING),
        (late.id, FlowStatus.RUNNING),
    ]
    assert first[0][1] is not None and first[0][1].id == early.task_id and first[0][0].run is not None
    assert [t.id for _, t in second if t is not None] == [task.id]
    assert pending.id not in {f.id for f, _ in first + second}
    assert await store.live_runs(9, 10, (DEADLINE_MS, late.task_id, late.scheduled_at_ms)) == []


async def test_the_fires_parked_behind_a_run_are_found_by_its_task_and_deadline(store: TaskStore) -> None:
    # Given a run with its deadline, a fire of its task parked there, one due a moment later, another task's
    task, flow = await fire_once(store, shard=11)
    _, other = await fire_once(store, shard=11)
    parked, later = [
        await store.insert_manual_flow(task.id, replace(flow, scheduled_at_ms=flow.scheduled_at_ms + n)) for n in (1, 2)
    ]
    waits = [(parked, DEADLINE_MS), (later, DEADLINE_MS + 1), (other, DEADLINE_MS)]
    pending = [FlowUpdate(f.task_id, f.scheduled_at_ms, FlowStatus.PENDING, 0, at_ms) for f, at_ms in waits]
    await store.record_flow_updates([_started(flow), *pending], NOW_MS)

    # Then only the task's fire parked at the run's deadline is found
    found = await store.parked_behind(11, [(task.id, DEADLINE_MS)])
    assert [(f.id, f.status, f.next_attempt_at_ms) for f in found] == [(parked.id, FlowStatus.PENDING, DEADLINE_MS)]
    assert await store.parked_behind(11, []) == []


async def test_a_flow_is_read_with_its_task_in_one_call(store: TaskStore) -> None:
    # what a run's report decides from (issue 30: one statement where a read of each was two)
    task, flow = await fire_once(store, shard=1)
    await store.record_flow_updates([_started(flow)], NOW_MS + 10)

    read_flow, read_task = await store.flow_with_task(flow.task_id, flow.scheduled_at_ms)

    assert read_flow == await store.get_flow(flow.task_id, flow.scheduled_at_ms)
    assert read_task is not None and read_task == await store.get_task(task.id)
    assert await store.flow_with_task(flow.task_id, flow.scheduled_at_ms + 1) == (None, None)
    assert await store.flow_with_task(-1, flow.scheduled_at_ms) == (None, None)
    await store.delete_task(task.id)  # its flows are kept: a report of a deleted task's run reads no task
    gone_flow, gone_task = await store.flow_with_task(flow.task_id, flow.scheduled_at_ms)
    assert gone_task is None and (gone_flow is None or gone_flow.id == flow.id)


async def test_a_shards_failed_runs_awaiting_their_retry_are_read_by_shard_in_pages(store: TaskStore) -> None:
    # Given in shard 13 a run reported failed and one timed out (each pending, its retry due), one whose retry
    # was sent and failed to send (pending again, its run kept), a plain fire pending (no run), a live run and
    # a run that succeeded; a failed run in shard 14
    fired = [await fire_once(store, shard=13) for _ in range(6)]
    (task, failed), (_, timed_out), (_, resent), (_, fresh), (_, live), (_, done) = fired
    _, elsewhere = await fire_once(store, shard=14)
    await store.record_flow_updates([_started(f) for f in (failed, timed_out, resent, live, done, elsewhere)], NOW_MS)
    for flow, status, due_ms in (
        (failed, RunStatus.FAILED, NOW_MS + 3_000),
        (timed_out, RunStatus.TIMED_OUT, NOW_MS + 1_000),
        (resent, RunStatus.FAILED, NOW_MS + 2_000),
        (elsewhere, RunStatus.FAILED, NOW_MS + 1_000),
    ):
        retry = replace(_ended(flow, FlowStatus.PENDING, status), next_attempt_at_ms=due_ms)
        assert await store.write_run(FlowStatus.RUNNING, retry, NOW_MS + 500)
    assert await store.write_run(FlowStatus.RUNNING, _ended(done, FlowStatus.DELIVERED, RunStatus.SUCCEEDED), NOW_MS)
    resend_failed = FlowUpdate(
        resent.task_id, resent.scheduled_at_ms, FlowStatus.PENDING, 2, NOW_MS + 2_000, 503, "503"
    )
    await store.record_flow_updates([resend_failed], NOW_MS + 600)

    # When they are read one at a time
    pages: list[list[tuple[Flow, Task | None]]] = [await store.retrying_runs(13, 1)]
    while pages[-1]:
        last = pages[-1][-1][0]
        assert last.next_attempt_at_ms is not None
        pages.append(await store.retrying_runs(13, 1, (last.next_attempt_at_ms, last.task_id, last.scheduled_at_ms)))

    # Then the shards holding such runs are named, and shard 13's come by their retry's time, with their tasks
    # and runs, each once; nothing else
    assert await store.shards_with_retrying_runs([12, 13, 14, 15]) == {13, 14}
    read = [pair for page in pages for pair in page]
    assert [(f.id, f.status, f.attempts) for f, _ in read] == [
        (timed_out.id, FlowStatus.PENDING, 1),
        (resent.id, FlowStatus.PENDING, 2),
        (failed.id, FlowStatus.PENDING, 1),
    ]
    assert [f.run.status if f.run is not None else None for f, _ in read] == [
        RunStatus.TIMED_OUT,
        RunStatus.FAILED,
        RunStatus.FAILED,
    ]
    assert all(t is not None and t.id == f.task_id for f, t in read) and read[2][1] is not None
    assert read[2][1].id == task.id
    assert {fresh.id, live.id, done.id}.isdisjoint(f.id for f, _ in read)
    assert await store.retrying_runs(13, 10, (NOW_MS + 3_000, failed.task_id, failed.scheduled_at_ms)) == []


async def test_a_tasks_open_flows_are_read_by_its_app_and_id(store: TaskStore) -> None:
    # Given a task with a live run, a failed run awaiting its retry, a fire parked behind the run, a delivered
    # flow and a dead one; another task of the shard with a live run
    task, live = await fire_once(store, shard=5)
    retrying, parked, done, dead = [
        await store.insert_manual_flow(task.id, replace(live, scheduled_at_ms=live.scheduled_at_ms + n))
        for n in (1, 2, 3, 4)
    ]
    _, other = await fire_once(store, shard=5)
    await store.record_flow_updates([_started(f) for f in (live, retrying, other)], NOW_MS)
    failed = replace(_ended(retrying, FlowStatus.PENDING, RunStatus.FAILED), next_attempt_at_ms=NOW_MS + 1_000)
    assert await store.write_run(FlowStatus.RUNNING, failed, NOW_MS + 500)
    ends = [
        FlowUpdate(parked.task_id, parked.scheduled_at_ms, FlowStatus.PENDING, 0, DEADLINE_MS),
        FlowUpdate(done.task_id, done.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 200),
        FlowUpdate(dead.task_id, dead.scheduled_at_ms, FlowStatus.DEAD, 1, None, 500, "500"),
    ]
    await store.record_flow_updates(ends, NOW_MS + 600)

    # Then its open flows come by instant, with their runs; at most as many as asked; none of another app's
    found = await store.open_flows_of_task(task.app_id, task.id, 10)
    assert [(f.id, f.status) for f in found] == [
        (live.id, FlowStatus.RUNNING),
        (retrying.id, FlowStatus.PENDING),
        (parked.id, FlowStatus.PENDING),
    ]
    assert [f.run.status if f.run is not None else None for f in found] == [RunStatus.RUNNING, RunStatus.FAILED, None]
    assert [f.id for f in await store.open_flows_of_task(task.app_id, task.id, 2)] == [live.id, retrying.id]
    assert await store.open_flows_of_task("another-app", task.id, 10) == []
