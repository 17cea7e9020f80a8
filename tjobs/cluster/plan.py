"""Job packing: which shards form which job group, and which nodes run each group. Pure functions.

One job group per live node, named by a stable integer id; the node it was made for is its primary,
followed by up to two backups, preferably in other sets (zones). :func:`pack` is *sticky*: it starts
from the previous plan, keeps every shard whose group's primary is still live where it is, hands the
shards of vanished primaries to the least-loaded groups, and then moves shards from the heaviest to
the lightest group only while that narrows a gap wider than ``tolerance``. So a join moves about
``1/n`` of the load to the newcomer, a leave moves only the departed node's shards, and a cycle with
unchanged membership and stable load moves nothing.

Load of a shard is its weight: the estimate passed in (tasks due per cycle, or active tasks) plus one,
so that empty shards still spread by count.

Per-server reachability (:class:`tjobs.cluster.reachability.Reach`, from the member records) bounds every
step: a primary that cannot reach a server keeps none of its shards while another live node reaches it,
and orphans and rebalancing put a server's shards only on nodes that steadily reach it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tjobs.cluster.reachability import EVERYWHERE, Reach

REPLICAS = 3  # primary + two backups


@dataclass(frozen=True, slots=True)
class Member:
    """A live node as membership shows it."""

    node_id: str
    zone: str = ""
    address: str = ""


@dataclass(frozen=True, slots=True)
class Group:
    """One job group: its shards and its nodes (primary first, then backups in take-over order)."""

    id: int
    shards: tuple[int, ...]
    nodes: tuple[str, ...]

    @property
    def primary(self) -> str:
        return self.nodes[0]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "shards": list(self.shards), "nodes": list(self.nodes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Group:
        shards = tuple(int(s) for s in data["shards"])
        return cls(int(data["id"]), shards, tuple(str(n) for n in data["nodes"]))


@dataclass(frozen=True, slots=True)
class Plan:
    """A versioned assignment of every shard to exactly one group."""

    version: int
    shard_count: int
    groups: tuple[Group, ...] = ()
    created_at_ms: int = 0
    leader: str = ""
    loads: Mapping[int, int] = field(default_factory=dict)

    def group_of_shard(self) -> dict[int, Group]:
        return {shard: group for group in self.groups for shard in group.shards}

    def group(self, group_id: int) -> Group | None:
        for group in self.groups:
            if group.id == group_id:
                return group
        return None

    def nodes(self) -> frozenset[str]:
        return frozenset(node for group in self.groups for node in group.nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "shard_count": self.shard_count,
            "created_at_ms": self.created_at_ms,
            "leader": self.leader,
            "groups": [group.to_json() for group in self.groups],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        return cls(
            version=int(data["version"]),
            shard_count=int(data["shard_count"]),
            groups=tuple(Group.from_json(g) for g in data["groups"]),
            created_at_ms=int(data.get("created_at_ms", 0)),
            leader=str(data.get("leader", "")),
        )


def weight(loads: Mapping[int, int], shard: int) -> int:
    return max(loads.get(shard, 0), 0) + 1


def group_load(group_shards: Sequence[int], loads: Mapping[int, int]) -> int:
    return sum(weight(loads, shard) for shard in group_shards)


def pack(
    previous: Plan | None,
    members: Sequence[Member],
    shard_count: int,
    loads: Mapping[int, int],
    *,
    version: int,
    now_ms: int = 0,
    leader: str = "",
    tolerance: int | None = None,
    reach: Reach = EVERYWHERE,
) -> Plan:
    """The next plan for ``members``: every shard in exactly one group, one group per member.

    ``tolerance`` is the load gap between the heaviest and the lightest group that is left alone
    (default: the heaviest shard's weight, or 5 % of the mean group load if that is larger), so small
    drifts of the load estimate do not move shards every cycle. ``reach`` says which servers each node
    cannot reach (the module docstring).
    """
    live = sorted({m.node_id: m for m in members}.values(), key=lambda m: m.node_id)
    if not live:
        return Plan(version, shard_count, (), now_ms, leader, dict(loads))
    live_ids = {m.node_id for m in live}
    constrained = reach.constrained(live_ids)

    # 1. Keep the groups of live primaries with their shards; everything else is an orphan.
    shards_of: dict[str, list[int]] = {}
    group_id_of: dict[str, int] = {}
    previous_backups: dict[str, tuple[str, ...]] = {}
    placed: set[int] = set()
    next_id = 0
    if previous is not None:
        next_id = max((g.id for g in previous.groups), default=-1) + 1
        for group in previous.groups:
            if group.primary in live_ids and group.primary not in shards_of:
                kept = [
                    s
                    for s in group.shards
                    if 0 <= s < shard_count and s not in placed and reach.may_keep(group.primary, s, constrained)
                ]
                shards_of[group.primary] = kept
                placed.update(kept)
                group_id_of[group.primary] = group.id
                previous_backups[group.primary] = group.nodes[1:]
    for member in live:
        if member.node_id not in shards_of:
            shards_of[member.node_id] = []
            group_id_of[member.node_id] = next_id
            next_id += 1
    orphans = [s for s in range(shard_count) if s not in placed]

    # 2. Orphans to the least-loaded group, heaviest first (longest-processing-time greedy).
    load_of = {node: group_load(shards, loads) for node, shards in shards_of.items()}
    for shard in sorted(orphans, key=lambda s: (-weight(loads, s), s)):
        able = [n for n in load_of if reach.may_receive(n, shard, constrained)] or list(load_of)
        target = min(able, key=lambda n: (load_of[n], len(shards_of[n]), n))
        shards_of[target].append(shard)
        load_of[target] += weight(loads, shard)

    # 3. Narrow the gap between the heaviest and the lightest group while it exceeds the tolerance.
    max_weight = max((weight(loads, s) for s in range(shard_count)), default=1)
    mean = sum(load_of.values()) / len(load_of)
    allowed = tolerance if tolerance is not None else max(max_weight, int(mean * 0.05))
    for _ in range(shard_count * 2):
        heavy = max(load_of, key=lambda n: (load_of[n], n))
        light = min(load_of, key=lambda n: (load_of[n], n))
        gap = load_of[heavy] - load_of[light]
        if gap <= allowed:
            break
        # The heaviest shard that still narrows the gap (moving w < gap strictly reduces the spread).
        movable = [s for s in shards_of[heavy] if weight(loads, s) < gap and reach.may_receive(light, s, constrained)]
        if not movable:
            break
        shard = max(movable, key=lambda s: (weight(loads, s), -s))
        shards_of[heavy].remove(shard)
        shards_of[light].append(shard)
        load_of[heavy] -= weight(loads, shard)
        load_of[light] += weight(loads, shard)

    # 4. Backups: other live nodes, other zones first, previous backups kept, burden spread.
    zone_of = {m.node_id: m.zone for m in live}
    backup_count = dict.fromkeys(live_ids, 0)
    groups: list[Group] = []
    for member in live:
        primary = member.node_id
        chosen: list[str] = [primary]
        previous_set = previous_backups.get(primary, ())
        while len(chosen) < min(REPLICAS, len(live)):
            used_zones = {zone_of[n] for n in chosen}
            candidates = [n for n in live_ids if n not in chosen]
            best = min(
                candidates,
                key=lambda n: (zone_of[n] in used_zones, n not in previous_set, backup_count[n], n),
            )
            chosen.append(best)
            backup_count[best] += 1
        groups.append(Group(group_id_of[primary], tuple(sorted(shards_of[primary])), tuple(chosen)))
    groups.sort(key=lambda g: g.id)
    return Plan(version, shard_count, tuple(groups), now_ms, leader, dict(loads))


def needs_replan(plan: Plan | None, members: Sequence[Member], shard_count: int) -> bool:
    """Whether membership (or the topology) no longer matches ``plan``: a node joined or left."""
    if plan is None or plan.shard_count != shard_count:
        return True
    primaries = {g.primary for g in plan.groups}
    return primaries != {m.node_id for m in members}


def moved_shards(before: Plan, after: Plan) -> int:
    """How many shards changed primary between two plans (a measure of disturbance)."""
    old = {s: g.primary for g in before.groups for s in g.shards}
    new = {s: g.primary for g in after.groups for s in g.shards}
    return sum(1 for s, node in new.items() if old.get(s) != node)
