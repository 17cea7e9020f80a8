"""Which MariaDB sessions of this node can hold task row locks, and ending another node's.

A node frozen in the middle of a fire transaction (SIGSTOP, a long pause) keeps its connection, its
open transaction and the transaction's row locks on the server for as long as it stays frozen: the
server sees an idle client, not a dead one. Its successor must not wait for it. So every node
records the ``CONNECTION_ID()`` of each connection its engines open (:class:`SessionRegistry`, fed
by the pool's connect and close events), publishes them (the etcd coordinator keeps them under
``sessions/<node id>``), and a node taking over jobs ends the sessions of nodes whose lease is gone
with ``KILL CONNECTION`` (:func:`kill_connections`): the server rolls their transactions back, the
locks go at once, and the frozen node, when it wakes, finds its connection dead and commits nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

logger = logging.getLogger(__name__)

UNKNOWN_THREAD_ERRNO = 1094  # KILL of an id that is not (or no longer) a session


class SessionRegistry:
    """The server-side ids of the open connections of one engine's pool."""

    def __init__(self) -> None:
        self._ids: set[int] = set()

    def attach(self, engine: AsyncEngine) -> None:
        sync_engine = engine.sync_engine
        event.listen(sync_engine, "connect", self._opened)
        event.listen(sync_engine, "close", self._closed)
        event.listen(sync_engine, "close_detached", self._closed_detached)
        event.listen(sync_engine, "invalidate", self._invalidated)

    def ids(self) -> list[int]:
        return sorted(self._ids)

    @staticmethod
    def _thread_id(dbapi_connection: Any) -> int | None:
        driver = getattr(dbapi_connection, "driver_connection", None) or getattr(
            dbapi_connection, "_connection", None
        )
        thread_id = getattr(driver, "thread_id", None)
        return int(thread_id()) if callable(thread_id) else None

    def _opened(self, dbapi_connection: Any, _record: Any) -> None:
        thread_id = self._thread_id(dbapi_connection)
        if thread_id is not None:
            self._ids.add(thread_id)

    def _closed(self, dbapi_connection: Any, _record: Any) -> None:
        thread_id = self._thread_id(dbapi_connection)
        if thread_id is not None:
            self._ids.discard(thread_id)

    def _closed_detached(self, dbapi_connection: Any) -> None:
        self._closed(dbapi_connection, None)

    def _invalidated(self, dbapi_connection: Any, _record: Any, _error: Any) -> None:
        self._closed(dbapi_connection, None)


async def kill_connections(cursor: Any, session_ids: Sequence[int]) -> int:
    """``KILL CONNECTION`` each id on the cursor's server (an autocommit cursor of the same user, who
    may end its own sessions without extra privileges); ids no longer open are skipped."""
    ended = 0
    for session_id in session_ids:
        try:
            await cursor.execute("KILL CONNECTION %s", (int(session_id),))
        except Exception as error:
            args = getattr(error, "args", ())
            if args and args[0] == UNKNOWN_THREAD_ERRNO:
                continue
            raise
        ended += 1
    return ended
