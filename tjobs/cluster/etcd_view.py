"""The etcd coordinator's keys and what one read of them shows (:class:`ClusterView`).

Keys, under ``/tjobs/<cluster name>/``::

    members/<node id>   {"node_id", "zone", "address", "healthy", "failovers",
                         "clock_offset_ms", "db_down", "db_recovering"}         on the node's lease
    leader              <node id>                                               on the leader's lease
    plan                {"version", "shard_count", "groups": [{"id", "shards", "nodes"}], ...}
    holders/<group id>  {"node_id", "since_ms"}                                 on the holder's lease
    sessions/<node id>  {"servers": {server: {"booted_at_s", "ids"}}}          no lease (outlives it)
    shard_map           {"epoch", "servers", "placement"} (sharding/shard_map.py) no lease (outlives all)

Every ``sync_interval_ms`` each node reads the whole prefix in one range request (:func:`read_view`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import aetcd

from sharding.shard_map import ShardMap
from tjobs.cluster.plan import Plan
from tjobs.cluster.session_fence import RecordedSessions, parse_sessions

logger = logging.getLogger(__name__)

ETCD_CALL_TIMEOUT_S = 2
SHARD_MAP_KEY = "shard_map"


@dataclass(slots=True)
class ClusterView:
    """What one read of the prefix showed."""

    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    leader: str | None = None
    plan: Plan | None = None
    plan_revision: int = 0
    holders: dict[int, tuple[str, int]] = field(default_factory=dict)  # group -> (node, lease id)
    sessions: dict[str, RecordedSessions] = field(default_factory=dict)  # node -> its database sessions
    shard_map: ShardMap | None = None

    def available(self, node_id: str) -> bool:
        """``node_id`` is a member and says it is healthy."""
        member = self.members.get(node_id)
        return member is not None and bool(member.get("healthy", True))


async def read_view(client: aetcd.Client, prefix: bytes) -> ClusterView:
    """Every key under ``prefix``, in one range request."""
    result = await client.get_prefix(prefix)
    view = ClusterView()
    for kv in result:
        name = bytes(kv.key)[len(prefix) :].decode()
        if name.startswith("members/"):
            with contextlib.suppress(ValueError):
                view.members[name.removeprefix("members/")] = json.loads(kv.value)
        elif name == "leader":
            view.leader = bytes(kv.value).decode()
        elif name == "plan":
            view.plan = Plan.from_json(json.loads(kv.value))
            view.plan_revision = int(kv.mod_revision)
        elif name.startswith("holders/"):
            holder = json.loads(kv.value)
            view.holders[int(name.removeprefix("holders/"))] = (str(holder["node_id"]), int(kv.lease))
        elif name == SHARD_MAP_KEY:
            try:
                view.shard_map = ShardMap.from_json(json.loads(kv.value))
            except ValueError as error:  # never route by a map that does not parse: keep the last
                logger.error("unreadable shard map in etcd (%s)", error, extra={"action": "shard_map_unreadable"})
        elif name.startswith("sessions/"):
            node_id = name.removeprefix("sessions/")
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                view.sessions[node_id] = parse_sessions(node_id, kv.value, int(kv.mod_revision))
    return view
