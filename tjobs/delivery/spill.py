"""First attempts a node holds in the store instead of its memory, past what their app's queue keeps (:class:`Spill`).

A daily batch larger than its app's rate waits in the app's queue on the node that fired it
(:mod:`tjobs.delivery.lanes`), ~1.6 KB a flow with its task and flow: a million held at once took ~1.6 GB of the nodes'
memory. Past what the queue keeps (what the app drains in :data:`tjobs.delivery.lanes.KEEP_AHEAD_MS`, at least
``keep_min``) a first attempt is spilled: only its id, its app, its number among the app's spilled flows and when a
lease last found it stay here (206 B against 1,595 B: ``python -m benchmarks queue_memory``). Its flow stays
``pending`` in the store as the fire transaction wrote it, and it is still this node's: in flight for the compensator,
whose lease counts no attempt on it and holds it until about its turn (:mod:`tjobs.firing.compensator`). The first lease
that finds room for it in its app's queue takes it back (:meth:`Spill.take_back`) and re-drives the flow and task it
read, as a first attempt: a spilled flow spends nothing of its retry budget and is sent once, as ``tjobs-attempt: 1``.

Only a plain first attempt spills: nothing sent or recorded of it yet (no attempts, no history, no pool route), not
at-most-once (stored ``sending``), and of a shard this node owns. Spilled flows go out about in the order their leases
take them back, not strictly in fire order. Those of shards handed over, and all of them when the node stops, are
handed back due at once for the owner (:mod:`tjobs.delivery.hand_back`). One that no lease has found for long (its
task deleted with its open flows, say: a cancelled flow is not leased) is forgotten (:meth:`Spill.forget_unseen`).
After a crash the new owner's lease finds them
as it finds any flow, and counts the attempt the dead node may have made.
"""

from __future__ import annotations

from collections.abc import Iterator

from sharding import shard_of_task_id
from tjobs.clock import Clock
from tjobs.delivery.hand_back import HandBack
from tjobs.delivery.in_flight import Delivery
from tjobs.delivery.lanes import KEEP_AHEAD_MS, Lanes
from tjobs.model import FlowStatus

TAKE_BACK_AHEAD_MS = KEEP_AHEAD_MS // 2
"""A spilled flow's lease ends this long before its turn, as the pace goes now: leased again then, it finds room."""


class Spilled:
    """What a node keeps of a spilled flow."""

    __slots__ = ("app_id", "number", "scheduled_at_ms", "seen_ms", "task_id")

    def __init__(self, app_id: str, number: int, task_id: int, scheduled_at_ms: int, seen_ms: int) -> None:
        self.app_id = app_id
        self.number = number  # among its app's spilled flows (Lanes.spill)
        self.task_id = task_id
        self.scheduled_at_ms = scheduled_at_ms
        self.seen_ms = seen_ms  # when it was spilled, or last leased


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
    """The flows this node spilled (see the module), by flow id."""

    def __init__(self, lanes: Lanes, hand_back: HandBack, clock: Clock) -> None:
        self._lanes = lanes
        self._hand_back = hand_back
        self._clock = clock
        self._spilled: dict[str, Spilled] = {}

    def __contains__(self, flow_id: object) -> bool:
        return flow_id in self._spilled

    def __len__(self) -> int:
        return len(self._spilled)

    def __iter__(self) -> Iterator[str]:
        return iter(self._spilled)

    def spills(self, delivery: Delivery, active: dict[str, Delivery]) -> bool:
        """Spill ``delivery`` if it may and its app's queue keeps no more: it leaves ``active`` (the deliveries in
        memory), and only what :class:`Spilled` holds of it stays."""
        app = delivery.job.app
        if self._lanes.keeps(app.id) or not spillable(delivery):  # the first, cheaper, decides nearly every fire
            return False
        del active[delivery.flow_id]
        flow = delivery.job.flow
        number = self._lanes.spill(app.id, app.rate_limit_per_s)
        self._spilled[delivery.flow_id] = Spilled(
            app.id, number, flow.task_id, flow.scheduled_at_ms, self._clock.now_ms()
        )
        return True

    def take_back(self, flow_id: str) -> bool:
        """Whether the compensator, having leased ``flow_id``, re-drives it: spilled here, with room in its app's queue
        now (then no longer spilled)."""
        spilled = self._spilled.get(flow_id)
        if spilled is None or not self._lanes.keeps(spilled.app_id):
            return False
        del self._spilled[flow_id]
        self._lanes.unspill(spilled.app_id)
        return True

    def wait_ms(self, flow_id: str) -> float | None:
        """How long the compensator's lease holds a spilled flow (None: not spilled): until a while before its turn.
        Asked as the lease finds it (:meth:`forget_unseen`)."""
        spilled = self._spilled.get(flow_id)
        if spilled is None:
            return None
        spilled.seen_ms = self._clock.now_ms()
        return max(self._lanes.spilled_wait_ms(spilled.app_id, spilled.number) - TAKE_BACK_AHEAD_MS, 0.0)

    def forget_unseen(self, before_ms: int) -> int:
        """Forget the spilled flows no lease found since ``before_ms``: ended in the store (a lease returns an open
        flow, and holds one spilled here until about its turn, so a compensator that passes finds it again well within
        ``HELD_LEASES_MAX`` leases and a grace). Returns how many."""
        gone = [(flow_id, spilled) for flow_id, spilled in self._spilled.items() if spilled.seen_ms < before_ms]
        self._drop(gone)
        return len(gone)

    def let_go(self, shards: frozenset[int] | None = None) -> int:
        """Hand back the spilled flows of ``shards`` (all of them without): nothing of them is sent from here. Returns
        how many."""
        gone = [
            (flow_id, spilled)
            for flow_id, spilled in self._spilled.items()
            if shards is None or shard_of_task_id(spilled.task_id) in shards
        ]
        self._drop(gone)
        for flow_id, spilled in gone:
            self._hand_back.spilled(flow_id, spilled.task_id, spilled.scheduled_at_ms)
        return len(gone)

    def _drop(self, gone: list[tuple[str, Spilled]]) -> None:
        for flow_id, spilled in gone:
            del self._spilled[flow_id]
            self._lanes.unspill(spilled.app_id)
