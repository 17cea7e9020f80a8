"""A create to a database server that is down or hangs: refused at once when the node knows, bounded
otherwise, and never told "nothing stored" when its write may have committed.

The group commit (:class:`tjobs.stores.sql_direct.GroupCommit`) runs here over a fake write that
blocks where a hung server would: before sending (waiting for a connection) or after (waiting for the
commit's answer). The service's refusal runs over the in-memory store.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.contract.backends import NOW_MS, make_task
from tests.delivery_fakes import APP
from tjobs.clock import ManualClock
from tjobs.errors import StorageOutcomeUnknown, StorageUnavailable
from tjobs.hot_tier.local import LocalHotTier
from tjobs.model import Task
from tjobs.service.tasks import TaskService
from tjobs.settings import Settings
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.sql_direct import (
    GroupCommit,
    Outcome,
    WriteAbandoned,
    WriteAttempt,
    WriteOutcomeUnknown,
    answered_by_server,
)

SHORT_S = 0.01  # a caller's wait; the fake server never answers within it


class HungServer:
    """A group commit's write that blocks until :meth:`answer`: ``sends_first`` says whether it sent
    its statements before blocking (waiting for the commit) or blocks before sending (waiting for a
    connection). ``written`` holds the tasks it actually sent."""

    def __init__(self, *, sends_first: bool) -> None:
        self.sends_first = sends_first
        self.released = asyncio.Event()
        self.written: list[Task] = []

    def answer(self) -> None:
        self.released.set()

    async def write(self, tasks: list[Task], attempt: WriteAttempt) -> list[Outcome]:
        if self.sends_first:
            attempt.begin_send()
            self.written += tasks
        await self.released.wait()
        if not self.sends_first:
            attempt.begin_send()
            self.written += tasks
        return list(tasks)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_create_answered_in_time_gets_its_task() -> None:
    server = HungServer(sends_first=True)
    server.answer()
    task = make_task(shard=1)
    assert await GroupCommit(server.write, max_flushes=1).insert(task, timeout_s=60) is task


async def test_a_create_sent_and_not_confirmed_by_its_deadline_has_an_unknown_outcome() -> None:
    # Given a server that took the insert and never answers (a stopped server)
    server = HungServer(sends_first=True)
    # When the caller's deadline passes
    with pytest.raises(WriteOutcomeUnknown):
        await GroupCommit(server.write, max_flushes=1).insert(make_task(shard=1), timeout_s=SHORT_S)
    # Then it is not told "nothing stored": the server did receive it
    assert len(server.written) == 1


async def test_a_create_whose_write_had_not_been_sent_by_its_deadline_is_never_sent() -> None:
    # Given a write waiting for a connection to a hung server
    server = HungServer(sends_first=False)
    with pytest.raises(WriteAbandoned):
        await GroupCommit(server.write, max_flushes=1).insert(make_task(shard=1), timeout_s=SHORT_S)
    # When the server answers again after the caller was told nothing was stored
    server.answer()
    await settle()
    # Then the write does not go out
    assert server.written == []


async def test_a_create_still_queued_at_its_deadline_leaves_the_queue() -> None:
    # Given one flush in flight on a hung server, and a second create queued behind it
    server = HungServer(sends_first=True)
    group = GroupCommit(server.write, max_flushes=1)
    first = asyncio.ensure_future(group.insert(make_task(shard=1), timeout_s=60))
    await settle()
    queued = make_task(shard=2)
    with pytest.raises(WriteAbandoned):
        await group.insert(queued, timeout_s=SHORT_S)
    # When the server answers
    server.answer()
    assert await first is not None
    await settle()
    # Then the queued create, answered "nothing stored", was never written
    assert queued not in server.written


async def test_a_group_gate_closes_at_its_earliest_callers_deadline() -> None:
    # Given two creates taken into one write that waits for a connection to a hung server
    server = HungServer(sends_first=False)
    group = GroupCommit(server.write, max_flushes=1)
    early = asyncio.ensure_future(group.insert(make_task(shard=1), timeout_s=SHORT_S))
    late = asyncio.ensure_future(group.insert(make_task(shard=2), timeout_s=60))
    # When the earlier one gives up (told nothing was stored), and only then the server answers
    with pytest.raises(WriteAbandoned):
        await early
    server.answer()
    # Then the write is not sent for the later one either, and it is told so rather than left waiting
    assert isinstance(await late, WriteAbandoned)
    assert server.written == []


async def test_a_write_attempt_sends_only_before_its_deadline_and_until_closed() -> None:
    loop = asyncio.get_running_loop()
    past = WriteAttempt(loop.time() - 1)
    with pytest.raises(WriteAbandoned):
        past.begin_send()
    assert not past.sent
    closed = WriteAttempt(None)
    assert closed.close() is True
    with pytest.raises(WriteAbandoned):
        closed.begin_send()
    sent = WriteAttempt(loop.time() + 60)
    sent.begin_send()
    assert sent.sent and sent.close() is False


class DriverError(Exception):
    pass


@pytest.mark.parametrize(
    ("error", "answered"),
    [
        (DriverError(1062, "Duplicate entry"), True),  # the server refused a row: rolled back
        (DriverError(1205, "Lock wait timeout exceeded"), True),
        (DriverError(1242, "Subquery returns more than 1 row"), True),  # the shard fence
        (DriverError(3024, "query execution was interrupted"), True),
        (DriverError(2013, "Lost connection to MySQL server during query"), False),
        (DriverError(2006, "MySQL server has gone away"), False),
        # asyncmy's own errno 0: a connection it closed after a cancelled read, used again
        (DriverError(0, "Cancelled during execution"), False),
        (DriverError(0, "Not connected"), False),
        (ConnectionResetError(104, "Connection reset by peer"), False),  # an OS errno is not MySQL's
        (OSError("broken pipe"), False),
        (TimeoutError(), False),
    ],
)
def test_only_the_servers_own_refusals_count_as_answered(error: Exception, answered: bool) -> None:
    assert answered_by_server(error) is answered


# ---- the service: a create on a server the node knows is down -----------------------------------------


def service(store: MemoryTaskStore, unreachable: frozenset[int]) -> TaskService:
    settings = Settings(storage={"urls": ["memory://"]}, allow_loopback_callbacks=True)
    return TaskService(
        store,
        LocalHotTier(),
        settings,
        ManualClock(NOW_MS),
        store.topology,
        unreachable_shards=lambda: unreachable,
    )


def create_request(key: str) -> dict[str, Any]:
    return {
        "name": key,
        "key": key,
        "schedule": {"kind": "delay", "delay_ms": 60_000},
        "callback": {"url": "http://127.0.0.1:9/hook"},
    }


async def test_a_create_on_a_server_known_down_is_refused_at_once_and_stores_nothing() -> None:
    store = MemoryTaskStore()
    tasks = service(store, frozenset(range(store.topology.shard_count)))
    with pytest.raises(StorageUnavailable) as refused:
        await tasks.create(APP, create_request("k1"))
    assert not isinstance(refused.value, StorageOutcomeUnknown)
    assert refused.value.status_code == 503 and refused.value.retry_after_s >= 1
    assert await store.find_task_by_key(APP.id, "k1") is None


async def test_a_batch_stores_the_items_of_reachable_servers_and_refuses_the_others() -> None:
    store = MemoryTaskStore()
    shard_count = store.topology.shard_count
    down = frozenset(range(shard_count // 2))
    tasks = service(store, down)
    requests = [create_request(f"k{index}") for index in range(40)]
    results = await tasks.create_many(APP, requests)
    for request, result in zip(requests, results, strict=True):
        stored = await store.find_task_by_key(APP.id, request["key"])
        if result.error is not None:
            assert isinstance(result.error, StorageUnavailable) and stored is None
        else:
            assert result.created and result.task is not None and stored is not None
            assert result.task.id == stored.id
    assert {r.error is None for r in results} == {True, False}, "the keys should land on both halves"
