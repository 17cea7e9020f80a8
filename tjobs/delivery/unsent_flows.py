"""The flows a fenced node dropped unsent (:class:`UnsentFlows`), so that it leases them by name once it
fires their shards again.

Before every attempt the deliverer asks the node's fence; an attempt that finds it closed is dropped from
memory unsent (:mod:`tjobs.delivery.fenced_report`). The store still holds the flow ``pending``, and a
compensator leases it once its attempt is ``compensator.grace_s`` overdue: the grace waits out an attempt
another node may still have under way. This node knows it never sent the attempt it dropped. So once it
fires the flow's shard again (its lease renewed, or the shard taken again once etcd came back: that
hand-over starts a pass at once), its compensator's next pass leases the flow by name
(:meth:`tjobs.stores.contracts.FirePath.lease_unsent_flows`), at the attempts the store held when it was
dropped: a flow another node leased or answered meanwhile is not taken. An etcd outage then delays a
flow committed just before it by the outage and a pass, not by the grace.

Each is kept for ``keep_ms`` (the grace: after it the compensator's stale lease finds it anyway), and at
most :data:`MAX_UNSENT` at once (a deep queue dropped: the rest wait for the grace).
"""

from __future__ import annotations

from sharding import shard_of_task_id
from tjobs.clock import Clock
from tjobs.model import UnsentFlow

MAX_UNSENT = 100_000  # flows remembered at once (~200 bytes each)


class UnsentFlows:
    def __init__(self, clock: Clock, keep_ms: int, limit: int = MAX_UNSENT) -> None:
        self._clock = clock
        self._keep_ms = keep_ms
        self._limit = limit
        # shard -> (task id, instant) -> (the attempts the store holds, when it was dropped)
        self._by_shard: dict[int, dict[tuple[int, int], tuple[int, int]]] = {}
        self._count = 0
        self.overflow = 0  # dropped flows not remembered (over the limit): the compensator's grace finds them

    def __len__(self) -> int:
        return self._count

    def add(self, task_id: int, scheduled_at_ms: int, attempts: int) -> None:
        """Remember a flow whose attempt after ``attempts`` (what the store holds) was dropped unsent."""
        now_ms = self._clock.now_ms()
        if self._count >= self._limit:
            self._expire(now_ms)
            if self._count >= self._limit:
                self.overflow += 1
                return
        entries = self._by_shard.setdefault(shard_of_task_id(task_id), {})
        key = (task_id, scheduled_at_ms)
        if key not in entries:
            self._count += 1
        entries[key] = (attempts, now_ms)

    def waiting(self, shards: frozenset[int]) -> bool:
        """Whether a flow of ``shards`` is remembered (perhaps past ``keep_ms``: :meth:`take` drops those)."""
        return bool(self._count) and any(shard in shards for shard in self._by_shard)

    def take(self, shards: frozenset[int]) -> dict[int, list[UnsentFlow]]:
        """The remembered flows of ``shards`` (the ones this node fires now), forgotten here: each is named
        to the store once. Those of other shards are kept until ``keep_ms`` has passed."""
        if not self._count:
            return {}
        self._expire(self._clock.now_ms())
        taken: dict[int, list[UnsentFlow]] = {}
        for shard in [shard for shard in self._by_shard if shard in shards]:
            entries = self._by_shard.pop(shard)
            self._count -= len(entries)
            taken[shard] = [UnsentFlow(task_id, at_ms, attempts) for (task_id, at_ms), (attempts, _) in entries.items()]
        return taken

    def _expire(self, now_ms: int) -> None:
        cutoff = now_ms - self._keep_ms
        for shard in list(self._by_shard):
            entries = self._by_shard[shard]
            old = [key for key, (_, dropped_ms) in entries.items() if dropped_ms <= cutoff]
            for key in old:
                del entries[key]
            self._count -= len(old)
            if not entries:
                del self._by_shard[shard]
