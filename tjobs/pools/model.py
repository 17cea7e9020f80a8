"""An executor of a pool (a pool's name follows :func:`tjobs.specs.pool.valid_pool_name`).

An executor is identified by ``(app id, pool, executor id)``. Its ``address`` is the base URL callbacks
go to (a pool route may add a path); ``zone`` groups executors for ``one_per_zone``; ``weight`` biases
round robin and consistent hashing; ``capacity`` bounds the callbacks one node keeps in flight to it
(``None``: unbounded). ``ttl_s`` is its lease: an executor that sends no heartbeat for that long is out
of the pool.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from tjobs.wire import EXECUTOR_DEFAULT_TTL_S

DEFAULT_TTL_S = EXECUTOR_DEFAULT_TTL_S


def executor_id_for(address: str) -> str:
    """The id of an executor that registers without one: stable per address, so registering the same
    address again is the same executor."""
    return "x" + hashlib.sha256(address.encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Executor:
    id: str
    address: str
    zone: str = ""
    weight: int = 1
    capacity: int | None = None
    ttl_s: int = DEFAULT_TTL_S
    registered_at_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "address": self.address,
            "zone": self.zone,
            "weight": self.weight,
            "capacity": self.capacity,
            "ttl_s": self.ttl_s,
            "registered_at_ms": self.registered_at_ms,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Executor:
        capacity = value.get("capacity")
        return cls(
            id=str(value["id"]),
            address=str(value["address"]),
            zone=str(value.get("zone", "")),
            weight=int(value.get("weight", 1)),
            capacity=None if capacity is None else int(capacity),
            ttl_s=int(value.get("ttl_s", DEFAULT_TTL_S)),
            registered_at_ms=int(value.get("registered_at_ms", 0)),
        )

    def same_registration(self, other: Executor) -> bool:
        """Whether ``other`` registers the same thing (everything but the registration instant)."""
        return (self.id, self.address, self.zone, self.weight, self.capacity, self.ttl_s) == (
            other.id,
            other.address,
            other.zone,
            other.weight,
            other.capacity,
            other.ttl_s,
        )


@dataclass(frozen=True, slots=True)
class ExecutorLease:
    """A live executor with its lease as the registry knows it now, in durations (the registry's clock is
    monotonic; whoever shows them turns them into instants with the node's clock).

    ``heartbeat_age_ms``: since its last heartbeat known to the registry (a registration counts as one);
    ``lease_left_ms``: until it is out of the pool unless another heartbeat renews the lease."""

    executor: Executor
    heartbeat_age_ms: int
    lease_left_ms: int
