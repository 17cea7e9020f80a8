"""Hot changes: the append-only log of task changes that the DB-poll hot tier (:mod:`tjobs.hot_tier.dbpoll`)
writes and every node reads, in logical database 0 (which never moves).

The log is not the truth (invariant 7, docs/design.md): a change missing from it costs latency until
the next cycle load, never a fire. A store opens one :class:`HotChangeLog` per hot tier
(:meth:`HotChanges.hot_change_log`), on connections of its own: the poll never waits for the store's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from tjobs.stores.contracts.lifecycle import StoreLifecycle


@dataclass(frozen=True, slots=True)
class HotChange:
    """One change as logged: the task's new state (``next_run_at_ms`` ``None``: it must not fire), the
    process that published it (``origin``: its node's name and a token of that process, at most 128
    characters), and when (epoch ms)."""

    task_id: int
    app_id: str
    next_run_at_ms: int | None
    version: int
    origin: str
    created_at_ms: int


class HotChangeLog(ABC):
    """An append-only log of :class:`HotChange` s, each under an id.

    Ids grow with each append, but a reader cannot take them as a cursor alone: appends in flight at
    once may become visible out of id order (a lower id after a higher one was read), and a log emptied
    (by :meth:`prune`, or from outside) may hand out ids again from the start. Hence :meth:`last`, which
    lets a reader notice the restart.
    """

    @abstractmethod
    async def open(self) -> None:
        """Connect. Raise ``StorageNotMigrated`` (:mod:`tjobs.stores.schema_revision`), saying to run
        ``tjobs migrate``, if the storage has no log yet."""

    @abstractmethod
    async def close(self) -> None:
        """Release the connections; safe to call without :meth:`open`, or twice."""

    @abstractmethod
    async def append(self, changes: Sequence[HotChange]) -> None:
        """Log ``changes``, in order, all in one transaction: each gets an id above every id logged
        before this call began, or none is logged and the storage error is raised."""

    @abstractmethod
    async def highest_id(self) -> int:
        """The highest id logged (0 for an empty log)."""

    @abstractmethod
    async def read_after(
        self, after_id: int, limit: int, *, skip_origin: str | None = None
    ) -> list[tuple[int, HotChange]]:
        """Up to ``limit`` logged changes with an id above ``after_id``, by increasing id. With
        ``skip_origin``, the changes logged by that origin are left out in the read (a reader never
        parses its own rows) except the log's last change, which is in the answer whoever logged it
        (when above ``after_id`` and within ``limit``): the reader learns how far the log goes."""

    @abstractmethod
    async def last(self) -> tuple[int, HotChange] | None:
        """The change with the highest id, under its id (``None`` for an empty log)."""

    @abstractmethod
    async def prune(self, created_before_ms: int) -> None:
        """Delete the changes logged before ``created_before_ms`` (their ``created_at_ms``)."""


class HotChanges(StoreLifecycle):
    """Where the DB-poll hot tier logs and reads task changes."""

    @abstractmethod
    def hot_change_log(self) -> HotChangeLog:
        """A log over this store's storage, not yet open; the caller opens and closes it. Every log a
        store (and every store over the same storage) hands out reads what the others append."""
