"""The moves that spread the logical databases of a shard map evenly over a server list (pure).

:func:`plan_rebalance` answers ``tjobs shards plan`` / ``rebalance`` and ``POST /v1/shards:plan``.
After its moves every listed server holds ``n // k`` or ``n // k + 1`` of the ``n`` logical databases
(``k`` servers), a server that is not listed holds none (draining it), and:

- the fewest databases move: the servers already holding the most keep the extra ones, and a server
  keeps its own databases up to its share (its lowest-numbered ones), so no database ever moves onto
  a server that gives one away, and each database moves at most once;
- logical database 0 never moves (:data:`sharding.shard_map.PINNED_DATABASE`): the list must start
  with the map's first server, which always keeps a share of at least one;
- the moves come in database order, each to the first listed server still short of its share, so
  the same map and list always give the same plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sharding.shard_map import PINNED_DATABASE, ShardMap, ShardMapError


@dataclass(frozen=True, slots=True)
class Move:
    """Logical database ``database`` goes from server ``source`` to server ``target``."""

    database: int
    source: str
    target: str


def plan_rebalance(shard_map: ShardMap, servers: Sequence[str]) -> list[Move]:
    """The moves that leave ``shard_map``'s databases spread evenly over ``servers`` (see the module)."""
    listed = list(dict.fromkeys(servers))
    if not listed:
        raise ShardMapError("a rebalance needs at least one server")
    first = shard_map.servers[0]
    if listed[0] != first:
        raise ShardMapError(
            f"the server list must start with {first}, which holds logical database {PINNED_DATABASE} "
            f"(it does not move), not {listed[0]}"
        )
    held = {server: shard_map.databases_on(server) for server in listed}
    shares = _shares(len(shard_map.placement), listed, held)
    surplus: list[tuple[int, str]] = [
        (database, server) for server, databases in held.items() for database in databases[shares[server] :]
    ]
    surplus += [(index, name) for index, name in enumerate(shard_map.placement) if name not in shares]
    room = {server: shares[server] - min(len(held[server]), shares[server]) for server in listed}
    moves: list[Move] = []
    for database, source in sorted(surplus):
        target = next(server for server in listed if room[server] > 0)
        room[target] -= 1
        moves.append(Move(database, source, target))
    return moves


def _shares(count: int, listed: list[str], held: dict[str, list[int]]) -> dict[str, int]:
    """How many databases each listed server ends with: ``count // k``, plus one for the
    ``count % k`` servers holding the most now (the first server first when it would hold none)."""
    base, extra = divmod(count, len(listed))
    by_holding = sorted(listed, key=lambda server: (-len(held[server]), listed.index(server)))
    if base == 0 and listed[0] not in by_holding[:extra]:
        by_holding.remove(listed[0])
        by_holding.insert(0, listed[0])  # database 0 stays on the first server: it needs a share
    return {server: base + (1 if server in by_holding[:extra] else 0) for server in listed}


def apply_moves(shard_map: ShardMap, moves: Sequence[Move]) -> ShardMap:
    """``shard_map`` after ``moves`` (one epoch per move), for the tests and the preview."""
    for move in moves:
        shard_map = shard_map.moved(move.database, move.target)
    return shard_map
