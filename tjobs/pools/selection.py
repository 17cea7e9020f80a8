"""Picking executors for one attempt (pure: the state a pick needs is passed in or held by the caller).

- ``one`` picks a single executor by a :class:`tjobs.specs.pool.Strategy`:

  - ``round_robin``: smooth weighted round robin (:class:`RoundRobin`): with equal weights, executor
    after executor in id order; a weight-3 executor gets three picks in every cycle of the weights'
    sum, spread out rather than in a row;
  - ``consistent_hash``: weighted rendezvous hashing on a key (the task id, or the task's key): the same
    key goes to the same executor while it is live, and when one leaves only its keys move
    (:func:`rendezvous_order`);
  - ``least_in_flight``: the executor with the fewest callbacks in flight from this node per unit of
    weight; ties are broken by a rotating counter so that an idle pool is still spread.

  Candidates are the live executors minus those excluded (tried already in this flow, their circuit
  open). ``capacity`` is soft: an executor with ``capacity`` callbacks in flight is passed over while
  another one has room, and picked anyway when every one is full.
- ``one_per_zone`` applies the strategy inside each zone that has a candidate (:func:`one_per_zone`).
- ``all`` is every live executor: nothing to pick.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence

from tjobs.pools.model import Executor


class RoundRobin:
    """Smooth weighted round robin over whatever candidates each pick offers (one per pool and zone)."""

    __slots__ = ("_current",)

    def __init__(self) -> None:
        self._current: dict[str, int] = {}

    def pick(self, candidates: Sequence[Executor]) -> Executor:
        if not candidates:
            raise ValueError("no candidate to pick")
        current = self._current
        total = 0
        best: Executor | None = None
        best_score = 0
        for executor in sorted(candidates, key=lambda e: e.id):
            weight = max(executor.weight, 1)
            score = current.get(executor.id, 0) + weight
            current[executor.id] = score
            total += weight
            if best is None or score > best_score:
                best, best_score = executor, score
        assert best is not None
        current[best.id] -= total
        if len(current) > 4 * len(candidates) + 16:  # executors long gone
            alive = {e.id for e in candidates}
            self._current = {key: value for key, value in current.items() if key in alive}
        return best


def _unit_hash(key: str, executor_id: str) -> float:
    digest = hashlib.blake2b(f"{key}\x00{executor_id}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2**64  # in (0, 1)


def rendezvous_order(candidates: Sequence[Executor], key: str) -> list[Executor]:
    """``candidates`` in weighted rendezvous order for ``key``: the first is the key's executor, the
    next its successor should the first be excluded."""
    return sorted(candidates, key=lambda e: (math.log(_unit_hash(key, e.id)) / max(e.weight, 1), e.id), reverse=True)


def least_in_flight(candidates: Sequence[Executor], in_flight: Mapping[str, int], tie_break: int) -> Executor:
    if not candidates:
        raise ValueError("no candidate to pick")
    loads = [(in_flight.get(e.id, 0) / max(e.weight, 1), e.id, e) for e in candidates]
    lowest = min(load for load, _, _ in loads)
    tied = sorted((executor_id, e) for load, executor_id, e in loads if load == lowest)
    return tied[tie_break % len(tied)][1]


def with_room(candidates: Sequence[Executor], in_flight: Mapping[str, int]) -> list[Executor]:
    """The candidates below their capacity, or all of them when none is (capacity is soft)."""
    roomy = [e for e in candidates if e.capacity is None or in_flight.get(e.id, 0) < e.capacity]
    return roomy or list(candidates)


def one_per_zone(candidates: Sequence[Executor], pick: Callable[[str, Sequence[Executor]], Executor]) -> list[Executor]:
    """One executor per zone that has a candidate, zones in name order; ``pick(zone, candidates)``."""
    zones: dict[str, list[Executor]] = {}
    for executor in candidates:
        zones.setdefault(executor.zone, []).append(executor)
    return [pick(zone, zones[zone]) for zone in sorted(zones)]
