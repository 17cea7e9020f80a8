"""The shard map: which database server holds each logical database, under an epoch (pure data).

The configured server list only *seeds* the map (instance ``i`` of the topology on server
``i % len(servers)``, as the layout always placed it); from then on the map is the truth: it lives in
the coordination store (:meth:`tjobs.cluster.base.Coordinator.seed_shard_map`), every node routes by
it, and each move of a logical database publishes a new map under the next epoch.

Servers are named, never addressed: a name is ``host:port`` (MariaDB) or a directory (SQLite), the
name :func:`tjobs.stores.sql_layout.server_name` gives, so the map carries no credential. Each node
finds the URL of a named server in its own ``storage.urls``.

Logical database 0 holds the apps, the layout record and the embedded mode's copy of the map; it stays
on the first server (:data:`PINNED_DATABASE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sharding.topology import Topology

PINNED_DATABASE = 0
"""The logical database that never moves: it holds the apps and, in the embedded mode, the map."""


class ShardMapError(ValueError):
    """A map that cannot be: a database on an unknown server, an empty server list, a bad document."""


@dataclass(frozen=True, slots=True)
class ShardMap:
    """``placement[d]`` is the name of the server holding logical database ``d``; ``servers`` lists
    every server the deployment knows, in the configured order (the first holds database 0)."""

    epoch: int
    servers: tuple[str, ...]
    placement: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.epoch < 1:
            raise ShardMapError(f"a shard map's epoch starts at 1, got {self.epoch}")
        if not self.servers or len(set(self.servers)) != len(self.servers):
            raise ShardMapError(f"a shard map needs distinct servers, got {list(self.servers)}")
        unknown = sorted(set(self.placement) - set(self.servers))
        if unknown:
            raise ShardMapError(f"the shard map places databases on unknown servers {unknown}")
        if self.placement and self.placement[PINNED_DATABASE] != self.servers[0]:
            raise ShardMapError(
                f"logical database {PINNED_DATABASE} must stay on the first server {self.servers[0]}, "
                f"not {self.placement[PINNED_DATABASE]}"
            )

    @classmethod
    def seed(cls, placed_servers: Sequence[str], topology: Topology) -> ShardMap:
        """Epoch 1 from the configured list: instance ``i`` on ``placed_servers[i % len]``.
        ``placed_servers`` is one name per configured URL (a name may repeat)."""
        if not placed_servers:
            raise ShardMapError("no servers to seed the shard map from")
        servers = tuple(dict.fromkeys(placed_servers))
        placement = tuple(
            placed_servers[(index // topology.databases_per_instance) % len(placed_servers)]
            for index in range(topology.database_count)
        )
        return cls(1, servers, placement)

    def server_of(self, database_index: int) -> str:
        return self.placement[database_index]

    def databases_on(self, server: str) -> list[int]:
        return [index for index, name in enumerate(self.placement) if name == server]

    def moved(self, database_index: int, server: str) -> ShardMap:
        """The next epoch's map, with ``database_index`` on ``server`` (added to ``servers`` if new)."""
        if database_index == PINNED_DATABASE:
            raise ShardMapError(f"logical database {PINNED_DATABASE} holds the apps and does not move")
        if not 0 <= database_index < len(self.placement):
            raise ShardMapError(f"no logical database {database_index} (0..{len(self.placement) - 1})")
        servers = self.servers if server in self.servers else (*self.servers, server)
        placement = tuple(server if index == database_index else name for index, name in enumerate(self.placement))
        return ShardMap(self.epoch + 1, servers, placement)

    def with_servers(self, servers: Sequence[str]) -> ShardMap:
        """The next epoch's map knowing exactly ``servers`` (a re-seed): placements are kept, so every
        server holding a database must still be listed, and the first server must stay first."""
        listed = tuple(dict.fromkeys(servers))
        dropped = sorted({name for name in self.placement if name not in listed})
        if dropped:
            holding = "; ".join(f"{name} holds {_names(self.databases_on(name))}" for name in dropped)
            raise ShardMapError(f"cannot re-seed without servers that hold databases: {holding}")
        return ShardMap(self.epoch + 1, listed, self.placement)

    def differences(self, configured: Sequence[str]) -> list[str]:
        """How the configured server names (``storage.urls``, in order) differ from this map's, each
        difference in words; empty when they agree."""
        listed = list(dict.fromkeys(configured))
        problems: list[str] = []
        for name in listed:
            if name not in self.servers:
                problems.append(f"storage.urls lists {name}, which the shard map does not know")
        for name in self.servers:
            if name not in listed:
                held = self.databases_on(name)
                holding = f" (it holds {_names(held)})" if held else ""
                problems.append(f"storage.urls lacks {name}, a server of the shard map{holding}")
        if not problems and listed != list(self.servers):
            problems.append(
                f"storage.urls lists the servers in the order {listed}, the shard map in the order {list(self.servers)}"
            )
        return problems

    def to_json(self) -> dict[str, Any]:
        index = {name: position for position, name in enumerate(self.servers)}
        return {"epoch": self.epoch, "servers": list(self.servers), "placement": [index[n] for n in self.placement]}

    @classmethod
    def from_json(cls, document: Any) -> ShardMap:
        try:
            servers = tuple(str(name) for name in document["servers"])
            placement = tuple(servers[int(position)] for position in document["placement"])
            return cls(int(document["epoch"]), servers, placement)
        except (KeyError, TypeError, IndexError, ValueError) as error:
            if isinstance(error, ShardMapError):
                raise
            raise ShardMapError(f"not a shard map document: {error!r}") from error


def _names(database_indexes: Sequence[int]) -> str:
    return "logical databases " + ", ".join(str(index) for index in database_indexes)
