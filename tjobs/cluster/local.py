"""The embedded coordinator: one process owns every job, for ever."""

from __future__ import annotations

from tjobs.cluster.base import Coordinator, OwnershipListener
from tjobs.cluster.db_health import DatabaseHealth


class LocalCoordinator(Coordinator):
    def __init__(self, shard_count: int, node_id: str = "local", health: DatabaseHealth | None = None) -> None:
        self._all = frozenset(range(shard_count))
        self._owned: frozenset[int] = frozenset()
        self.node_id = node_id
        self._health = health  # shown in describe(); pausing is the runner's (wired by the node)

    async def start(self, on_change: OwnershipListener) -> None:
        self._owned = self._all
        await on_change(self._owned)

    async def stop(self) -> None:
        self._owned = frozenset()

    def owned_jobs(self) -> frozenset[int]:
        return self._owned

    def may_fire(self, now_ms: int) -> bool:
        return bool(self._owned)

    def describe(self) -> dict[str, object]:
        view: dict[str, object] = {"mode": "embedded", "nodes": [self.node_id], "owned_jobs": len(self._owned)}
        if self._health is not None:
            view["database_servers"] = self._health.describe()
        return view
