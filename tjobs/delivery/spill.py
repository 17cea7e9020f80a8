"""First attempts a node holds in the store instead of its memory, past what their app's queue keeps (:class:`Spill`).

A daily batch larger than its app's rate waits in the app's queue on the node that fired it
(:mod:`tjobs.delivery.lanes`), ~1.6 KB a flow with its task and flow: a million held at once took ~1.6 GB of the nodes'
memory. Past what the queue keeps (what the app drains in :data:`tjobs.delivery.lanes.KEEP_AHEAD_MS`, at least
``keep_min``) a first attempt is spilled: only its id, its app and its number among the app's spilled flows stay here
(198 B against 1,595 B: ``python -m benchmarks queue_memory``). Its flow stays
``pending`` in the store as the fire transaction wrote it, and it is still this node's: in flight for the compensator,
whose lease counts no attempt on it and holds it until about its turn (:mod:`tjobs.firing.compensator`). The first lease
that finds room for it in its app's queue takes it back (:meth:`Spill.take_back`) and re-drives the flow and task it
read, as a first attempt: a spilled flow spends nothing of its retry budget and is sent once, as ``tjobs-attempt: 1``.

Only a plain first attempt spills: nothing sent or recorded of it yet (no attempts, no history, no pool route), not
at-most-once (stored ``sending``), and of a shard this node owns. Spilled flows go out about in the order their leases
take them back, not strictly in fire order. Those of shards handed over, and all of them when the node stops, are
handed back due at once for the owner (:mod:`tjobs.delivery.hand_back`). One that no lease has found for long (its
task deleted with its open flows, say: a cancelled flow is not leased) is forgotten (:meth:`Spill.forget_unseen`), at a
cost of what it forgets, not of what is spilled.
After a crash the new owner's lease finds them
as it finds any flow, and counts the attempt the dead node may have made.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from sharding import shard_of_task_id
from tjobs.delivery.hand_back import HandBack
from tjobs.delivery.in_flight import Delivery
from tjobs.delivery.lanes import KEEP_AHEAD_MS, Lanes
from tjobs.model import FlowStatus

TAKE_BACK_AHEAD_MS = KEEP_AHEAD_MS // 2
"""A spilled flow's lease ends this long before its turn, as the pace goes now: leased again then, it finds room."""


class Spilled:
    """What a node keeps of a spilled flow."""

    __slots__ = ("app_id", "number", "scheduled_at_ms", "task_id")

    def __init__(self, app_id: str, number: int, task_id: int, scheduled_at_ms: int) -> None:
        self.app_id = app_id
        self.number = number  # among its app's spilled flows (Lanes.spill)
        self.task_id = task_id
        self.scheduled_at_ms = scheduled_at_ms


def spillable(delivery: Delivery) -> bool:
    """Whether ``delivery`` may wait in the store: a first attempt with nothing of it sent or recorded (the module)."""
    flow = delivery.job.flow
    return (
        flow.attempts == 0
        and flow.status is FlowStatus.PENDING
        and flow.attempt_log is None
        and not flow.routes
        and not delivery.at_most_once
        and delivery.pool is None
        and delivery.window is None
    )


class Spill:
    """The flows this node spilled (see the module), by flow id, in two generations: those a lease found (or that were
    spilled) since the generation began, and the others. :meth:`forget_unseen` forgets the others and begins a new
    generation, so a lease costs a move between two dicts and the sweep reads only what no lease found."""

    def __init__(self, lanes: Lanes, hand_back: HandBack) -> None:
        self._lanes = lanes
        self._hand_back = hand_back
        self._seen: dict[str, Spilled] = {}  # spilled, or found by a lease, this generation
        self._unseen: dict[str, Spilled] = {}  # found by no lease since the generation before
        self._generation_ms: int | None = None  # when this generation began (None: not yet)

    def __contains__(self, flow_id: object) -> bool:
        return flow_id in self._seen or flow_id in self._unseen

    def __len__(self) -> int:
        return len(self._seen) + len(self._unseen)

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self._seen, self._unseen)

    def spills(self, delivery: Delivery, active: dict[str, Delivery]) -> bool:
        """Spill ``delivery`` if it may and its app's queue keeps no more: it leaves ``active`` (the deliveries in
        memory), and only what :class:`Spilled` holds of it stays."""
        app = delivery.job.app
        if self._lanes.keeps(app.id) or not spillable(delivery):  # the first, cheaper, decides nearly every fire
            return False
        del active[delivery.flow_id]
        flow = delivery.job.flow
        number = self._lanes.spill(app.id, app.rate_limit_per_s)
        self._seen[delivery.flow_id] = Spilled(app.id, number, flow.task_id, flow.scheduled_at_ms)
        return True

    def take_back(self, flow_id: str) -> bool:
        """Whether the compensator, having leased ``flow_id``, re-drives it: spilled here, with room in its app's queue
        now (then no longer spilled)."""
        spilled = self._seen.get(flow_id) or self._unseen.get(flow_id)
        if spilled is None or not self._lanes.keeps(spilled.app_id):
            return False
        self._drop([(flow_id, spilled)])
        return True

    def wait_ms(self, flow_id: str) -> float | None:
        """How long the compensator's lease holds a spilled flow (None: not spilled): until a while before its turn.
        Asked as the lease finds it, which keeps it (:meth:`forget_unseen`)."""
        spilled = self._seen.get(flow_id)
        if spilled is None:
            spilled = self._unseen.pop(flow_id, None)
            if spilled is None:
                return None
            self._seen[flow_id] = spilled
        return max(self._lanes.spilled_wait_ms(spilled.app_id, spilled.number) - TAKE_BACK_AHEAD_MS, 0.0)

    def forget_unseen(self, now_ms: int, generation_ms: int) -> int:
        """Once a generation has lasted ``generation_ms``, forget the spilled flows no lease found in it or the one
        before: ended in the store (a lease returns an open flow, and holds one spilled here until about its turn, so a
        compensator that passes finds it again within ``HELD_LEASES_MAX`` leases and a grace, less than a generation).
        Returns how many."""
        if self._generation_ms is None:
            self._generation_ms = now_ms
        if now_ms - self._generation_ms < generation_ms:
            return 0
        gone = list(self._unseen.items())
        self._drop(gone)
        self._seen, self._unseen, self._generation_ms = {}, self._seen, now_ms
        return len(gone)

    def let_go(self, shards: frozenset[int] | None = None) -> int:
        """Hand back the spilled flows of ``shards`` (all of them without): nothing of them is sent from here. Returns
        how many."""
        gone = [
            (flow_id, spilled)
            for generation in (self._seen, self._unseen)
            for flow_id, spilled in generation.items()
            if shards is None or shard_of_task_id(spilled.task_id) in shards
        ]
        self._drop(gone)
        for flow_id, spilled in gone:
            self._hand_back.spilled(flow_id, spilled.task_id, spilled.scheduled_at_ms)
        return len(gone)

    def _drop(self, gone: list[tuple[str, Spilled]]) -> None:
        for flow_id, spilled in gone:
            if self._seen.pop(flow_id, None) is None:
                del self._unseen[flow_id]
            self._lanes.unspill(spilled.app_id)
