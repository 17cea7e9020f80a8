"""Cluster-wide limits as per-node shares that follow membership (issue 28).

An app's API rates (requests, expensive reads, creates) and its active-task quota are the cluster's,
not each node's. No request asks another node or the database for a shared budget: each node takes
its share of the limit, the limit divided by the live node count it last read from the coordinator
(:meth:`tjobs.cluster.base.Coordinator.live_nodes`, re-read at every membership sync), so the shares
of every node add up to the limit.

- **Rates** (:func:`rate_share`): each node's token bucket refills at ``rate / nodes`` and holds
  ``burst_s`` seconds of that share, so the cluster admits at most the app's rate (and its burst) in
  all, however the balancer spreads the requests. An uneven spread admits less: a node that gets more
  than its share of an app's requests refuses some while another has tokens to spare.
- **The quota** (:func:`quota_share_allows`): a stock, not a flow. Each node reads every app's
  active tasks from the stores' task counts in the background (:mod:`tjobs.service.task_counts`, a
  *pass*); the room left at that pass (``quota - counted``) is split into ``nodes`` whole shares
  that add up to it exactly (the remainder's extra units go to the nodes ranked first after an
  offset drawn from the app id, so one node does not hold every app's odd unit), and a node admits
  a create only while its own net additions since its pass, with the new ones, stay within its
  share. When every node's last pass counted the same number (a burst from rest), the shares add up
  to the room exactly; when passes differ, the newest pass re-divides room the others' older shares
  still cover, so the app can end at most ``(nodes - 1) / nodes`` of what was registered between the
  oldest and the newest of the nodes' passes above its quota.

Membership changes reach each node at its next coordinator sync (``cluster.sync_interval_ms``): a
node joining raises the total to ``(N + 1) / N`` of the limit until the others read it; a node that
died keeps its member key until its lease ends (``cluster.lease_ttl_s``), during which the others
hold a smaller total than the limit. One node (the embedded mode) has the whole limit.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import NamedTuple


class Membership(NamedTuple):
    """The live node count this node last read, and its rank among them (0-based, by node id)."""

    nodes: int
    rank: int


SOLE_NODE = Membership(1, 0)


def members_share(members: Iterable[str], node_id: str) -> Membership:
    """The membership as one read of the members shows it: every member counts, healthy or not (a
    node fenced off its database still answers requests), and this node counts even before its
    own member key is seen."""
    ids = sorted({*members, node_id})
    return Membership(len(ids), ids.index(node_id))


def rate_share(rate_per_s: float, nodes: int) -> float:
    """This node's share of a cluster-wide rate over ``nodes`` live nodes (0, unlimited, stays 0)."""
    if rate_per_s <= 0:
        return 0.0
    return rate_per_s / max(1, nodes)


def quota_share(room: int, app_id: str, membership: Membership) -> int:
    """This node's whole share of an app's ``room`` (``quota - counted``): over the ranks ``0 .. N-1``
    the shares ``(room + k) // N`` add up to ``room`` exactly; ``k`` is the node's rank shifted by the
    app id's CRC-32."""
    nodes = max(1, membership.nodes)
    k = (membership.rank + zlib.crc32(app_id.encode())) % nodes
    return (room + k) // nodes


def quota_share_allows(
    quota: int, counted: int, own_since: int, adding: int, app_id: str, membership: Membership
) -> bool:
    """Whether this node may add ``adding`` active tasks of an app: ``counted`` is the app's active
    tasks at this node's last pass (the cluster's, 0 before the first), ``own_since`` this node's net
    additions since (negative after deletes and pauses). ``quota`` 0 or less is unlimited; one node
    alone has all the room."""
    if quota <= 0:
        return True
    return own_since + adding <= quota_share(quota - counted, app_id, membership)
