"""The memory twin's hot change log (:class:`tjobs.stores.contracts.HotChangeLog`): the changes under their
ids in a dict, shared by every log one :class:`tjobs.stores.memory.MemoryTaskStore` hands out."""

from __future__ import annotations

from collections.abc import Sequence

from tjobs.errors import StorageUnavailable
from tjobs.stores.contracts.hot_changes import HotChange, HotChangeLog


class MemoryHotChanges:
    """What a twin's logs share. :meth:`truncate` empties it and restarts the ids (as ``TRUNCATE`` does
    on a server); while ``available`` is false every call of its logs raises ``StorageUnavailable``."""

    def __init__(self) -> None:
        self.rows: dict[int, HotChange] = {}
        self.next_id = 1
        self.available = True

    def truncate(self) -> None:
        self.rows.clear()
        self.next_id = 1

    def check(self) -> None:
        if not self.available:
            raise StorageUnavailable("the memory twin's hot change log is unavailable")


class MemoryHotChangeLog(HotChangeLog):
    def __init__(self, shared: MemoryHotChanges) -> None:
        self._shared = shared

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def append(self, changes: Sequence[HotChange]) -> None:
        shared = self._shared
        shared.check()
        for change in changes:
            shared.rows[shared.next_id] = change
            shared.next_id += 1

    async def highest_id(self) -> int:
        self._shared.check()
        return max(self._shared.rows, default=0)

    async def read_after(
        self, after_id: int, limit: int, *, skip_origin: str | None = None
    ) -> list[tuple[int, HotChange]]:
        self._shared.check()
        rows = self._shared.rows
        top = max(rows, default=0)
        after = [
            (row_id, change)
            for row_id, change in rows.items()
            if row_id > after_id and (change.origin != skip_origin or row_id == top)
        ]
        return sorted(after, key=lambda row: row[0])[:limit]

    async def last(self) -> tuple[int, HotChange] | None:
        self._shared.check()
        rows = self._shared.rows
        return (top := max(rows), rows[top]) if rows else None

    async def prune(self, created_before_ms: int) -> None:
        self._shared.check()
        rows = self._shared.rows
        for row_id in [row_id for row_id, change in rows.items() if change.created_at_ms < created_before_ms]:
            del rows[row_id]
