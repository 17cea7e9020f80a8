"""The SQL store's one error mapping: what a driver's or SQLAlchemy's error means to a caller.

Every call of :class:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore` that reaches a server (through the
engine or a raw asyncmy pool of :mod:`tjobs.stores.sql_direct`) passes its errors through
:func:`storage_error`: a server that cannot be reached, dropped the connection or timed out a lock wait
becomes :class:`tjobs.errors.StorageUnavailable` naming its URL without the password; a write the
shard-map fence refused (:mod:`tjobs.stores.shard_fence`) becomes :class:`tjobs.errors.StaleShardMap`;
a transaction MariaDB rolled back as a deadlock's victim (1213) becomes :class:`Deadlocked` (a 503 too, which a
caller whose whole transaction is in one block runs again: ``SqlBase._in_write``); the store's own errors and
anything else (a bad statement, a taken key) are raised as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tjobs.errors import StaleShardMap, StorageUnavailable, TjobsError
from tjobs.stores.shard_fence import is_fenced
from tjobs.stores.sql_layout import DEADLOCK_ERRNOS, is_unavailable, mysql_errno, safe_url, unavailable


class Deadlocked(StorageUnavailable):
    """MariaDB rolled the transaction back as a deadlock's victim: nothing of it was written, and the same
    transaction run again from its start commits once the other one ended."""

    def __init__(self, url: str) -> None:
        super().__init__(f"database {safe_url(url)} rolled the write back as a deadlock's victim; retry")


def storage_error(
    error: BaseException, url: str, fence: Callable[[], StaleShardMap] | None = None
) -> TjobsError | None:
    """The store's error for ``error`` raised on the server of ``url``, ``None`` to raise it as it is.
    ``fence`` builds the error of a write the fence refused; without it (reads, DDL) none is expected."""
    if isinstance(error, TjobsError):
        return None
    if is_unavailable(error):
        return unavailable(url, error)
    if mysql_errno(error) in DEADLOCK_ERRNOS:
        return Deadlocked(url)
    if fence is not None and is_fenced(error):
        return fence()
    return None


@contextmanager
def storage_errors(url: str, fence: Callable[[], StaleShardMap] | None = None) -> Iterator[None]:
    """Raise what :func:`storage_error` maps an error of the block to, chained to the original."""
    try:
        yield
    except Exception as error:
        mapped = storage_error(error, url, fence)
        if mapped is None:
            raise
        raise mapped from error
