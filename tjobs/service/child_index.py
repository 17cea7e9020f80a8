"""Indexing the children of tasks registered before migration 0024 (README "Child tasks", docs/operations.md
"Upgrades"): ``tjobs index-children`` walks every shard's tasks by primary key, a slice at a time, and
writes the reverse index's links of each task naming children (:meth:`SqlTaskParents.index_tasks`). A link
there already is kept, so the walk may be run again, or resumed from where it stopped (``--from-shard``,
``--after-id``: the position it prints after each slice); it reads each task once and never locks one (a
task edited meanwhile indexes its own children, as every edit does). Paced: at most ``tasks_per_s`` tasks
read a second, so the databases' other work is not starved."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class TaskIndexer(Protocol):
    """The SQL store's reverse index (:class:`tjobs.stores.sql.task_parents.SqlTaskParents`)."""

    async def index_tasks(self, shard: int, after_id: int, limit: int) -> tuple[int, int | None]: ...


@dataclass(frozen=True, slots=True)
class IndexPosition:
    """Where a walk is: the shard, the last task id read in it (0: none yet), the links written so far."""

    shard: int
    after_id: int
    links: int = 0


async def index_children(
    parents: TaskIndexer,
    shard_count: int,
    *,
    batch: int = 1000,
    tasks_per_s: float = 5000.0,
    start: IndexPosition = IndexPosition(0, 0),
    progress: Callable[[IndexPosition], None] | None = None,
) -> IndexPosition:
    """Index the children of every task from ``start`` on, ``batch`` tasks a read; ``progress`` is told the
    position after each slice. Returns the end (``shard == shard_count``)."""
    if not 1 <= batch <= 10_000:
        raise ValueError("batch must be 1..10000")
    if tasks_per_s <= 0:
        raise ValueError("tasks_per_s must be above 0")
    shard, after_id, links = start.shard, start.after_id, start.links
    while shard < shard_count:
        began = time.monotonic()
        linked, last_id = await parents.index_tasks(shard, after_id, batch)
        links += linked
        if last_id is None:
            shard, after_id = shard + 1, 0
        else:
            after_id = last_id
        position = IndexPosition(shard, after_id, links)
        if progress is not None:
            progress(position)
        if last_id is not None:  # a full slice: the pace's rest before the next one
            await asyncio.sleep(max(0.0, batch / tasks_per_s - (time.monotonic() - began)))
    return IndexPosition(shard, 0, links)
