"""The SQL store's creates (:meth:`tjobs.stores.contracts.TaskRecords.insert_task` and ``insert_tasks``).

On MariaDB the inserts run on the raw autocommit asyncmy pool of :mod:`tjobs.stores.sql_direct`:
concurrent single creates are group-committed, one transaction per flush and each caller answered after
that commit, a refused row settled on its own; a batch create is one transaction per server rather
than per logical database. On SQLite, concurrent single creates are group-committed the same way, one
writer per file. Every insert is MariaDB's text (:mod:`tjobs.stores.sql_direct`), written once: on SQLite
(and a MariaDB server without a direct pool) :func:`insert_on_engine` runs it one row per execution.

A create (single or batch) waits at most ``storage.create_timeout_s`` for each server it writes to:
an item whose write was never sent answers ``StorageUnavailable`` (nothing stored), one whose write
was sent and not confirmed ``StorageOutcomeUnknown`` (it may have committed; the error names its id).
A batch answers per item: the shares of servers that answered are stored and reported as such.
A write refused as a whole is settled task by task, keeping what its callers were told: only if it had
been sent (:meth:`WriteAttempt.pass_gate`), and a batch item whose caller was answered is stored under the
id that answer named or not at all.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from asyncmy.errors import IntegrityError as DriverIntegrityError
from sqlalchemy import exc as sa_exc
from sqlalchemy import select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from sharding import TaskIdGenerator, shard_of_task_id
from tjobs.errors import Conflict, DuplicateKey, StorageOutcomeUnknown, StorageUnavailable, TaskIdTaken, TjobsError
from tjobs.model import Task
from tjobs.specs import RenderedOnce, callback_to_text
from tjobs.stores.contracts import TaskRecords
from tjobs.stores.sql.connections import INSERT_RETRIES, SqlBase
from tjobs.stores.sql.references import insert_references
from tjobs.stores.sql_direct import (
    Outcome,
    WriteAbandoned,
    WriteAttempt,
    WriteOutcomeUnknown,
    by_shard,
    for_driver,
    task_insert_sql,
    task_values,
    unique_keys,
)
from tjobs.stores.sql_layout import DatabaseHome, ShardTables, safe_url
from tjobs.stores.sql_task_counts import CountDeltas, apply_deltas
from tjobs.stores.task_routing import check_task_shard

T = TypeVar("T")
# a batch share's outcomes: (item index, the stored task, the id holding its key, or the item's error)
Settled = list[tuple[int, Task | int | StorageUnavailable]]
logger = logging.getLogger(__name__)


class SqlCreates(SqlBase, TaskRecords):
    """Inserting tasks: group commit, batches, the create timeout."""

    def _check_routing(self, task: Task) -> ShardTables:
        home = self._shard_of_task(task.id)
        check_task_shard(task, None if home is None else home.shard, self.topology)
        assert home is not None  # check_task_shard refused None
        return home

    async def insert_task(self, task: Task) -> Task:
        home = self._check_routing(task)
        url = home.database.engine_url
        group = self._groups.get(url)
        timeout_s = self.settings.create_timeout_s
        try:
            if group is None:
                return await self._bounded(lambda attempt: self._insert_one(home, task, attempt))
            outcome = await group.insert(task, timeout_s)  # written with whatever else arrives meanwhile
        except (WriteAbandoned, WriteOutcomeUnknown) as error:
            raise self._create_failed(url, task.id, error) from error
        if isinstance(outcome, WriteAbandoned | WriteOutcomeUnknown):
            raise self._create_failed(url, task.id, outcome) from outcome
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, int):
            assert task.key is not None
            raise DuplicateKey(task.app_id, task.key, outcome)
        return outcome

    async def _write_group(self, url: str, tasks: list[Task], attempt: WriteAttempt) -> list[Outcome]:
        """A group commit: every new task of ``tasks`` in one transaction on ``url`` (a MariaDB server
        through sql_direct, or a SQLite file); if any row is refused, each task is settled on its own
        so that only that one fails."""
        direct = self._direct.get(url)
        outcomes = unique_keys(tasks, {})
        groups = by_shard(self.layout, [t for t in outcomes if isinstance(t, Task)])
        try:
            if direct is not None:
                async with self._direct_call(url):
                    await direct.insert_new(groups, self._fence_epoch, attempt)
            else:
                attempt.begin_send()
                async with self._write(url) as conn:
                    await insert_on_engine(conn, self.layout.dialect, groups)
            return list(outcomes)
        except (TjobsError, WriteAbandoned, WriteOutcomeUnknown):
            raise  # unavailable, not sent, or sent and unconfirmed: so is each one
        except Exception:  # a refused row (key, id, data) or a deadlock: one by one
            pass
        attempt.pass_gate()  # a caller told "nothing was sent" keeps nothing stored
        settled: list[Outcome] = []
        for task in tasks:
            try:
                settled.append(await self._insert_one(self._check_routing(task), task))
            except DuplicateKey as duplicate:
                settled.append(duplicate.existing_task_id)
            except Exception as error:  # this task's own error, for its own caller
                settled.append(error)
        return settled

    async def _insert_one(self, home: ShardTables, task: Task, attempt: WriteAttempt | None = None) -> Task:
        url = home.database.engine_url
        direct = self._direct.get(url)
        if attempt is not None:
            attempt.begin_send()  # (before the connection is taken: a wait for one counts as sent)
        for _ in range(INSERT_RETRIES):
            try:
                if direct is not None:
                    async with self._direct_call(url):
                        await direct.insert_task(home, task, self._fence_epoch)
                else:
                    async with self._write(url) as conn:
                        await insert_on_engine(conn, self.layout.dialect, [(home, [task])])
                return replace(task)
            except (sa_exc.IntegrityError, DriverIntegrityError) as error:
                await self._raise_insert_conflict(task, error)
        raise Conflict(f"task {task.id} could not be stored after {INSERT_RETRIES} attempts; retry")

    async def _raise_insert_conflict(self, task: Task, error: Exception) -> None:
        """Explain a failed insert: the key is taken (DuplicateKey) or the id is (Conflict).

        Returns (so the caller retries) only if neither holds any more: the holder was just deleted.
        """
        if task.key is not None:
            existing = await self.find_task_by_key(task.app_id, task.key)
            if existing is not None:
                raise DuplicateKey(task.app_id, task.key, existing.id) from error
        if await self.get_task(task.id) is not None:
            raise TaskIdTaken(task.id) from error

    async def insert_tasks(self, tasks: Sequence[Task]) -> list[Task | int | StorageUnavailable]:
        by_database: dict[DatabaseHome, list[int]] = defaultdict(list)
        by_server: dict[str, list[int]] = defaultdict(list)  # MariaDB: one transaction per server
        for index, task in enumerate(tasks):
            database = self._check_routing(task).database
            if database.engine_url in self._direct:
                by_server[database.engine_url].append(index)
            else:
                by_database[database].append(index)
        shares: list[tuple[str, list[tuple[int, Task]], Callable[[WriteAttempt], Awaitable[Settled]]]] = []
        for home, indexes in by_database.items():
            items = [(i, tasks[i]) for i in indexes]
            shares.append((home.engine_url, items, functools.partial(self._insert_batch, home, items)))
        for url, indexes in by_server.items():
            items = [(i, tasks[i]) for i in indexes]
            shares.append((url, items, functools.partial(self._insert_server_batch, url, items)))
        settled = await asyncio.gather(*(self._insert_share(url, items, write) for url, items, write in shares))
        results: dict[int, Task | int | StorageUnavailable] = {}
        for share in settled:
            results.update(share)
        return [results[index] for index in range(len(tasks))]

    async def _insert_share(
        self, url: str, items: list[tuple[int, Task]], write: Callable[[WriteAttempt], Awaitable[Settled]]
    ) -> dict[int, Task | int | StorageUnavailable]:
        """One server's (or database's) share of a batch, bounded by ``storage.create_timeout_s``; if its
        server cannot be reached or does not answer in time, each of its items carries the error."""
        try:
            return dict(await self._bounded(write))
        except (StorageUnavailable, WriteAbandoned, WriteOutcomeUnknown) as error:
            return {index: self._create_failed(url, task.id, error) for index, task in items}

    async def _bounded(self, write: Callable[[WriteAttempt], Awaitable[T]]) -> T:
        """Run ``write`` for at most ``storage.create_timeout_s``: past it, raise :class:`WriteAbandoned`
        and close its gate if it sent nothing yet, else :class:`WriteOutcomeUnknown`. The write is not
        cancelled (a hung server would leave its connection mid-statement); it ends on its own."""
        timeout_s = self.settings.create_timeout_s
        loop = asyncio.get_running_loop()
        attempt = WriteAttempt(loop.time() + timeout_s)
        running = asyncio.ensure_future(write(attempt))
        try:
            return await asyncio.wait_for(asyncio.shield(running), timeout_s)
        except TimeoutError:
            running.add_done_callback(_log_late_write)
            if attempt.close():
                raise WriteAbandoned(f"not sent within {timeout_s:g} s") from None
            raise WriteOutcomeUnknown(f"sent and not confirmed within {timeout_s:g} s") from None

    def _create_failed(self, url: str, task_id: int, error: BaseException) -> StorageUnavailable:
        """The API's error for a create whose write failed with ``error`` (one of the store's own kinds)."""
        if isinstance(error, StorageUnavailable):
            return error
        server = self._server_names.get(url, safe_url(url))
        limit = f"storage.create_timeout_s: {self.settings.create_timeout_s:g} s"
        if isinstance(error, WriteOutcomeUnknown):
            return StorageOutcomeUnknown(task_id, f"database server {server}: {error} ({limit})")
        return StorageUnavailable(f"database server {server} did not answer ({error}; {limit}); nothing was stored")

    async def _insert_server_batch(self, url: str, items: list[tuple[int, Task]], attempt: WriteAttempt) -> Settled:
        """The server's share of a batch in one transaction (sql_direct); item by item if it conflicts."""
        direct = self._direct[url]
        tasks = [task for _, task in items]
        try:
            async with self._direct_call(url):
                taken = await direct.taken_keys(by_shard(self.layout, [t for t in tasks if t.key is not None]))
                outcomes = unique_keys(tasks, taken)
                await direct.insert_new(
                    by_shard(self.layout, [t for t in outcomes if isinstance(t, Task)]), self._fence_epoch, attempt
                )
            return [(index, outcome) for (index, _), outcome in zip(items, outcomes, strict=True)]
        except (TjobsError, WriteAbandoned, WriteOutcomeUnknown):
            raise
        except Exception:  # a concurrent writer took a key or an id, or a refused row
            pass
        attempt.pass_gate()
        return await self._settle_items(url, items, attempt)

    async def _settle_items(self, url: str, items: list[tuple[int, Task]], attempt: WriteAttempt) -> Settled:
        """Each item of a share that conflicted as a whole, on its own: some may be stored before the
        server fails, so a storage error is the item's own."""
        settled: Settled = []
        for index, task in items:
            try:
                settled.append((index, await self._settle_item(task, attempt)))
            except (StorageUnavailable, WriteOutcomeUnknown) as error:
                settled.append((index, self._create_failed(url, task.id, error)))
        return settled

    async def _settle_item(self, task: Task, attempt: WriteAttempt) -> Task | int:
        """Insert one item of a batch that conflicted as a whole. Other items (and other servers'
        shares) may be committed already, so this item must not fail the batch for a taken id: it is
        stored under another id of the same shard instead (see ``TaskStore.insert_tasks``) while its
        caller waits. Once the caller was answered (its outcome unknown, naming this id) the item is
        stored under that id or not at all: another id would be a task nobody knows of."""
        for _ in range(INSERT_RETRIES):
            try:
                return await self._insert_one(self._check_routing(task), task)
            except DuplicateKey as duplicate:
                return duplicate.existing_task_id
            except TaskIdTaken:
                if attempt.given_up:
                    logger.warning(
                        "a batch item's id %d was taken after its caller was told its outcome was unknown: not stored",
                        task.id,
                        extra={"action": "late_write"},
                    )
                    raise WriteOutcomeUnknown(f"task id {task.id} was taken; not stored under another") from None
                task.id = TaskIdGenerator.remint(task.id)
        raise Conflict(f"task {task.name!r} found its id taken {INSERT_RETRIES} times; retry")

    async def _insert_batch(self, home: DatabaseHome, items: list[tuple[int, Task]], attempt: WriteAttempt) -> Settled:
        """One transaction for the database's share of the batch; item by item if it conflicts."""
        by_shard: dict[int, list[tuple[int, Task]]] = defaultdict(list)
        for index, task in items:
            by_shard[shard_of_task_id(task.id)].append((index, task))
        attempt.begin_send()
        try:
            async with self._write(home.engine_url) as conn:
                staged: dict[int, Task | int] = {}
                new: list[tuple[ShardTables, list[Task]]] = []
                for shard, shard_items in sorted(by_shard.items()):
                    shard_home = self.layout.shards[shard]
                    new.append((shard_home, await self._new_shard_items(conn, shard_home, shard_items, staged)))
                await insert_on_engine(conn, self.layout.dialect, new)
            return list(staged.items())
        except sa_exc.IntegrityError:
            pass  # a concurrent writer took a key or an id: settle each item on its own
        return await self._settle_items(home.engine_url, items, attempt)

    async def _new_shard_items(
        self,
        conn: AsyncConnection,
        home: ShardTables,
        items: list[tuple[int, Task]],
        staged: dict[int, Task | int],
    ) -> list[Task]:
        """The items of one shard to insert: those whose key no stored task holds (staged as the id
        holding it otherwise), the first of several with one key."""
        tasks_t = home.tasks
        keyed = {(t.app_id, t.key) for _, t in items if t.key is not None}
        taken: dict[tuple[str, str], int] = {}
        if keyed:
            rows = await conn.execute(
                select(tasks_t.c.app_id, tasks_t.c.idem_key, tasks_t.c.id).where(
                    tuple_(tasks_t.c.app_id, tasks_t.c.idem_key).in_(sorted(keyed))
                ),
                execution_options=home.options,
            )
            taken = {(row.app_id, row.idem_key): int(row.id) for row in rows}
        new_tasks: list[Task] = []
        for index, task in items:
            if task.key is not None and (task.app_id, task.key) in taken:
                staged[index] = taken[(task.app_id, task.key)]
                continue
            if task.key is not None:
                taken[(task.app_id, task.key)] = task.id  # a later item with the same key gets this id
            staged[index] = replace(task)
            new_tasks.append(task)
        return new_tasks


