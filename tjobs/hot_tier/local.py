"""In-process hot tier for the embedded default: the one node owns every shard."""

from __future__ import annotations

from collections.abc import Sequence

from tjobs.hot_tier.base import ChangeListener, ChangesLost, HotTier, TaskChange
from tjobs.observability.observer import NO_OBSERVER, FireObserver


class LocalHotTier(HotTier):
    def __init__(self, *, sole_node: bool = False) -> None:
        """``sole_node``: this node has no cluster, so every write reaches it (:attr:`HotTier.complete`);
        a cluster node configured with the in-process tier hears only its own writes."""
        super().__init__()
        self.complete = sole_node
        self._listener: ChangeListener | None = None

    async def start(
        self, listener: ChangeListener, observer: FireObserver = NO_OBSERVER, lost: ChangesLost | None = None
    ) -> None:  # never loses a change: ``lost`` is never called
        self._listener = listener
        self._observer = observer

    async def stop(self) -> None:
        self._listener = None

    async def publish(self, change: TaskChange) -> None:
        if self._listener is not None:
            self._listener(change)

    async def publish_many(self, changes: Sequence[TaskChange]) -> None:
        listener = self._listener
        if listener is not None:
            for change in changes:
                listener(change)
