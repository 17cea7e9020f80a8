"""Search across shards: an app's flows and tasks, merged from every shard in one order, paged by cursor.

:func:`merge_page` is a k-way merge over per-shard ordered reads (:meth:`TaskStore.search_flows`,
:meth:`TaskStore.search_tasks`; the orders are :mod:`tjobs.stores.queries`'). Each shard is read a few
rows at a time past the cursor. A shard whose read came back full may hold more, all of it after its
last row; once ``limit`` candidates are known, only the shards whose last row comes before the
``limit``-th candidate can still change the page, and only those are read again (twice as many rows
each round, at most ``limit``). So a page costs about ``limit`` rows plus a couple per shard, not
``limit`` per shard, and however the items are spread (one hot shard or all of them).

The cursor is the page's last item's position (:mod:`tjobs.service.cursors`); the next page reads
every shard strictly after it. Positions never change (a flow's ``(scheduled_at, task_id)``, a task's
id), so across pages no item comes twice, and every item that existed when the search started and
still matches is on one of them: items inserted meanwhile may or may not show. A task renamed while a
search by name pages through may show twice or not at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sharding import Topology, shard_for_key, shard_of_task_id
from tjobs.errors import InvalidInput
from tjobs.model import Flow, FlowStatus, Task
from tjobs.service.cursors import LIST_PAGE_MAX, Page, decode_position, encode_position
from tjobs.stores.base import TaskStore
from tjobs.stores.queries import (
    FlowPosition,
    FlowQuery,
    TaskPosition,
    TaskQuery,
    flow_position,
    flow_rank,
    task_position,
    task_rank,
)

FIRST_READ_SPREAD = 2  # the first read asks each shard for this many times its share of the page, +1
RETRYING = "retrying"  # a flow status filter of its own: pending flows attempted at least once
FLOW_CURSOR = "flows"
TASK_CURSOR = "tasks"
TASK_BY_NAME_CURSOR = "tasks-by-name"

Item = TypeVar("Item", Flow, Task)
Position = TypeVar("Position", FlowPosition, TaskPosition)


@dataclass(frozen=True, slots=True)
class Merged(Generic[Item]):
    """One page of a merge; ``more``: items may follow the last one."""

    items: list[Item]
    more: bool


async def merge_page(
    shards: list[int],
    read: Callable[[Mapping[int, Position | None], int], Awaitable[dict[int, list[Item]]]],
    rank: Callable[[Item], Any],
    position: Callable[[Item], Position],
    limit: int,
    after: Position | None,
) -> Merged[Item]:
    """The first ``limit`` items after ``after``, in ``rank`` order, over ``shards`` (see the module)."""
    if not shards:
        return Merged([], False)
    size = min(limit, max(1, -(-limit * FIRST_READ_SPREAD // len(shards))) + 1)
    reads: dict[int, Position | None] = dict.fromkeys(shards, after)
    candidates: list[Item] = []
    unread: dict[int, Item] = {}  # shard -> its last row read, while its last read came back full
    while reads:
        found = await read(reads, size)
        for shard, items in found.items():
            candidates += items
            if len(items) >= size:
                unread[shard] = items[-1]
            else:
                unread.pop(shard, None)
        candidates.sort(key=rank)
        bound = rank(candidates[limit - 1]) if len(candidates) >= limit else None
        reads = {shard: position(last) for shard, last in unread.items() if bound is None or rank(last) < bound}
        size = min(limit, size * 2)
    return Merged(candidates[:limit], len(candidates) > limit or bool(unread))


class SearchService:
    """``GET /v1/flows`` and ``GET /v1/tasks``: an app's flows and tasks across every shard."""

    def __init__(self, store: TaskStore, topology: Topology) -> None:
        self._store = store
        self._topology = topology
        self._all_shards = list(range(topology.shard_count))

    async def flows(
        self,
        app_id: str,
        *,
        status: str | None = None,
        task_id: int | None = None,
        from_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """The app's flows newest first (``scheduled_at`` descending), filtered by status (a flow
        status, or ``retrying``: pending after at least one attempt), task and ``[from_ms, until_ms)``."""
        _check_limit(limit)
        if from_ms is not None and until_ms is not None and until_ms <= from_ms:
            raise InvalidInput("to", "must be after from", "out_of_range")
        retrying = status == RETRYING
        query = FlowQuery(
            app_id,
            FlowStatus.PENDING if retrying else None if status is None else FlowStatus(status),
            retrying,
            task_id,
            from_ms,
            until_ms,
        )
        after: FlowPosition | None = None
        if cursor is not None:
            at, tid = decode_position(cursor, FLOW_CURSOR, (int, int))
            after = (int(at), int(tid))
        if task_id is None:
            shards = self._all_shards
        else:
            shards = [shard_of_task_id(task_id)] if self._routable(task_id) else []

        async def read(reads: Mapping[int, FlowPosition | None], size: int) -> dict[int, list[Flow]]:
            return await self._store.search_flows(query, reads, size)

        merged = await merge_page(shards, read, flow_rank, flow_position, limit, after)
        last = merged.items[-1] if merged.items and merged.more else None
        return Page(merged.items, None if last is None else encode_position(FLOW_CURSOR, flow_position(last)))

    async def tasks(self, query: TaskQuery, *, limit: int = 100, cursor: str | None = None) -> Page:
        """The app's tasks matching ``query``: newest first, or by name with a name prefix."""
        _check_limit(limit)
        kind = TASK_BY_NAME_CURSOR if query.by_name else TASK_CURSOR
        after: TaskPosition | None = None
        if cursor is not None:
            if query.by_name:
                name, tid = decode_position(cursor, kind, (str, int))
                after = (str(name), int(tid))
            else:
                (tid,) = decode_position(cursor, kind, (int,))
                after = ("", int(tid))
        shards = self._all_shards
        if query.key is not None:
            shards = [shard_for_key(query.app_id, query.key, self._topology.shard_count)]

        async def read(reads: Mapping[int, TaskPosition | None], size: int) -> dict[int, list[Task]]:
            return await self._store.search_tasks(query, reads, size)

        merged = await merge_page(shards, read, lambda task: task_rank(query, task), task_position, limit, after)
        last = merged.items[-1] if merged.items and merged.more else None
        if last is None:
            return Page(merged.items, None)
        position = task_position(last) if query.by_name else (last.id,)
        return Page(merged.items, encode_position(kind, position))

    def _routable(self, task_id: int) -> bool:
        return task_id > 0 and shard_of_task_id(task_id) < self._topology.shard_count


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= LIST_PAGE_MAX:
        raise InvalidInput("limit", f"must be within 1..{LIST_PAGE_MAX}")
