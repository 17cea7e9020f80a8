"""Flows this node lets go unsent, written back due so that their shard's owner re-drives them at its next pass.

A compensator leases a flow only once its next attempt is ``compensator.grace_s`` overdue: the grace waits out an
attempt another node may still have under way. But a node that lets a flow go knows which attempt it never sent. So,
with ``hand_back_ms`` (as the node runs: the grace plus twice ``cluster.clock_skew_max_ms``), it writes the flow back
through its outcome writer ``pending`` at the attempts stored:

- a flow it never sent at this attempt (queued, or stopped at its turn) due ``hand_back_ms`` before now or before its
  instant, whichever is earlier: the owner leases it at its next pass (a node taking shards starts one at once), even
  when this node's wall clock stepped ahead (an NTP step: its lease expires by that clock, its fence closes, and
  ``now`` is not the owner's);
- a flow waiting for its retry, or whose attempt failed after it was let go, due its retry time less ``hand_back_ms``:
  the owner leases it when the retry is due, not a grace later;
- a first attempt it spilled (:mod:`tjobs.delivery.spill`: kept in the store, not in its memory), as a queued one.

It lets flows go when its fence closes (:mod:`tjobs.delivery.fenced_flows`), when shards are handed over while it is
healthy (a node joined, or this one hands its groups off as it stops: ``Deliverer.forget_runs``), and when it stops.
Where another node leased or answered the flow meanwhile, more attempts are stored, or it ended, and
``record_flow_updates`` ignores the write. An at-most-once flow the fire transaction stored ``sending`` is not written:
the compensator closes it ``unknown`` after the grace. A re-drive's lease counts one attempt, so such a flow's next
send carries the attempt number after the one it was let go at.
"""

from __future__ import annotations

from tjobs.clock import Clock
from tjobs.delivery.in_flight import Delivery
from tjobs.delivery.outcomes import OutcomeWriter
from tjobs.model import FlowStatus, FlowUpdate


class HandBack:
    """Writes back the flows this node lets go unsent (see the module); without ``hand_back_ms`` it writes nothing."""

    def __init__(self, clock: Clock, outcomes: OutcomeWriter, hand_back_ms: int | None) -> None:
        self._clock = clock
        self._outcomes = outcomes
        self._hand_back_ms = hand_back_ms
        self.flows = 0  # written back

    def unsent(self, delivery: Delivery) -> bool:
        """``delivery``'s next attempt is not sent from here: due at once for the owner. Whether it was written."""
        return self._write(delivery, min(self._clock.now_ms(), delivery.job.flow.scheduled_at_ms))

    def waiting(self, delivery: Delivery) -> bool:
        """``delivery`` waited for its retry, which is not sent from here: due at the retry time for the owner."""
        return delivery.retry_at_ms is not None and self._write(delivery, delivery.retry_at_ms)

    def spilled(self, flow_id: str, task_id: int, scheduled_at_ms: int) -> bool:
        """A spilled first attempt is not sent from here: due at once for the owner, as :meth:`unsent`."""
        if self._hand_back_ms is None:
            return False
        due_ms = min(self._clock.now_ms(), scheduled_at_ms) - self._hand_back_ms
        self._outcomes.put(flow_id, FlowUpdate(task_id, scheduled_at_ms, FlowStatus.PENDING, 0, due_ms))
        self.flows += 1
        return True

    def retry_at(self, retry_at_ms: int) -> int:
        """The next attempt to store for a retry at ``retry_at_ms`` that is not sent from here (a failed attempt of
        a flow let go while it was under way)."""
        if self._hand_back_ms is None:
            return retry_at_ms
        self.flows += 1
        return retry_at_ms - self._hand_back_ms

    def _write(self, delivery: Delivery, at_ms: int) -> bool:
        if self._hand_back_ms is None or (delivery.at_most_once and not delivery.record_sending):
            return False
        # stored pending at the attempts made before the one not sent
        due_ms = at_ms - self._hand_back_ms
        self._outcomes.put(delivery.flow_id, delivery.update(FlowStatus.PENDING, delivery.attempt - 1, due_ms))
        self.flows += 1
        return True
