"""The API's hot paths on MariaDB, on a raw asyncmy pool beside SQLAlchemy's engine.

A single create (``START TRANSACTION``, the task's ``INSERT``, the upsert of its count and ``COMMIT``)
and a get by id (``SELECT`` by primary key) are one round trip each. Through SQLAlchemy Core each paid
for the greenlet bridge, statement compilation/caching, pool checkout and checkin and, for reads, a
``ROLLBACK`` round trip closing the implicit transaction: about half of a node's CPU per create in the
profile. Here they run on connections in autocommit mode: a create that returns has been committed
(durably, per the server's ``innodb_flush_log_at_trx_commit``), exactly like SQLAlchemy's
``begin()``/``commit()`` pair, and a read needs no transaction to close. ``READ COMMITTED`` as on the
engine.

Batches of new tasks (a batch create, or concurrent single creates grouped by :class:`GroupCommit`)
go in ONE transaction per server, whatever logical databases and tables they touch: a multi-row
``INSERT`` per table (tasks naming targets add their ``task_targets_TT`` rows) and one upsert of the
task counts per logical database (:mod:`tjobs.stores.sql_task_counts`), all sent as one
multi-statement (split only past :data:`ROUND_TRIP_BYTES`) ending in ``COMMIT``. Any error rolls
the whole transaction back; the store then settles each item on its own, so one bad row never fails
its neighbours.

A create waits at most ``storage.create_timeout_s`` for its server (:class:`WriteAttempt`): a write
that was not sent by then never will be (nothing stored, :class:`WriteAbandoned`), and one that was
sent, or whose connection broke while it ran, may have committed (:class:`WriteOutcomeUnknown`). The
store turns these into ``StorageUnavailable`` and ``StorageOutcomeUnknown``.

Each server also has a **fire pool** (:func:`fire_connect_kwargs`, :meth:`DirectPool.transaction`):
the fire transaction (:mod:`tjobs.stores.sql_fire`) and the deliverer's outcome writes
(:mod:`tjobs.stores.sql_flow_updates`) run there, without SQLAlchemy's engine ``begin``/``commit``
around them, on sessions like the engine's: autocommit off, ``READ COMMITTED``,
``innodb_lock_wait_timeout`` = :data:`~tjobs.stores.sql_layout.ROW_LOCK_WAIT_S`; each session is
recorded for the session fence (:meth:`tjobs.stores.sql_sessions.SessionRegistry.track`). Its own
pool, not the API's: the API's autocommit sessions keep the server's lock wait.

Only identifiers derived from the topology are put into the SQL text by hand; values are filled in by
the driver's escaping (asyncmy fills ``%s`` marks on the client), except the rows of a group's or batch's
tasks, which :class:`tjobs.stores.sql_literals.TaskRows` writes as literals with the connection's own
escaping (17,000 parameters of a 1,000-task batch cost a fifth of its node CPU through the driver). The
inserts of tasks and of their references are written once, here
(:func:`task_insert_head`, :data:`TASK_ROW`, :func:`task_insert_sql`, :func:`reference_insert_head`,
:data:`REFERENCE_ROW`): SQLite and an engine without a direct pool run the same text, one row per
execution, with their driver's mark (:func:`for_driver`). A server URL with options this module does
not translate (anything but ``charset`` and ``unix_socket``) gets no direct pool and no fire pool, and
the store keeps using SQLAlchemy for it.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncmy
import asyncmy.errors
from asyncmy.constants import CLIENT, SERVER_STATUS
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from sharding import shard_of_task_id
from tjobs.model import Flow, Task
from tjobs.settings import StorageSettings
from tjobs.specs import RenderedOnce, callback_to_text, schedule_to_text
from tjobs.stores.schema import TASK_COLUMNS, children_to_text, dumps, flow_from_row, task_from_row
from tjobs.stores.shard_fence import fence_statement
from tjobs.stores.sql_layout import MYSQL, ROW_LOCK_WAIT_S, Layout, ShardTables
from tjobs.stores.sql_literals import TaskRows
from tjobs.stores.sql_task_counts import CountDeltas

_TASK_COLUMN_LIST = ", ".join(TASK_COLUMNS)
_TASK_MARKS = ", ".join(["%s"] * len(TASK_COLUMNS))
TASK_ROW = f"({_TASK_MARKS})"  # one task's values, in :data:`TASK_COLUMNS` order (:func:`task_values`)
REFERENCE_ROW = "(%s, %s, %s)"  # one reference: app id, target name, task id (:func:`reference_values`)
_TRANSLATED_QUERY = frozenset({"charset", "unix_socket"})
ROUND_TRIP_BYTES = 4 << 20  # statement text per round trip, well under max_allowed_packet (16 MiB)


class WriteAbandoned(Exception):
    """A write that was never sent: its deadline passed first (or the server could not be reached)."""


class WriteOutcomeUnknown(Exception):
    """A write that was sent and then got no answer from its server (the connection broke, or the caller
    stopped waiting): the transaction may have committed."""


class WriteAttempt:
    """The gate of one write: :meth:`begin_send` lets it send only before ``deadline`` (event loop time;
    ``None``: no deadline) and while nobody :meth:`close`-d it, and records that it did. A caller that
    stops waiting can then tell a write that will never be sent from one whose outcome is unknown."""

    def __init__(self, deadline: float | None = None) -> None:
        self.deadline = deadline
        self.sent = False
        self.closed = False
        self.given_up = False  # a caller stopped waiting (close): what it was told must stay true

    def begin_send(self) -> None:
        """Called right before the first statement goes out; raises :class:`WriteAbandoned` if too late."""
        late = self.deadline is not None and asyncio.get_running_loop().time() >= self.deadline
        if self.closed or late:
            self.closed = True
            raise WriteAbandoned("the write's deadline passed before it was sent")
        self.sent = True

    def close(self) -> bool:
        """Stop the write from being sent; False if it was sent already (its outcome is then unknown)."""
        self.given_up = True
        self.closed = not self.sent
        return self.closed

    def pass_gate(self) -> None:
        """Before a fallback sends what a failed write had not: :meth:`begin_send` unless that write had
        passed it already (a write refused by its server was sent: its callers were told so)."""
        if not self.sent:
            self.begin_send()


def answered_by_server(error: BaseException) -> bool:
    """Whether ``error`` is the server's own refusal of a statement (its transaction rolled back), as
    opposed to the connection failing under it: MySQL's server errors are 1000–1999 and 3000+, the
    client library's (lost connection, gone away) 2000–2999, asyncmy's own 0 (a connection it closed
    after a cancelled read, used again); an OS error (its errno is not MySQL's) is the connection
    failing."""
    if isinstance(error, OSError):
        return False
    args = getattr(error, "args", ())
    errno = args[0] if args and isinstance(args[0], int) else None
    return errno is not None and (1000 <= errno < 2000 or errno >= 3000)


def connect_kwargs(engine_url: str, settings: StorageSettings) -> dict[str, Any] | None:
    """asyncmy connection arguments equivalent to the engine's, or ``None`` if the URL has options
    this module would not honour."""
    url = make_url(engine_url)
    if set(url.query) - _TRANSLATED_QUERY:
        return None
    kwargs: dict[str, Any] = {
        "host": url.host or "127.0.0.1",
        "port": url.port or 3306,
        "user": url.username or "",
        "password": url.password or "",
        "charset": str(url.query.get("charset", "utf8mb4")),
        "autocommit": True,
        "connect_timeout": max(1, int(settings.connect_timeout_s)),
        # FOUND_ROWS as on the engine; MULTI_STATEMENTS for a batch's one round trip (values bound)
        "client_flag": CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
        "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    }
    if "unix_socket" in url.query:
        kwargs["unix_socket"] = str(url.query["unix_socket"])
    return kwargs


def task_insert_head(tasks_sql: str) -> str:
    """``INSERT INTO <tasks table> (<columns>) VALUES ``, followed by one :data:`TASK_ROW` per row."""
    return f"INSERT INTO {tasks_sql} ({_TASK_COLUMN_LIST}) VALUES "


@functools.cache
def task_insert_sql(tasks_sql: str) -> str:
    """The one-row insert of a task into ``tasks_sql``, built once per table."""
    return task_insert_head(tasks_sql) + TASK_ROW


def reference_insert_head(task_targets_sql: str) -> str:
    """``INSERT INTO <task_targets table> (app_id, target, task_id) VALUES ``, then :data:`REFERENCE_ROW` s."""
    return f"INSERT INTO {task_targets_sql} (app_id, target, task_id) VALUES "


def reference_values(tasks: Sequence[Task]) -> list[tuple[str, str, int]]:
    """The ``task_targets`` rows of ``tasks``: one per target a callback names (none for inline)."""
    return [(task.app_id, name, task.id) for task in tasks for name in task.callback.targets]


def for_driver(conn: AsyncConnection, sql: str) -> str:
    """``sql`` as written here (asyncmy's ``%s`` mark) for ``conn``'s driver: sqlite3 takes ``?``."""
    return sql.replace("%s", "?") if conn.dialect.paramstyle == "qmark" else sql


def task_values(task: Task, callbacks: RenderedOnce[str] | None = None) -> tuple[Any, ...]:
    """The row of :func:`tjobs.stores.schema.task_to_row`, in :data:`TASK_COLUMNS` order. ``callbacks``:
    the callback texts of one statement's rows, each spec written once (``RenderedOnce(callback_to_text)``)."""
    callback = callback_to_text(task.callback) if callbacks is None else callbacks(task.callback)
    return (
        task.id,
        task.app_id,
        task.name,
        task.key,
        task.status.value,
        task.next_run_at_ms,
        task.version,
        task.fire_count,
        schedule_to_text(task.schedule),
        callback,
        dumps(task.payload),
        task.misfire_policy.value,
        task.delivery.value,
        task.created_at_ms,
        task.updated_at_ms,
        task.revision,
        children_to_text(task.children),
    )


_FLOW_READS: dict[str, tuple[str, tuple[str, ...]]] = {}
_FLOW_READS_MAX = 4096  # tables of layouts since reloaded: emptied when full


def _flow_read(home: ShardTables) -> tuple[str, tuple[str, ...]]:
    """The read of one flow of ``home``'s flows table by its key, and the columns it returns."""
    found = _FLOW_READS.get(home.flows_sql)
    if found is None:
        names = tuple(column.name for column in home.flows.c)
        sql = f"SELECT {', '.join(names)} FROM {home.flows_sql} WHERE task_id = %s AND scheduled_at = %s"
        if len(_FLOW_READS) >= _FLOW_READS_MAX:
            _FLOW_READS.clear()
        found = _FLOW_READS[home.flows_sql] = (sql, names)
    return found


def _task_of(row: tuple[Any, ...] | None) -> Task | None:
    return None if row is None else task_from_row(dict(zip(TASK_COLUMNS, row, strict=True)))


class HealthConnection:
    """One connection to one server kept for the health check alone (:meth:`ping`): the pools may all
    be busy with a burst of fires for seconds, and a node must not take that for an unreachable
    database and fence itself. Opened on first use; dropped after any failed or cancelled ping (its
    state is then unknown) and opened again by the next."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self._kwargs = {**kwargs, "autocommit": True}
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def ping(self) -> None:
        async with self._lock:
            try:
                if self._conn is None:
                    self._conn = await asyncmy.connect(**self._kwargs)
                async with self._conn.cursor() as cursor:
                    await cursor.execute("SELECT 1")
                    await cursor.fetchone()
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def fire_connect_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The connection arguments of a server's fire pool (:meth:`DirectPool.transaction`), from those of
    :func:`connect_kwargs`: the session of the engine's connections, which ran the fire transaction
    before (:func:`tjobs.stores.sql_layout.create_engine_for`): autocommit off (the first statement
    opens the transaction, COMMIT or ROLLBACK ends it), ``innodb_lock_wait_timeout`` =
    :data:`ROW_LOCK_WAIT_S` set by ``init_command``, and ``READ COMMITTED`` (set once per connection
    by :data:`FIRE_SESSION_SETUP`: ``init_command`` runs one statement)."""
    return {**kwargs, "autocommit": False, "init_command": f"SET SESSION innodb_lock_wait_timeout = {ROW_LOCK_WAIT_S}"}


FIRE_SESSION_SETUP = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"


class DirectPool:
    """A small asyncmy pool for one MariaDB server (opened on first use): autocommit connections for the
    API's statements (:func:`connect_kwargs`), or, with :func:`fire_connect_kwargs`, a server's fire pool
    (:meth:`transaction`). ``on_connect`` is awaited with each new connection before its first use (the
    store records its session for the session fence: :class:`tjobs.stores.sql_sessions.SessionRegistry`)."""

    def __init__(
        self,
        kwargs: dict[str, Any],
        size: int,
        on_connect: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self._kwargs = kwargs
        self._size = size
        self._pool: Any = None
        self._opening = asyncio.Lock()
        self._on_connect = on_connect
        self._ready: weakref.WeakSet[Any] = weakref.WeakSet()  # connections set up for transaction()

    @asynccontextmanager
    async def transaction(self, *, commit: bool = True) -> AsyncIterator[Any]:
        """A connection of the fire pool (:func:`fire_connect_kwargs`) in a transaction, committed when
        the block exits cleanly. What the engine's ``begin()`` did, without the engine around it (the
        fire transaction and the outcome writes: docs/benchmarks.md, issue 13). ``commit=False``: the
        block ends its transaction itself, its last statement a ``COMMIT`` or ``ROLLBACK`` sent with
        the statements before it (a run's report: :mod:`tjobs.stores.sql_run_writes`; the outcome writes:
        :mod:`tjobs.stores.sql_flow_updates`), then :func:`committed_in_batch`; nothing is sent
        when it exits cleanly.

        No connection goes back to the pool with a transaction open or in an unknown state: an error the
        server answered (the connection intact) or one of the caller's own (``Fenced``, a planner bug)
        rolls the transaction back; a broken connection, a cancellation (a statement may be half read)
        or a failed ROLLBACK drops the connection, and the server rolls its transaction back. A COMMIT
        that got no answer (or whose caller was cancelled waiting for one) drops it too: its outcome is
        unknown, and the caller's error says so no more than the engine's did (the runner re-reads a
        rejected retry: :meth:`tjobs.firing.runner.JobRunner._reconcile`)."""
        pool = self._pool or await self._open()
        async with pool.acquire() as conn:
            if conn not in self._ready:
                try:
                    async with conn.cursor() as cursor:
                        await cursor.execute(FIRE_SESSION_SETUP)
                    if self._on_connect is not None:
                        await self._on_connect(conn)
                    await conn.commit()  # the fire's first statement opens its own transaction
                except BaseException:
                    conn.close()
                    raise
                self._ready.add(conn)
            try:
                yield conn
            except BaseException as error:
                await _rollback_or_close(conn, error)
                raise
            if not commit:
                return
            try:
                await conn.commit()
            except BaseException:
                conn.close()
                raise

    @asynccontextmanager
    async def cursor(self) -> AsyncIterator[Any]:
        pool = self._pool or await self._open()
        async with pool.acquire() as conn, conn.cursor() as cursor:
            yield cursor

    async def _open(self) -> Any:
        async with self._opening:
            if self._pool is None:
                self._pool = await asyncmy.create_pool(minsize=0, maxsize=self._size, pool_recycle=3600, **self._kwargs)
        return self._pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
            await pool.wait_closed()

    # ---- statements ---------------------------------------------------------------------------------

    async def insert_task(self, home: ShardTables, task: Task, fence_epoch: int | None = None) -> None:
        """One task in a transaction with its count (and its reference rows, if it names targets):
        :meth:`insert_new`, committed when it returns; asyncmy's ``IntegrityError`` on a taken id or key
        (nothing written), :class:`WriteOutcomeUnknown` if the connection broke while it ran."""
        await self.insert_new([(home, [task])], fence_epoch)

    async def get_flow(self, home: ShardTables, task_id: int, scheduled_at_ms: int) -> Flow | None:
        """One flow by its key: one ``SELECT`` of its columns (the text built once per table)."""
        sql, names = _flow_read(home)
        async with self.cursor() as cursor:
            await cursor.execute(sql, (task_id, scheduled_at_ms))
            row = await cursor.fetchone()
        return None if row is None else flow_from_row(dict(zip(names, row, strict=True)))

    async def get_task(self, home: ShardTables, task_id: int) -> Task | None:
        async with self.cursor() as cursor:
            await cursor.execute(f"SELECT {_TASK_COLUMN_LIST} FROM {home.tasks_sql} WHERE id = %s", (task_id,))
            return _task_of(await cursor.fetchone())

    async def find_task_by_key(self, home: ShardTables, app_id: str, key: str) -> Task | None:
        async with self.cursor() as cursor:
            await cursor.execute(
                f"SELECT {_TASK_COLUMN_LIST} FROM {home.tasks_sql} WHERE app_id = %s AND idem_key = %s",
                (app_id, key),
            )
            return _task_of(await cursor.fetchone())

    async def taken_keys(self, groups: Sequence[tuple[ShardTables, Sequence[Task]]]) -> dict[tuple[str, str], int]:
        """The ids already holding the groups' ``(app_id, key)`` pairs: one ``UNION ALL`` query."""
        parts: list[str] = []
        params: list[Any] = []
        for home, tasks in groups:
            keyed = sorted({(t.app_id, t.key) for t in tasks if t.key is not None})
            if keyed:
                pairs = ", ".join(["(%s, %s)"] * len(keyed))
                parts.append(f"SELECT app_id, idem_key, id FROM {home.tasks_sql} WHERE (app_id, idem_key) IN ({pairs})")
                params.extend(value for pair in keyed for value in pair)
        if not parts:
            return {}
        async with self.cursor() as cursor:
            await cursor.execute(" UNION ALL ".join(parts), params)
            return {(app_id, key): int(task_id) for app_id, key, task_id in await cursor.fetchall()}

    async def insert_new(
        self,
        groups: Sequence[tuple[ShardTables, Sequence[Task]]],
        fence_epoch: int | None = None,
        attempt: WriteAttempt | None = None,
    ) -> None:
        """Insert every task of ``groups`` in one transaction (committed when this returns). Raises
        the driver's error, having rolled everything back, if any row is refused, and
        :class:`WriteOutcomeUnknown` if the connection failed once the statements were sent. With
        ``fence_epoch``, the transaction first passes the fence of each logical database it writes to
        (:func:`tjobs.stores.shard_fence.fence_statement`, error 1242 when it does not). With
        ``attempt``, nothing is sent unless its gate lets it (:meth:`WriteAttempt.begin_send`)."""
        if not any(tasks for _, tasks in groups):
            return
        async with self.cursor() as cursor:
            chunks = insert_text(groups, fence_epoch, cursor.connection.escape_string, cursor.mogrify)
            if attempt is not None:
                attempt.begin_send()  # a connection is at hand: nothing was sent before this
            try:
                for sql in chunks:
                    await cursor.execute(sql)  # no parameters: the values are in the text
                    while await cursor.nextset():
                        pass
            except BaseException as error:
                await _rollback_or_drop(cursor)
                if isinstance(error, Exception) and not answered_by_server(error):
                    raise WriteOutcomeUnknown(f"the connection failed during the transaction: {error}") from error
                raise


def insert_text(
    groups: Sequence[tuple[ShardTables, Sequence[Task]]],
    fence_epoch: int | None,
    escape: Callable[[str], str],
    mogrify: Callable[[str, Sequence[Any]], str],
) -> list[str]:
    """The round trips of :meth:`DirectPool.insert_new` as text for one connection: ``START TRANSACTION``,
    the fence (with ``fence_epoch``), a multi-row ``INSERT`` per table (rows as literals,
    :class:`tjobs.stores.sql_literals.TaskRows` with the connection's ``escape``) and the references of
    tasks naming targets, one upsert of the counts per logical database, ``COMMIT``; split into round trips
    past :data:`ROUND_TRIP_BYTES` characters. The few values of the other statements are the driver's
    (``mogrify``, asyncmy's filling of ``%s`` marks)."""
    rows_of = TaskRows(escape)
    chunks: list[str] = []
    statements: list[str] = []
    size = 0
    for home, tasks in groups:
        head = task_insert_head(home.tasks_sql)
        rows: list[str] = []
        for task in tasks:
            row = rows_of.row(task)
            if (rows or statements) and size + len(row) > ROUND_TRIP_BYTES:
                if rows:
                    statements.append(head + ",".join(rows))
                    rows = []
                chunks.append(";".join(statements))
                statements, size = [], 0
            rows.append(row)
            size += len(row) + 1
        if rows:
            statements.append(head + ",".join(rows))
        references = reference_values(tasks)
        if references:  # which tasks name which target, in the same transaction as the tasks
            sql = reference_insert_head(home.task_targets_sql) + ", ".join([REFERENCE_ROW] * len(references))
            statements.append(mogrify(sql, [value for reference in references for value in reference]))
    deltas = CountDeltas()
    for home, tasks in groups:
        for task in tasks:
            deltas.change(home, task.app_id, None, task.status)
    for sql, count_params in deltas.statements(MYSQL):  # one per logical database, after every insert
        statements.append(mogrify(sql, count_params))
    if statements:
        chunks.append(";".join(statements))
    # START TRANSACTION and COMMIT ride in the first and last round trips: a group that fits in one
    # is a single round trip. A refused statement stops the rest (COMMIT included).
    first = chunks[0]
    if fence_epoch is not None:
        fence_sql, fence_params = fence_statement(list({home.database: None for home, _ in groups}), fence_epoch)
        first = f"{mogrify(fence_sql, fence_params)};{first}"
    chunks[0] = "START TRANSACTION;" + first
    chunks[-1] += ";COMMIT"
    return chunks


def committed_in_batch(conn: Any) -> None:
    """``conn``'s multi-statement ended with ``COMMIT`` (:meth:`DirectPool.transaction` with ``commit=False``):
    the transaction is over. asyncmy keeps a result's server status only where it is not 0, which a session
    with autocommit off has out of a transaction, so the connection would still say a transaction is open
    and its pool would drop it (a new connection per call). What the server said is set here."""
    conn.server_status &= ~(SERVER_STATUS.SERVER_STATUS_IN_TRANS | SERVER_STATUS.SERVER_MORE_RESULTS_EXISTS)


async def _rollback_or_close(conn: Any, error: BaseException) -> None:
    """End the transaction of :meth:`DirectPool.transaction` that ``error`` stopped (see there)."""
    if isinstance(error, Exception) and (
        answered_by_server(error) or not isinstance(error, asyncmy.errors.Error | OSError)
    ):
        try:
            await conn.rollback()
            return
        except BaseException:  # failed or cancelled: the connection's state is unknown
            pass
    conn.close()


async def _rollback_or_drop(cursor: Any) -> None:
    """Leave no transaction open on a pooled connection (the pool also drops any that still is)."""
    try:
        await cursor.execute("ROLLBACK")
    except Exception:  # the connection is gone; the pool discards it
        cursor.connection.close()


Outcome = Task | int | BaseException  # stored task, id holding its key, or this item's error


@dataclass(slots=True, eq=False)
class _Waiter:
    task: Task
    future: asyncio.Future[Outcome]
    deadline: float | None  # event loop time
    attempt: WriteAttempt | None = None  # the write that took it (None: still queued)


class GroupCommit:
    """Concurrent single inserts for one server, written together: one transaction per flush.

    A caller waits for its own task's outcome only. When nothing is being flushed, an insert is
    written at once (no added latency); while ``max_flushes`` flushes are in flight, arrivals queue
    and the next flush takes up to ``max_rows`` of them. ``write`` settles a group: per task the
    stored task, the id of the task already holding its key, or that task's own exception. It must
    call :meth:`WriteAttempt.begin_send` on the attempt it is given before sending anything.

    A caller that passes ``timeout_s`` waits that long at most; then, if its task was never sent (still
    queued, or its group's write not started: the group's gate closes at its earliest caller's
    deadline), it gets :class:`WriteAbandoned` and the task is never written; otherwise
    :class:`WriteOutcomeUnknown`. A write itself is not cancelled (on a hung server that would leave a
    connection mid-statement); it ends when the server answers or the connection fails.
    """

    def __init__(
        self,
        write: Callable[[list[Task], WriteAttempt], Awaitable[list[Outcome]]],
        *,
        max_flushes: int,
        max_rows: int = 256,
    ) -> None:
        self._write = write
        self._max_flushes = max_flushes
        self._max_rows = max_rows
        self._queue: list[_Waiter] = []
        self._flushing = 0
        self._flushes: set[asyncio.Future[None]] = set()

    async def insert(self, task: Task, timeout_s: float | None = None) -> Outcome:
        loop = asyncio.get_running_loop()
        waiter = _Waiter(task, loop.create_future(), None if timeout_s is None else loop.time() + timeout_s)
        self._queue.append(waiter)
        if self._flushing < self._max_flushes:
            self._flushing += 1
            flush = asyncio.ensure_future(self._flush())
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)
        try:
            async with asyncio.timeout_at(waiter.deadline):
                return await waiter.future
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # settled in the same instant the deadline passed
            if waiter.attempt is None:
                self._queue.remove(waiter)
                raise WriteAbandoned(f"no connection to write with within {timeout_s:g} s") from None
            if waiter.attempt.close():
                raise WriteAbandoned(f"the write was not sent within {timeout_s:g} s") from None
            raise WriteOutcomeUnknown(f"the write was sent and not confirmed within {timeout_s:g} s") from None

    async def _flush(self) -> None:
        group: list[_Waiter] = []
        try:
            while self._queue:
                group, self._queue = self._queue[: self._max_rows], self._queue[self._max_rows :]
                deadlines = [w.deadline for w in group if w.deadline is not None]
                attempt = WriteAttempt(min(deadlines) if deadlines else None)
                for waiter in group:
                    waiter.attempt = attempt
                try:
                    outcomes = await self._write([w.task for w in group], attempt)
                except Exception as error:  # handed to every waiter of the group
                    outcomes = [error] * len(group)
                for waiter, outcome in zip(group, outcomes, strict=True):
                    if not waiter.future.done():
                        waiter.future.set_result(outcome)
        except asyncio.CancelledError:  # the store is closing: nobody waits forever
            for waiter in group + self._queue:
                waiter.future.cancel()
            self._queue.clear()
            raise
        finally:
            self._flushing -= 1


def by_shard(layout: Layout, tasks: Sequence[Task]) -> list[tuple[ShardTables, list[Task]]]:
    """``tasks`` grouped by their shard, in shard order (concurrent writers lock in one order)."""
    groups: dict[int, list[Task]] = {}
    for task in tasks:
        groups.setdefault(shard_of_task_id(task.id), []).append(task)
    return [(layout.shards[shard], groups[shard]) for shard in sorted(groups)]


def unique_keys(tasks: Sequence[Task], taken: dict[tuple[str, str], int]) -> list[Task | int]:
    """Per task: itself, or the id already holding its ``(app_id, key)`` in ``taken`` or held by an
    earlier task of the same list (a key is unique per app; the first one claims it)."""
    claimed = dict(taken)
    outcomes: list[Task | int] = []
    for task in tasks:
        if task.key is not None:
            holder = claimed.setdefault((task.app_id, task.key), task.id)
            if holder != task.id:
                outcomes.append(holder)
                continue
        outcomes.append(task)  # the store keeps no reference: no copy needed (a batch is 1,000 of them)
    return outcomes
