"""Shard topology and routing for tjobs, independent of the rest of the platform.

A topology is ``instances × databases_per_instance × tables_per_database`` shards (8 × 4 × 16 = 512 by
default). Every shard is one physical table pair (tasks + flows) inside one logical database; logical
databases live on database instances, and several instances may share one server (merged deployment).

- :mod:`sharding.topology` maps a shard number to its instance, logical database and table names.
- :mod:`sharding.ids` builds task ids that carry their shard, and maps idempotency keys to shards.

This package imports nothing from :mod:`tjobs`.
"""

from sharding.ids import TaskIdGenerator, shard_for_key, shard_of_task_id
from sharding.topology import ShardLocation, Topology

__all__ = ["ShardLocation", "TaskIdGenerator", "Topology", "shard_for_key", "shard_of_task_id"]
