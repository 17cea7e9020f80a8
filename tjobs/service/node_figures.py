"""Every node's runtime figures, for the cluster page and the pools: published by each node, read by any.

A node's figures are what only it knows: jobs owned, wheel size, fire backlog, delivery backlog and
callbacks in flight, compensator backlog, the last cycle load, its sync lag, lease and clock offset,
the hot tier's last lag, and per executor pool the callbacks it has in flight to each executor and the
pools where a flow found no live executor (:meth:`tjobs.delivery.pool_dispatcher.PoolDispatcher.starved`).
The node builds them (:meth:`tjobs.node.Node.runtime_figures`) and :class:`NodeFigures` publishes them on
the coordinator (:meth:`tjobs.cluster.base.Coordinator.publish_node_figures`: etcd, on the node's lease;
embedded, in memory) every :data:`PUBLISH_INTERVAL_S`, so one node serving the cluster page shows every
node's, each with its ``published_at_ms`` (the page says how old). The serving node's own are taken
at the request, not from its last publication.

Bounded: at most :data:`MAX_IN_FLIGHT_ENTRIES` executors with callbacks in flight and the pools found
empty in the last :data:`STARVED_WINDOW_MS` (the dispatcher keeps at most 1,000).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tjobs.clock import Clock
from tjobs.cluster.base import Coordinator
from tjobs.errors import StorageUnavailable
from tjobs.periodic import PeriodicPass

logger = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 5.0
STARVED_WINDOW_MS = 15 * 60_000  # a pool found without executors this recently is warned about
MAX_IN_FLIGHT_ENTRIES = 2_000

Figures = dict[str, Any]


class NodeFigures(PeriodicPass):
    """Publishes this node's figures every :data:`PUBLISH_INTERVAL_S` and reads every node's."""

    name = "node_figures"

    def __init__(
        self,
        node_id: str,
        coordinator: Coordinator,
        snapshot: Callable[[], Figures],
        clock: Clock,
        interval_s: float = PUBLISH_INTERVAL_S,
    ) -> None:
        super().__init__(interval_s)
        self.node_id = node_id
        self._coordinator = coordinator
        self._snapshot = snapshot
        self._clock = clock
        self.published = 0

    def now(self) -> Figures:
        """This node's figures now, stamped ``published_at_ms`` with the node's clock."""
        return {**self._snapshot(), "node_id": self.node_id, "published_at_ms": self._clock.now_ms()}

    async def start(self) -> None:
        await self.run_once()  # the other nodes see this one's figures from its start
        await super().start()

    async def run_once(self) -> int:
        try:
            await self._coordinator.publish_node_figures(self.now())
        except StorageUnavailable as error:
            logger.warning("node figures not published (%s)", error, extra={"action": "node_figures_unpublished"})
            return 0
        self.published += 1
        return 1

    async def every_node(self) -> tuple[dict[str, Figures], str | None]:
        """Each live node's figures by node id (this node's taken now, the others' as last published),
        and why the others' are missing when they could not be read (``None`` when they were)."""
        try:
            records = await self._coordinator.node_figures()
            missing = None
        except StorageUnavailable as error:
            records, missing = {}, str(error)
        records[self.node_id] = self.now()
        return dict(sorted(records.items())), missing


def in_flight_entries(in_flight: dict[tuple[str, str], dict[str, int]]) -> list[list[Any]]:
    """The dispatcher's callbacks in flight as ``[app id, pool, executor id, count]`` (bounded)."""
    entries = [
        [app_id, pool, executor_id, count]
        for (app_id, pool), counts in sorted(in_flight.items())
        for executor_id, count in sorted(counts.items())
    ]
    return entries[:MAX_IN_FLIGHT_ENTRIES]


def pool_in_flight(records: dict[str, Figures], app_id: str) -> dict[tuple[str, str], int]:
    """Callbacks in flight to each executor of ``app_id`` (``(pool, executor id)``), summed over nodes."""
    summed: dict[tuple[str, str], int] = {}
    for record in records.values():
        for entry in record.get("pools", {}).get("in_flight", []):
            if len(entry) == 4 and entry[0] == app_id:
                key = (str(entry[1]), str(entry[2]))
                summed[key] = summed.get(key, 0) + int(entry[3])
    return summed


def starved_pools(
    records: dict[str, Figures], app_ids: set[str] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """The pools (``(app id, pool)``, of ``app_ids`` or any app) where a flow found no live executor
    on some node: the latest time (epoch ms), the attempts so counted and the nodes that saw it."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for node_id, record in records.items():
        for entry in record.get("pools", {}).get("starved", []):
            if len(entry) != 4 or (app_ids is not None and entry[0] not in app_ids):
                continue
            key = (str(entry[0]), str(entry[1]))
            seen = found.setdefault(key, {"last_ms": 0, "attempts": 0, "nodes": []})
            seen["last_ms"] = max(seen["last_ms"], int(entry[2]))
            seen["attempts"] += int(entry[3])
            seen["nodes"].append(node_id)
    return found
