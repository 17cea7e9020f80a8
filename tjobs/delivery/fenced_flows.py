"""What a node does with a flow its fence keeps it from sending (:class:`FencedFlows`).

Before every attempt the deliverer asks the node's fence; once the node's lease has expired (a SIGSTOP or
a stall outlived it, etcd went away) nothing more is sent. The flow is dropped from memory; the store still
has it ``pending``, and the shard owner's compensator re-drives it.

**Handed back** (:mod:`tjobs.delivery.hand_back`): this node knows it never sent the attempt it drops, so the flow is
written back due, and the shard's owner, this node once it fires again or another node, leases it at its next pass (a
node taking shards starts one at once), not a grace later.

**Reported in a few lines** (:class:`FencedReport`). A node that lost its jobs with a deep queue would write
one line per flow (127,448 lines in 5 s at 3,000 fires a second), so the first flow is named, then one line
naming the next flow and the count since the last line at most every :data:`FENCED_REPORT_MS`, and the rest
at stop.
"""

from __future__ import annotations

import logging

from tjobs.clock import Clock
from tjobs.delivery.hand_back import HandBack
from tjobs.delivery.in_flight import Delivery

logger = logging.getLogger(__name__)

FENCED_REPORT_MS = 10_000  # a fenced node logs the flows it does not send at most this often


class FencedReport:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._unreported = 0  # fenced flows not named in a log line yet
        self._reported_ms: int | None = None

    def flow(self, flow_id: str) -> None:
        """Log a flow not sent because this node is fenced: the first one, then one line naming the
        next flow and the count since the last line at most every :data:`FENCED_REPORT_MS`."""
        now_ms = self._clock.now_ms()
        if self._reported_ms is not None and now_ms - self._reported_ms < FENCED_REPORT_MS:
            self._unreported += 1
            return
        if self._unreported:
            logger.warning(
                "fenced: not sending flow %s and %d more since the last report; their owners' compensators"
                " re-drive them",
                flow_id,
                self._unreported,
                extra={"action": "delivery_fenced", "flow_id": flow_id, "flows": self._unreported + 1},
            )
        else:
            logger.warning(
                "fenced: not sending flow %s; the owner's compensator re-drives it",
                flow_id,
                extra={"action": "delivery_fenced", "flow_id": flow_id, "flows": 1},
            )
        self._unreported = 0
        self._reported_ms = now_ms

    def close(self) -> None:
        """Log the flows not named yet (at stop)."""
        if self._unreported:
            logger.warning(
                "fenced: %d more flows not sent since the last report; their owners' compensators re-drive them",
                self._unreported,
                extra={"action": "delivery_fenced", "flows": self._unreported},
            )
            self._unreported = 0


class FencedFlows:
    """The flows this node's fence kept it from sending: reported, and handed back (see the module)."""

    def __init__(self, clock: Clock, hand_back: HandBack) -> None:
        self._hand_back = hand_back
        self._report = FencedReport(clock)
        self.dropped = 0
        self.handed_back = 0

    def drop(self, delivery: Delivery) -> None:
        """``delivery``'s attempt found the fence closed: it is not sent."""
        self.dropped += 1
        self._report.flow(delivery.flow_id)
        if self._hand_back.unsent(delivery):
            self.handed_back += 1

    def close(self) -> None:
        """Log the dropped flows not named yet (at stop)."""
        self._report.close()
