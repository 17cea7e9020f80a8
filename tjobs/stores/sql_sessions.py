"""Which MariaDB sessions of this node can hold task row locks, and ending another node's.

A node frozen in the middle of a fire transaction (SIGSTOP, a long pause) keeps its connection, its
open transaction and the transaction's row locks on the server for as long as it stays frozen: the
server sees an idle client, not a dead one. Its successor must not wait for it. So every node
records the ``CONNECTION_ID()`` of each connection its engines open (:class:`SessionRegistry`, fed
by the pool's connect and close events) and its fire pools open (where the fire transaction runs on
MariaDB: :meth:`SessionRegistry.track`), publishes them (the etcd coordinator keeps them under
``sessions/<node id>``), and a node taking over jobs ends the sessions of nodes whose lease is gone
with ``KILL CONNECTION`` (:func:`kill_connections`): the server rolls their transactions back, the
locks go at once, and the frozen node, when it wakes, finds its connection dead and commits nothing.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Collection
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from tjobs.stores.base import ServerSessions

logger = logging.getLogger(__name__)

UNKNOWN_THREAD_ERRNO = 1094  # KILL of an id that is not (or no longer) a session
BOOT_TOLERANCE_S = 2  # the start time is derived from whole seconds of uptime and of the clock
BOOTED_AT_SQL = (
    "SELECT UNIX_TIMESTAMP() - VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'"
)


class SessionRegistry:
    """The server-side ids of the open connections of one engine's pool."""

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._raw: dict[int, weakref.ref[Any]] = {}  # the fire pool's sessions (track): id -> connection
        self.booted_at_s: int | None = None  # the server's start, read by the latest connection

    def attach(self, engine: AsyncEngine) -> None:
        sync_engine = engine.sync_engine
        event.listen(sync_engine, "connect", self._opened)
        event.listen(sync_engine, "close", self._closed)
        event.listen(sync_engine, "close_detached", self._closed_detached)
        event.listen(sync_engine, "invalidate", self._invalidated)

    def ids(self) -> list[int]:
        for thread_id, ref in list(self._raw.items()):
            conn = ref()
            if conn is None or not conn.connected:
                del self._raw[thread_id]
        return sorted(self._ids | self._raw.keys())

    async def track(self, conn: Any) -> None:
        """Record the session of a raw asyncmy connection opened outside the engine (a server's fire
        pool, :meth:`tjobs.stores.sql_direct.DirectPool.transaction`); it counts while it is open."""
        async with conn.cursor() as cursor:
            await cursor.execute(BOOTED_AT_SQL)
            row = await cursor.fetchone()
        self._booted(int(row[0]))
        self._raw[int(conn.thread_id())] = weakref.ref(conn)

    def _booted(self, booted_at_s: int) -> None:
        if self.booted_at_s is None or abs(booted_at_s - self.booted_at_s) > BOOT_TOLERANCE_S:
            self._ids.clear()  # the server restarted: the ids of its previous run mean nothing now
            self._raw.clear()
            self.booted_at_s = booted_at_s

    @staticmethod
    def _thread_id(dbapi_connection: Any) -> int | None:
        driver = getattr(dbapi_connection, "driver_connection", None) or getattr(dbapi_connection, "_connection", None)
        thread_id = getattr(driver, "thread_id", None)
        return int(thread_id()) if callable(thread_id) else None

    def _opened(self, dbapi_connection: Any, _record: Any) -> None:
        thread_id = self._thread_id(dbapi_connection)
        if thread_id is None:
            return
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(BOOTED_AT_SQL)
            row = cursor.fetchone()
        finally:
            cursor.close()
        self._booted(int(row[0]))
        self._ids.add(thread_id)

    def _closed(self, dbapi_connection: Any, _record: Any) -> None:
        thread_id = self._thread_id(dbapi_connection)
        if thread_id is not None:
            self._ids.discard(thread_id)

    def _closed_detached(self, dbapi_connection: Any) -> None:
        self._closed(dbapi_connection, None)

    def _invalidated(self, dbapi_connection: Any, _record: Any, _error: Any) -> None:
        self._closed(dbapi_connection, None)


async def kill_connections(cursor: Any, sessions: ServerSessions, keep: Collection[int] = ()) -> int:
    """``KILL CONNECTION`` each recorded id but ``keep`` on the cursor's server (an autocommit cursor
    of the same user, who may end its own sessions without extra privileges); ids no longer open are
    skipped, and nothing is killed when the server started at another time than recorded."""
    await cursor.execute(BOOTED_AT_SQL)
    row = await cursor.fetchone()
    if row is None or abs(int(row[0]) - sessions.booted_at_s) > BOOT_TOLERANCE_S:
        logger.info(
            "recorded sessions are from an earlier run of the server; none ended",
            extra={"action": "db_sessions_outdated"},
        )
        return 0
    ended = 0
    for session_id in sessions.ids:
        if session_id in keep:
            continue
        try:
            await cursor.execute("KILL CONNECTION %s", (int(session_id),))
        except Exception as error:
            args = getattr(error, "args", ())
            if args and args[0] == UNKNOWN_THREAD_ERRNO:
                continue
            raise
        ended += 1
    return ended
