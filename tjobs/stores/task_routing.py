"""Where a new task is stored: the shard its id names, which its idempotency key, if it has one, must
hash to as well (so the key's uniqueness is one shard's index). The one rule every store checks before
an insert (pure)."""

from __future__ import annotations

from sharding import Topology, shard_for_key
from tjobs.model import Task


def check_task_shard(task: Task, shard: int | None, topology: Topology) -> int:
    """``shard``, the shard of ``topology`` that ``task``'s id names (``None``: none), once checked;
    ``ValueError`` if there is none or the task's key hashes to another."""
    if shard is None:
        raise ValueError(f"task id {task.id} names no shard of topology {topology}")
    if task.key is not None:
        key_shard = shard_for_key(task.app_id, task.key, topology.shard_count)
        if key_shard != shard:
            raise ValueError(f"task {task.id} has key {task.key!r} of shard {key_shard}, not {shard}")
    return shard
