"""The coordination contract: which jobs (shards) this node runs, and whether it may fire now."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

OwnershipListener = Callable[[frozenset[int]], Awaitable[None]]


class Coordinator(ABC):
    """Grants this node a set of jobs. Ownership is for liveness only; correctness comes from the
    fire transaction's compare-and-set (invariant 6), so a brief overlap is safe and a gap is not."""

    @abstractmethod
    async def start(self, on_change: OwnershipListener) -> None:
        """Join, then call ``on_change`` with the owned jobs now and on every change after."""

    @abstractmethod
    async def stop(self) -> None:
        """Hand the jobs off (resign) so a successor takes over without waiting for a lease to end."""

    @abstractmethod
    def owned_jobs(self) -> frozenset[int]: ...

    @abstractmethod
    def may_fire(self, now_ms: int) -> bool:
        """``False`` once this node's lease deadline has passed: it must stop firing (self-fencing)."""

    @abstractmethod
    def describe(self) -> dict[str, object]:
        """A JSON-able view for ``/v1/cluster`` and ``/readyz``."""
