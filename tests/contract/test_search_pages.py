"""Search across shards, paged by cursor, while items are inserted: no item twice, none skipped.

The searches run on every store (memory, SQLite, MariaDB) through :class:`SearchService` (the k-way
merge); an inserter keeps adding items while the pages are read, newer, older and in between the
items that existed when the search started. Every one of those shows exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable

import pytest

from sharding import Topology
from tests.contract.backends import IDS, NOW_MS, TOPOLOGY, make_task
from tjobs.errors import Conflict
from tjobs.model import Flow, FlowKind, FlowStatus, Task
from tjobs.service.search import SearchService
from tjobs.stores.base import TaskStore
from tjobs.stores.queries import TaskQuery

pytestmark = pytest.mark.asyncio

SHARDS = Topology.parse(TOPOLOGY).shard_count


async def add_flow(store: TaskStore, task: Task, at_ms: int) -> Flow:
    flow = Flow(task.id, at_ms, task.app_id, FlowKind.MANUAL, FlowStatus.PENDING, 0, at_ms, at_ms, at_ms)
    return await store.insert_manual_flow(task.id, flow)


async def page_through(read: Callable[[str | None], Awaitable[tuple[list[str], str | None]]]) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        items, cursor = await read(cursor)
        seen += items
        if cursor is None:
            return seen
        await asyncio.sleep(0)  # let the inserter in between pages too


async def keep_inserting(insert: Callable[[int], Awaitable[None]], stop: asyncio.Event) -> int:
    count = 0
    while not stop.is_set():
        await insert(count)
        count += 1
        await asyncio.sleep(0)
    return count


@pytest.mark.parametrize("spread", ["every shard", "one hot shard"])
async def test_flow_pages_under_concurrent_inserts(store: TaskStore, spread: str) -> None:
    rng = random.Random(7)
    shards = range(SHARDS) if spread == "every shard" else [9]
    tasks = [make_task(app_id="app-s", shard=rng.choice(shards)) for _ in range(24)]
    for task in tasks:
        await store.insert_task(task)
    existing: list[Flow] = []
    for _ in range(150):  # instants repeat across tasks: (scheduled_at, task_id) breaks the ties
        task = rng.choice(tasks)
        at_ms = NOW_MS + rng.randrange(0, 600) * 1000
        if all((f.task_id, f.scheduled_at_ms) != (task.id, at_ms) for f in existing):
            existing.append(await add_flow(store, task, at_ms))
    search = SearchService(store, store.topology)

    async def insert(count: int) -> None:  # newer, older, and in between the existing ones
        at_ms = NOW_MS + rng.choice([-1, 0, 1]) * 700_000 + rng.randrange(0, 600_000) + count % 7
        with contextlib.suppress(Conflict):  # the same (task, instant) drawn twice: nothing inserted
            await add_flow(store, rng.choice(tasks), at_ms)

    async def read(cursor: str | None) -> tuple[list[str], str | None]:
        page = await search.flows("app-s", limit=7, cursor=cursor)
        return [f.id for f in page.items], page.next_cursor

    stop = asyncio.Event()
    inserter = asyncio.create_task(keep_inserting(insert, stop))
    try:
        seen = await page_through(read)
    finally:
        stop.set()
    inserted = await inserter

    assert len(seen) == len(set(seen)), "an item came twice"
    assert {f.id for f in existing} <= set(seen), "an item that existed before the search was skipped"
    order = [(int(at), int(task)) for task, at in (flow_id.split("-") for flow_id in seen)]
    assert order == sorted(order, reverse=True)
    assert inserted > 0


@pytest.mark.parametrize("by_name", [False, True])
async def test_task_pages_under_concurrent_inserts(store: TaskStore, by_name: bool) -> None:
    rng = random.Random(11)

    def task_at(minted_ms: int) -> Task:
        task = make_task(app_id="app-t", name=f"job-{rng.randrange(1000):03d}")
        task.id = IDS.mint(rng.randrange(SHARDS), minted_ms)  # ids in between the existing ones too
        return task

    existing = [task_at(NOW_MS - rng.randrange(3_600_000)) for _ in range(80)]
    for task in existing:
        await store.insert_task(task)
    await store.insert_task(make_task(app_id="app-t", name="other-1"))  # outside the prefix
    search = SearchService(store, store.topology)
    query = TaskQuery("app-t", name_prefix="job-" if by_name else None)

    async def insert(count: int) -> None:
        await store.insert_task(task_at(NOW_MS - rng.randrange(3_600_000) - count))

    async def read(cursor: str | None) -> tuple[list[str], str | None]:
        page = await search.tasks(query, limit=6, cursor=cursor)
        return [str(t.id) for t in page.items], page.next_cursor

    stop = asyncio.Event()
    inserter = asyncio.create_task(keep_inserting(insert, stop))
    try:
        seen = await page_through(read)
    finally:
        stop.set()
    await inserter

    assert len(seen) == len(set(seen)), "a task came twice"
    assert {str(t.id) for t in existing} <= set(seen), "a task that existed before the search was skipped"
    stored = {str(t.id): t for t in await all_tasks(store, "app-t")}
    if by_name:
        keys = [(stored[i].name, int(i)) for i in seen]
        assert keys == sorted(keys) and all(stored[i].name.startswith("job-") for i in seen)
    else:
        assert [int(i) for i in seen] == sorted((int(i) for i in seen), reverse=True)


async def all_tasks(store: TaskStore, app_id: str) -> list[Task]:
    found: list[Task] = []
    for shard in range(SHARDS):
        found += await store.list_tasks(app_id, shard, None, 10_000)
    return found


async def test_a_page_reads_about_its_share_per_shard_not_limit_per_shard(store: TaskStore) -> None:
    tasks = [make_task(app_id="app-r", shard=shard) for shard in range(SHARDS) for _ in range(3)]
    for task in tasks:
        await store.insert_task(task)
        for k in range(10):
            await add_flow(store, task, NOW_MS + k * 1000)
    asked: list[int] = []
    search_flows = store.search_flows

    async def counting(query, reads, limit):  # type: ignore[no-untyped-def]
        asked.append(len(reads) * limit)
        return await search_flows(query, reads, limit)

    store.search_flows = counting  # type: ignore[method-assign]
    page = await SearchService(store, store.topology).flows("app-r", limit=40)
    assert len(page.items) == 40 and page.next_cursor is not None
    assert sum(asked) < 40 * SHARDS // 2  # rows asked for, all rounds: far below limit x shards