async def insert_on_engine(
    conn: AsyncConnection, dialect: str, groups: Sequence[tuple[ShardTables, Sequence[Task]]]
) -> None:
    """Insert each group's tasks and references on an engine connection (SQLite, or a MariaDB server
    without a direct pool): the statements of :mod:`tjobs.stores.sql_direct`, one row per execution,
    then their counts (one upsert per logical database), in the connection's transaction."""
    deltas = CountDeltas()
    callbacks = RenderedOnce(callback_to_text)  # the callback texts of specs the tasks share
    for home, tasks in groups:
        if not tasks:
            continue
        rows = [task_values(t, callbacks) for t in tasks]
        await conn.exec_driver_sql(for_driver(conn, task_insert_sql(home.tasks_sql)), rows)
        await insert_references(conn, home, tasks)
        for task in tasks:
            deltas.change(home, task.app_id, None, task.status)
    await apply_deltas(conn, dialect, deltas)


def _log_late_write(write: asyncio.Future[Any]) -> None:
    """A create's write that ended after its caller stopped waiting: say how (its outcome was unknown)."""
    if write.cancelled():
        return
    error = write.exception()
    if error is not None and not isinstance(error, WriteAbandoned):
        logger.warning(
            "a create's write failed after its caller was answered: %r", error, extra={"action": "late_write"}
        )
