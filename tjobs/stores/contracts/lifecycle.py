"""What every role of the store shares: the topology it spans, and opening, closing and pinging it."""

from __future__ import annotations

from abc import ABC, abstractmethod

from sharding import Topology


class StoreLifecycle(ABC):
    """Durable storage for one topology of shards.

    Errors: a database that cannot be reached raises :class:`tjobs.errors.StorageUnavailable`, and a
    failed call has written nothing.
    """

    topology: Topology

    @abstractmethod
    async def start(self) -> None:
        """Open connections. Schema creation is ``tjobs migrate``'s job, not this one's."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def ping(self) -> None:
        """Raise :class:`tjobs.errors.StorageUnavailable` unless every instance answers."""
