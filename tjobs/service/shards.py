"""The shard map as the operator sees it: where each logical database is and how many rows it holds
(``tjobs shards status``, ``GET /v1/shards``), and the moves that would spread the databases evenly
over a server list (``tjobs shards plan`` / ``rebalance``, ``POST /v1/shards:plan``;
:func:`sharding.rebalance.plan_rebalance`). Both read the stored map from the coordinator, the truth
every node routes by; nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sharding.rebalance import Move, plan_rebalance
from sharding.shard_map import ShardMap, ShardMapError
from tjobs.cluster.base import Coordinator
from tjobs.errors import InvalidInput, NotFound, known_object
from tjobs.service.shard_moves import Outcome, select_moves
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts import MoveRow

MAX_SERVER_NAME_CHARS = 255


@dataclass(frozen=True, slots=True)
class DatabaseRows:
    """One logical database: its server and how many tasks and flows it holds."""

    database: int
    server: str
    tasks: int
    flows: int


@dataclass(frozen=True, slots=True)
class ShardStatus:
    shard_map: ShardMap
    databases: list[DatabaseRows]

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.shard_map.epoch,
            "servers": [
                {"server": server, "databases": self.shard_map.databases_on(server)}
                for server in self.shard_map.servers
            ],
            "databases": [
                {"database": row.database, "server": row.server, "tasks": row.tasks, "flows": row.flows}
                for row in self.databases
            ],
        }


async def stored_map(coordinator: Coordinator) -> ShardMap:
    shard_map = await coordinator.read_shard_map()
    if shard_map is None:
        raise NotFound("shard map", "of this deployment (the first node or tjobs migrate seeds it)")
    return shard_map


async def shard_status(coordinator: Coordinator, store: TaskStore) -> ShardStatus:
    """The stored map and the rows of each logical database, counted one database at a time (a
    count is a scan of the database's primary keys: this is an operator's read, not a hot one)."""
    shard_map = await stored_map(coordinator)
    rows: list[DatabaseRows] = []
    for database, server in enumerate(shard_map.placement):
        counts = await store.count_rows(database)
        rows.append(DatabaseRows(database, server, counts["tasks"], counts["flows"]))
    return ShardStatus(shard_map, rows)


class ShardService:
    """The shard map and the moves as the admin API and the console read them (one per node: ``Node.shards``)."""

    def __init__(self, coordinator: Coordinator, store: TaskStore) -> None:
        self._coordinator = coordinator
        self._store = store

    async def status(self) -> ShardStatus:
        """:func:`shard_status`: the stored map and the rows of each logical database."""
        return await shard_status(self._coordinator, self._store)

    async def moves(self, outcome: Outcome | None = None, database: int | None = None) -> list[MoveRow]:
        """The recorded moves with that outcome and of that logical database (``None``: any)."""
        return select_moves(await self._store.read_shard_moves(), outcome, database)

    def shards_of_database(self, database: int) -> int:
        """How many shards logical database ``database`` holds."""
        return len(self._store.topology.shards_of_database(database))


def parse_servers(body: Any) -> list[str]:
    """The ``servers`` field of a plan request: a non-empty list of distinct ``host:port`` names."""
    known_object(body, {"servers"})
    servers = body.get("servers")
    if not isinstance(servers, list) or not servers:
        raise InvalidInput("servers", "must be a non-empty list of server names (host:port)")
    for position, name in enumerate(servers):
        if not isinstance(name, str) or not name or len(name) > MAX_SERVER_NAME_CHARS:
            raise InvalidInput(f"servers.{position}", f"must be a server name (host:port), 1..{MAX_SERVER_NAME_CHARS}")
    if len(set(servers)) != len(servers):
        raise InvalidInput("servers", "names a server twice")
    return [str(name) for name in servers]


def plan(shard_map: ShardMap, servers: list[str]) -> list[Move]:
    """:func:`sharding.rebalance.plan_rebalance`, a refused list being a 422 naming ``servers``."""
    try:
        return plan_rebalance(shard_map, servers)
    except ShardMapError as error:
        raise InvalidInput("servers", str(error)) from error


def plan_json(shard_map: ShardMap, moves: list[Move]) -> dict[str, Any]:
    return {
        "epoch": shard_map.epoch,
        "moves": [{"database": move.database, "from": move.source, "to": move.target} for move in moves],
    }
