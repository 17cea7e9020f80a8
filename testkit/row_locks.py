"""Holding row locks on purpose (the fault suite's and the soak's row-lock fault): taking them again after a
deadlock or a lock-wait timeout, which a holder scanning many tables beside live fire transactions meets.

The holder locks every task row of one app table by table (``SELECT … FOR UPDATE``), while the nodes' fire
transactions lock the same rows one batch at a time in their own order. InnoDB then may pick the holder as a
deadlock's victim (1213) or time its wait out (1205): either rolls back everything it held, so it begins
again, until ``give_up_s`` has passed (then the error is raised). Its own waits are bounded by
``lock_wait_s`` so that one long wait cannot take all of that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

DEADLOCK = 1213
LOCK_WAIT_TIMEOUT = 1205


class Cursor(Protocol):
    def execute(self, query: str, args: Any = None) -> int: ...


class Connection(Protocol):
    def cursor(self) -> Any: ...

    def rollback(self) -> None: ...


def lock_rows(
    connection: Connection,
    statements: Sequence[tuple[str, tuple[Any, ...]]],
    give_up_s: float = 25.0,
    lock_wait_s: int = 5,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run ``statements`` (each a ``SELECT … FOR UPDATE`` and its parameters) in one transaction of
    ``connection`` (autocommit off) and answer how many rows they locked, the locks still held; a pass that a
    deadlock or a lock-wait timeout ends is rolled back and made again until ``give_up_s`` has passed."""
    deadline = clock() + give_up_s
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION innodb_lock_wait_timeout = %s", (lock_wait_s,))
        while True:
            try:
                cursor.execute("BEGIN")
                return sum(cursor.execute(query, args) for query, args in statements)
            except Exception as error:  # pymysql's OperationalError; its code is args[0]
                code = error.args[0] if error.args else None
                if code not in (DEADLOCK, LOCK_WAIT_TIMEOUT) or clock() >= deadline:
                    raise
                connection.rollback()
