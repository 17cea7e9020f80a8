"""Per-server reachability in the job plan: a node cut off from one database server gives that server's
shards up to a node that reaches it.

Each node publishes, in its member record, the servers it cannot use for new work (:class:`ReachRecord`):

* ``db_down``: the servers its :class:`tjobs.cluster.db_health.DatabaseHealth` finds unreachable now,
  each with the instant (epoch ms) it found so;
* ``db_recovering``: the servers that answer again, for less than the hold (``db_recovery_hold_s``).

For the plan (:func:`tjobs.cluster.plan.pack`, through :class:`Reach`) a node is, for one server,
*down*, *recovering* or *steady* (neither). When at least one live node is steady for a server:

* a node down for it for :data:`DOWN_GRACE_MS` keeps none of that server's shards: they go to the groups
  of steady nodes (the grace lets every node notice a server that died for all of them: their pings
  fail within a ping timeout of each other, and a server down for all moves nothing);
* a recovering node keeps what it has but is given none of that server's shards;
* orphans and rebalancing place that server's shards on steady nodes only.

When no live node is steady for a server (the server itself is down, or every node just saw it come back)
nothing moves for it: no node could do better, and a restart of the server must not reshuffle the plan.

That is the hysteresis: a flapping link moves a node's shards away once, at its first failure, and they
can only come back (by the plan's ordinary rebalancing) once the link has answered for the whole hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DB_DOWN_KEY = "db_down"
DB_RECOVERING_KEY = "db_recovering"
DOWN_GRACE_MS = 2000  # a ping's timeout: how far apart the nodes notice a server that died for all


class ReachRecord:
    """The node's side: which servers it publishes as down and recovering, from its health, at ``now_ms``."""

    def __init__(self, hold_ms: int) -> None:
        self._hold_ms = hold_ms
        self._down_since_ms: dict[str, int] = {}
        self._recovered_at_ms: dict[str, int] = {}

    def update(self, unreachable: Iterable[str], now_ms: int) -> dict[str, object]:
        """The member record's entries: ``{server: down since (epoch ms)}`` and a sorted list; the value
        changes only on a transition."""
        down = set(unreachable)
        for server in set(self._down_since_ms) - down:
            self._recovered_at_ms[server] = now_ms
        self._down_since_ms = {server: self._down_since_ms.get(server, now_ms) for server in sorted(down)}
        self._recovered_at_ms = {
            server: at_ms
            for server, at_ms in self._recovered_at_ms.items()
            if server not in down and now_ms - at_ms < self._hold_ms
        }
        return {DB_DOWN_KEY: dict(self._down_since_ms), DB_RECOVERING_KEY: sorted(self._recovered_at_ms)}


def _servers(value: Any) -> frozenset[str]:
    if not isinstance(value, list | dict):
        return frozenset()
    return frozenset(str(server) for server in value)


def _down_for(value: Any, now_ms: int, grace_ms: int) -> frozenset[str]:
    """The servers of a ``db_down`` entry down for at least ``grace_ms`` at ``now_ms``."""
    if not isinstance(value, dict):
        return frozenset()
    return frozenset(
        str(server) for server, since in value.items() if isinstance(since, int) and now_ms - since >= grace_ms
    )


@dataclass(frozen=True, slots=True)
class Reach:
    """What the live nodes publish about the servers, and which server holds each shard."""

    server_of: Mapping[int, str] = field(default_factory=dict)
    down: Mapping[str, frozenset[str]] = field(default_factory=dict)  # node -> servers it cannot reach
    recovering: Mapping[str, frozenset[str]] = field(default_factory=dict)  # node -> answering again, in hold
    evicted: Mapping[str, frozenset[str]] = field(default_factory=dict)  # node -> down for the grace at least

    @classmethod
    def from_members(
        cls,
        members: Mapping[str, Mapping[str, Any]],
        server_of: Mapping[int, str],
        now_ms: int,
        grace_ms: int = DOWN_GRACE_MS,
    ) -> Reach:
        """From the member records as read from etcd at ``now_ms`` (a record without the entries
        reaches everything)."""
        return cls(
            server_of,
            {node: _servers(m.get(DB_DOWN_KEY)) for node, m in members.items()},
            {node: _servers(m.get(DB_RECOVERING_KEY)) for node, m in members.items()},
            {node: _down_for(m.get(DB_DOWN_KEY), now_ms, grace_ms) for node, m in members.items()},
        )

    def _steady(self, node: str, server: str) -> bool:
        return server not in self.down.get(node, ()) and server not in self.recovering.get(node, ())

    def constrained(self, live: Iterable[str]) -> frozenset[str]:
        """The servers some live node is steady for while another is not: only those move shards."""
        nodes = list(live)
        servers = {s for n in nodes for s in (*self.down.get(n, ()), *self.recovering.get(n, ()))}
        return frozenset(s for s in servers if any(self._steady(n, s) for n in nodes))

    def may_keep(self, node: str, shard: int, constrained: frozenset[str]) -> bool:
        server = self.server_of.get(shard)
        return server not in constrained or server not in self.evicted.get(node, ())

    def may_receive(self, node: str, shard: int, constrained: frozenset[str]) -> bool:
        server = self.server_of.get(shard)
        return server not in constrained or self._steady(node, server)

    def misplaced(self, groups: Iterable[tuple[str, Iterable[int]]], live: Iterable[str]) -> bool:
        """Whether a primary (of ``(primary, shards)``) holds a shard of a server it has been down for
        during the grace while a live node is steady for that server: the plan must be re-packed now,
        not at the next cycle."""
        constrained = self.constrained(live)
        if not constrained:
            return False
        return any(not self.may_keep(node, shard, constrained) for node, shards in groups for shard in shards)


EVERYWHERE = Reach()
