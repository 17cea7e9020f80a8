"""Cycle load time while the stored table grows and the due slice stays fixed.

The cycle load reads, per shard, the active tasks due before the horizon through the
``(status, next_run_at)`` index, so its cost should follow the due slice, not the table size. This
benchmark stores ``due`` tasks inside the next cycle plus a growing number of tasks far in the future,
and times a full load of every shard (the runner's loop: pages of ``page_size`` per shard, a bounded
number of shards at once) at each size.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from sharding import TaskIdGenerator
from tjobs.model import DeliveryMode, MisfirePolicy, Task, TaskStatus
from tjobs.specs import AtSpec, CallbackSpec
from tjobs.stores.base import TaskStore

DAY_MS = 86_400_000
INSERT_BATCH = 5_000


def _task(ids: TaskIdGenerator, shard: int, index: int, next_run_at_ms: int, now_ms: int) -> Task:
    return Task(
        # One id millisecond per task: ids minted in the same millisecond for one shard may collide
        # (12 random bits), which the API answers by minting again; a bulk fill has no such retry.
        id=ids.mint(shard, now_ms - index),
        app_id="bench",
        name=f"load-{index}",
        key=None,
        schedule=AtSpec(next_run_at_ms),
        callback=CallbackSpec(("http://127.0.0.1:9/cb",)),
        payload=None,
        misfire_policy=MisfirePolicy.FIRE_NOW,
        delivery=DeliveryMode.AT_LEAST_ONCE,
        status=TaskStatus.ACTIVE,
        next_run_at_ms=next_run_at_ms,
        version=1,
        fire_count=0,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
    )


async def _fill(store: TaskStore, count: int, first_index: int, instant: Callable[[int], int], now_ms: int) -> None:
    ids = TaskIdGenerator(store.topology.shard_count)
    shard_count = store.topology.shard_count
    for start in range(0, count, INSERT_BATCH):
        batch = [
            _task(ids, (first_index + i) % shard_count, first_index + i, instant(first_index + i), now_ms)
            for i in range(start, min(start + INSERT_BATCH, count))
        ]
        await store.insert_tasks(batch)


async def time_full_load(store: TaskStore, before_ms: int, page_size: int, concurrency: int) -> tuple[float, int]:
    slots = asyncio.Semaphore(concurrency)

    async def load(shard: int) -> int:
        loaded = 0
        after: tuple[int, int] | None = None
        async with slots:
            while True:
                page = await store.load_due(shard, before_ms, page_size, after)
                loaded += len(page)
                if len(page) < page_size:
                    return loaded
                after = (page[-1].next_run_at_ms, page[-1].task_id)

    started = time.perf_counter()
    counts = await asyncio.gather(*(load(s) for s in store.topology.shards()))
    return time.perf_counter() - started, sum(counts)


async def measure(
    store: TaskStore,
    sizes: Sequence[int],
    due: int,
    now_ms: int,
    cycle_ms: int = 300_000,
    page_size: int = 5_000,
    concurrency: int = 8,
    repeats: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Grow the store through ``sizes`` (total rows) with a fixed due slice; time loads at each size."""
    horizon_ms = now_ms + cycle_ms
    await _fill(store, due, 0, lambda i: now_ms + (i * cycle_ms) // max(due, 1), now_ms)
    stored = due
    results = []
    for size in sizes:
        if size > stored:
            if progress:
                progress(f"filling to {size:,} rows")
            await _fill(store, size - stored, stored, lambda i: now_ms + 2 * DAY_MS + i, now_ms)
            stored = size
        timings = []
        loaded = 0
        for _ in range(repeats):
            seconds, loaded = await time_full_load(store, horizon_ms, page_size, concurrency)
            timings.append(seconds)
        best = min(timings)
        results.append(
            {"stored": stored, "due": loaded, "load_s": round(best, 4), "load_s_all": [round(t, 4) for t in timings]}
        )
        if progress:
            progress(f"{stored:,} stored: loaded {loaded:,} due in {best * 1000:.0f} ms")
    return results
