"""Where a shard lives: instance, logical database and table names, all derived from the shard number."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True)
class ShardLocation:
    """The physical home of one shard.

    ``database_index`` is global (0 .. instances × databases_per_instance − 1) so that a database name
    is unique across the whole topology even when several instances share one server.
    """

    shard: int
    instance: int
    database_index: int
    table_index: int

    @property
    def database(self) -> str:
        return f"tjobs_{self.database_index:02d}"

    @property
    def tasks_table(self) -> str:
        return f"tasks_{self.table_index:02d}"

    @property
    def flows_table(self) -> str:
        return f"flows_{self.table_index:02d}"


@dataclass(frozen=True, slots=True)
class Topology:
    """``instances × databases_per_instance × tables_per_database`` shards, numbered densely from 0.

    Shard ``s`` lives in table ``s % tables_per_database`` of global logical database
    ``s // tables_per_database``, which lives on instance ``database_index // databases_per_instance``.
    Names are built only from these numbers, never from user input.
    """

    instances: int = 8
    databases_per_instance: int = 4
    tables_per_database: int = 16

    def __post_init__(self) -> None:
        for name in ("instances", "databases_per_instance", "tables_per_database"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.shard_count > MAX_SHARDS:
            raise ValueError(f"topology has {self.shard_count} shards; at most {MAX_SHARDS} are addressable")

    @property
    def shard_count(self) -> int:
        return self.instances * self.databases_per_instance * self.tables_per_database

    @property
    def database_count(self) -> int:
        return self.instances * self.databases_per_instance

    def _compute_location(self, shard: int) -> ShardLocation:
        database_index, table_index = divmod(shard, self.tables_per_database)
        return ShardLocation(
            shard=shard,
            instance=database_index // self.databases_per_instance,
            database_index=database_index,
            table_index=table_index,
        )

    def locate(self, shard: int) -> ShardLocation:
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} is outside 0..{self.shard_count - 1}")
        return _locations(self)[shard]

    def shards(self) -> range:
        return range(self.shard_count)

    def databases(self) -> list[tuple[int, str]]:
        """Every logical database as ``(instance, name)``, in database-index order."""
        return [(index // self.databases_per_instance, f"tjobs_{index:02d}") for index in range(self.database_count)]

    def shards_of_database(self, database_index: int) -> range:
        start = database_index * self.tables_per_database
        return range(start, start + self.tables_per_database)

    @classmethod
    def parse(cls, text: str) -> Topology:
        """Parse ``"8x4x16"`` (instances × databases per instance × tables per database)."""
        parts = text.lower().replace("×", "x").split("x")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"topology must look like '8x4x16', got {text!r}")
        instances, databases, tables = (int(p) for p in parts)
        return cls(instances, databases, tables)

    def __str__(self) -> str:
        return f"{self.instances}x{self.databases_per_instance}x{self.tables_per_database}"


MAX_SHARDS = 1 << 10


@lru_cache(maxsize=16)
def _locations(topology: Topology) -> tuple[ShardLocation, ...]:
    return tuple(topology._compute_location(shard) for shard in range(topology.shard_count))
