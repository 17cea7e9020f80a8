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

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sharding import Topology, shard_for_key, shard_of_task_id
from tjobs.errors import InvalidInput
from tjobs.model import Flow, FlowStatus, Task
from tjobs.service.cursors import LIST_PAGE_MAX, Page, decode_position, encode_position
from tjobs.service.flow_filters import RETRYING, FlowFilters
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
MAX_NAMED_TASKS = 100  # a task name prefix naming at most this many tasks reads their flows by task id
FLOW_CURSOR = "flows"
TASK_CURSOR = "tasks"
TASK_BY_NAME_CURSOR = "tasks-by-name"

NO_FILTERS = FlowFilters()

Item = TypeVar("Item", Flow, Task)
Position = TypeVar("Position", FlowPosition, TaskPosition)


@dataclass(frozen=True, slots=True)
class FlowSearch:
    """Filters resolved for the store: the query and the shards it reads."""

    query: FlowQuery
    shards: list[int]


@dataclass(frozen=True, slots=True)
class FlowCount:
    """A bounded count: ``matched`` flows, or with ``more``, more than ``matched``."""

    matched: int
    more: bool


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
        filters: FlowFilters = NO_FILTERS,
        *,
        limit: int = 100,
        cursor: str | None = None,
        changed_before_ms: int | None = None,
    ) -> Page:
        """The app's flows newest first (``scheduled_at`` descending) that match ``filters``
        (:mod:`tjobs.service.flow_filters`) and, when given, last changed before ``changed_before_ms``."""
        _check_limit(limit)
        after: FlowPosition | None = None
        if cursor is not None:
            at, tid = decode_position(cursor, FLOW_CURSOR, (int, int))
            after = (int(at), int(tid))
        merged = await self.flows_after(app_id, filters, after, limit, changed_before_ms)
        last = merged.items[-1] if merged.items and merged.more else None
        return Page(merged.items, None if last is None else encode_position(FLOW_CURSOR, flow_position(last)))

    async def flows_after(
        self,
        app_id: str,
        filters: FlowFilters,
        after: FlowPosition | None,
        limit: int,
        changed_before_ms: int | None = None,
    ) -> Merged[Flow]:
        """:meth:`flows` from a position."""
        return await self.read_flows(await self.flow_query(app_id, filters, changed_before_ms), after, limit)

    async def read_flows(self, search: FlowSearch, after: FlowPosition | None, limit: int) -> Merged[Flow]:
        """The first ``limit`` flows of a resolved search after ``after`` (an export or a job resolves
        its filters once, then walks)."""

        async def read(reads: Mapping[int, FlowPosition | None], size: int) -> dict[int, list[Flow]]:
            return await self._store.search_flows(search.query, reads, size)

        return await merge_page(search.shards, read, flow_rank, flow_position, limit, after)

    async def count_flows(
        self, app_id: str, filters: FlowFilters, at_most: int, changed_before_ms: int | None = None
    ) -> FlowCount:
        """How many of the app's flows match, counted up to ``at_most`` (past it: ``more``). Each shard
        first counts up to about twice its share of ``at_most``; only shards that reached their cap
        count again, up to what could still take the total past ``at_most``: a count reads at most a
        few times ``at_most`` rows, however the flows are spread."""
        search = await self.flow_query(app_id, filters, changed_before_ms)
        query, shards = search.query, search.shards
        if not shards:
            return FlowCount(0, False)
        share = -(-at_most * FIRST_READ_SPREAD // len(shards)) + 1
        caps = dict.fromkeys(shards, min(share, at_most + 1))
        counted: dict[int, int] = {}
        while caps:
            found = await self._store.count_flows(query, caps)
            counted.update(found)
            total = sum(counted.values())
            if total > at_most:
                return FlowCount(at_most, True)
            room = at_most + 1 - total
            caps = {shard: found[shard] + room for shard, cap in caps.items() if found[shard] >= cap}
        return FlowCount(sum(counted.values()), False)

    async def flow_query(self, app_id: str, filters: FlowFilters, changed_before_ms: int | None = None) -> FlowSearch:
        """The store's query for ``filters`` and the shards it reads. A task name prefix that names at
        most :data:`MAX_NAMED_TASKS` tasks becomes their ids (read by primary key in their shards
        only); past that, each shard checks the name of each flow's task."""
        status = filters.status
        retrying = status == RETRYING
        task_ids: tuple[int, ...] | None = None
        name_prefix = filters.task_name_prefix
        if name_prefix is not None:
            named = await self.tasks(TaskQuery(app_id, name_prefix=name_prefix), limit=MAX_NAMED_TASKS + 1)
            if len(named.items) <= MAX_NAMED_TASKS:
                task_ids, name_prefix = tuple(task.id for task in named.items), None
        query = FlowQuery(
            app_id,
            FlowStatus.PENDING if retrying else None if status is None else FlowStatus(status),
            retrying,
            filters.task_id,
            filters.from_ms,
            filters.until_ms,
            task_ids,
            name_prefix,
            filters.target,
            filters.answer,
            changed_before_ms,
        )
        candidates = task_ids if filters.task_id is None else (filters.task_id,)
        if candidates is None:
            return FlowSearch(query, self._all_shards)
        return FlowSearch(query, sorted({shard_of_task_id(t) for t in candidates if self._routable(t)}))

    async def task_names(self, task_ids: Collection[int]) -> dict[int, str]:
        """The names of the tasks that still exist among ``task_ids`` (a page's, an export's)."""
        return await self._store.task_names(task_ids)

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
