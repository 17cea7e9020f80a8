"""The API's single-row hot paths on MariaDB, on a raw asyncmy pool beside SQLAlchemy's engine.

A single create (``INSERT`` of one task) and a get by id (``SELECT`` by primary key) are one statement
each. Through SQLAlchemy Core each paid for the greenlet bridge, statement compilation/caching, pool
checkout and checkin and, for reads, a ``ROLLBACK`` round trip closing the implicit transaction: about
half of a node's CPU per create in the profile. Here they run on connections in autocommit mode, so
the statement is its own transaction: an ``INSERT`` that returns has been committed (durably, per the
server's ``innodb_flush_log_at_trx_commit``), exactly like SQLAlchemy's ``begin()``/``commit()`` pair,
and a read needs no transaction to close. ``READ COMMITTED`` as on the engine.

Only identifiers derived from the topology are put into the SQL text; every value is a bound
parameter. A server URL with options this module does not translate (anything but ``charset`` and
``unix_socket``) gets no direct pool, and the store keeps using SQLAlchemy for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncmy
from asyncmy.constants import CLIENT
from sqlalchemy.engine import make_url

from tjobs.model import Task
from tjobs.settings import StorageSettings
from tjobs.stores.schema import TASK_COLUMNS, dumps, task_from_row
from tjobs.stores.sql_layout import ShardTables

_TASK_COLUMN_LIST = ", ".join(TASK_COLUMNS)
_TASK_MARKS = ", ".join(["%s"] * len(TASK_COLUMNS))
_TRANSLATED_QUERY = frozenset({"charset", "unix_socket"})


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
        "client_flag": CLIENT.FOUND_ROWS,
        "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    }
    if "unix_socket" in url.query:
        kwargs["unix_socket"] = str(url.query["unix_socket"])
    return kwargs


def task_values(task: Task) -> tuple[Any, ...]:
    """The row of :func:`tjobs.stores.schema.task_to_row`, in :data:`TASK_COLUMNS` order."""
    return (
        task.id, task.app_id, task.name, task.key, task.status.value, task.next_run_at_ms, task.version,
        task.fire_count, dumps(task.schedule), dumps(task.callback), dumps(task.payload),
        task.misfire_policy.value, task.delivery.value, task.created_at_ms, task.updated_at_ms,
    )


def _task_of(row: tuple[Any, ...] | None) -> Task | None:
    return None if row is None else task_from_row(dict(zip(TASK_COLUMNS, row, strict=True)))


class DirectPool:
    """A small autocommit asyncmy pool for one MariaDB server (opened on first use)."""

    def __init__(self, kwargs: dict[str, Any], size: int) -> None:
        self._kwargs = kwargs
        self._size = size
        self._pool: Any = None
        self._opening = asyncio.Lock()

    @asynccontextmanager
    async def cursor(self) -> AsyncIterator[Any]:
        pool = self._pool or await self._open()
        async with pool.acquire() as conn, conn.cursor() as cursor:
            yield cursor

    async def _open(self) -> Any:
        async with self._opening:
            if self._pool is None:
                self._pool = await asyncmy.create_pool(minsize=0, maxsize=self._size, pool_recycle=3600,
                                                       **self._kwargs)
        return self._pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
            await pool.wait_closed()

    # ---- statements ---------------------------------------------------------------------------------

    async def insert_task(self, home: ShardTables, task: Task) -> None:
        """One autocommit ``INSERT``: committed when it returns; asyncmy's ``IntegrityError`` on a
        taken id or key (nothing written)."""
        async with self.cursor() as cursor:
            await cursor.execute(
                f"INSERT INTO {home.tasks_sql} ({_TASK_COLUMN_LIST}) VALUES ({_TASK_MARKS})", task_values(task)
            )

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
