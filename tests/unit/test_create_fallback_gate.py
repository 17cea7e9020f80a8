"""A create's promise holds through the store's one-by-one fallback (tjobs/stores/sql/creates.py).

A group (or a batch's server share) that fails as a whole is settled task by task. The fallback must keep
what its callers were told when they stopped waiting at ``storage.create_timeout_s``: a caller told
``storage_unavailable`` (nothing was sent) has nothing stored later, and a caller told
``storage_outcome_unknown`` naming an id has its task stored under that id or not at all, never under
another one (an orphan task nobody knows the id of, while the named id may be another task's).

The store is the SQL store on SQLite, its server reached through a stand-in of the raw MariaDB pool
(:class:`tjobs.stores.sql_direct.DirectPool`), the path MariaDB takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from asyncmy.errors import IntegrityError

from testkit.sqlite_template import migrate_sqlite
from tests.contract.backends import make_task
from tjobs.errors import StorageOutcomeUnknown, StorageUnavailable
from tjobs.model import Task
from tjobs.settings import StorageSettings
from tjobs.stores.sql_direct import WriteAttempt
from tjobs.stores.sql_layout import ShardTables
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

TIMEOUT_S = 0.05


class StandInServer:
    """What the store sends to a server: ``insert_new`` (a group or a batch share) waits ``stall_s`` and
    then fails with ``error`` (having sent its statements first when ``sends``); ``insert_task`` (the
    fallback, one task) stores the task unless its id is held by a task of ``taken``."""

    def __init__(self, *, sends: bool, error: Exception, stall_s: float, taken: Sequence[Task] = ()) -> None:
        self.sends = sends
        self.error = error
        self.stall_s = stall_s
        self.taken = {task.id: task for task in taken}
        self.stored: list[int] = []

    async def insert_new(
        self,
        groups: Sequence[tuple[ShardTables, Sequence[Task]]],
        fence_epoch: int | None = None,
        attempt: WriteAttempt | None = None,
    ) -> None:
        if self.sends and attempt is not None:
            attempt.begin_send()
        await asyncio.sleep(self.stall_s)
        raise self.error

    async def insert_task(self, home: ShardTables, task: Task, fence_epoch: int | None = None) -> None:
        if task.id in self.taken:
            raise IntegrityError(1062, f"Duplicate entry '{task.id}' for key 'PRIMARY'")
        self.stored.append(task.id)

    async def get_task(self, home: ShardTables, task_id: int) -> Task | None:
        return self.taken.get(task_id)

    async def taken_keys(self, groups: object) -> dict[tuple[str, str], int]:
        return {}

    async def close(self) -> None:
        pass


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLAlchemyTaskStore]:
    settings = StorageSettings(
        urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x2x4", create_timeout_s=TIMEOUT_S
    )
    await migrate_sqlite(settings)
    opened = SQLAlchemyTaskStore(settings)
    await opened.start()
    yield opened
    await opened.close()


def reached_through(store: SQLAlchemyTaskStore, server: StandInServer) -> None:
    for url in store.layout.engine_urls():
        store._direct[url] = server  # type: ignore[assignment]


async def test_a_group_that_failed_before_sending_stores_nothing_for_a_caller_told_nothing_was_stored(
    store: SQLAlchemyTaskStore,
) -> None:
    # A failure the error mapping does not know (not the server's answer), after the caller's deadline
    server = StandInServer(sends=False, error=RuntimeError("before sending"), stall_s=3 * TIMEOUT_S)
    reached_through(store, server)
    with pytest.raises(StorageUnavailable) as answered:
        await store.insert_task(make_task(shard=3))
    assert not isinstance(answered.value, StorageOutcomeUnknown)  # "nothing was stored"
    await asyncio.sleep(6 * TIMEOUT_S)  # the group's write ends on its own
    assert server.stored == []


async def test_a_batch_item_answered_with_an_unknown_outcome_is_never_stored_under_another_id(
    store: SQLAlchemyTaskStore,
) -> None:
    task = make_task(shard=5)
    holder = replace(make_task(shard=5), id=task.id)  # another node's task minted the same id
    server = StandInServer(
        sends=True, error=IntegrityError(1062, "Duplicate entry"), stall_s=3 * TIMEOUT_S, taken=[holder]
    )
    reached_through(store, server)
    [answer] = await store.insert_tasks([task])
    assert isinstance(answer, StorageOutcomeUnknown)
    named = int(str(answer.details["task_id"]))
    await asyncio.sleep(6 * TIMEOUT_S)  # the share's fallback ends on its own
    assert set(server.stored) <= {named}, f"told {named}, stored {server.stored}"
