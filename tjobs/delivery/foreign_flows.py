"""Retries of a flow whose shard this node does not own (docs/design.md invariant 4).

A flow is delivered by the node that committed it: the shard's owner for a fire or a re-drive, but any node
for what its API or its deliveries commit (a manual trigger, a dead letter re-driven, a backfill's or a
child's flow, a run retried on an executor's report: the services' flow sink). The shard's owner knows
nothing of such a flow in delivery elsewhere. Its compensator leases any open flow whose stored next
attempt is ``grace_s`` past, counts one attempt up (the one a crash may have lost) and re-drives it; were
the committing node still retrying then, an outcome it writes after the lease lands (it does not lower the
count) and its next retry would carry the number the owner's re-drive sent.

So such a flow's retry goes from here only while the owner cannot have leased it. Each outcome this node
writes moves the stored next attempt to its retry's time, and the owner leases nothing before that time
plus ``grace_s``. A retry goes only once the outcome of the attempt before it is written
(:meth:`tjobs.delivery.outcomes.OutcomeWriter.when_written`), and only if that write was seen done before
the next attempt time the flow was stored with during that attempt, plus ``grace_s``, less twice
``cluster.clock_skew_max_ms`` (two nodes' clocks differ by at most that: each fences itself beyond it from
the database's; with the check off, 0, the clocks are trusted to agree). Then no lease came before the
write, so every attempt number this node sent is stored before the owner could count from it. Once a write
is seen later than that, nothing more of the flow is sent from here: the store has it ``pending`` at its
retry time (or leased already), and the owner's compensator re-drives it, with a number never sent (no
flow lost, no attempt number sent twice). An at-least-once flow's first attempt goes while the same window
is open, from its stored next attempt as committed (its number is the count stored then plus one, and a
re-drive sends the count it leased, never lower, plus two): one that waited here longer, queued behind a slow
or rate-limited app, is left to the owner's compensator, which may have leased and sent it already, and else
does at its next pass; sent from here too, the receiver had it twice
(``tests/unit/test_deliverer_foreign_flows.py``). With no window (a grace within twice the clock bound) the
first attempt always goes. A fire parked behind a live run (:mod:`tjobs.delivery.run_watch`) has its window
follow the deadline it is stored at, as a retry's. An at-most-once flow committed ``pending`` (a trigger) is
recorded ``sending`` before its single attempt, and a lease before that write would have the owner send it
too: it is sent from here only if the write was seen done inside the window (seen later, it is ``sending``,
or the owner's already: the owner closes it ``unknown`` or has sent it), and not even written once the window
has closed (left ``pending``, the owner's compensator sends it once). A node that owned the shard when the
flow reached it retries as the owner does (until a hand-over lets the flow go:
:meth:`tjobs.delivery.deliverer.Deliverer.forget_runs`); one that gains the shard later keeps the bound.

What a late write costs: the retry waits for the owner's compensator (its retry time plus ``grace_s``, plus
up to a pass's ``interval_s``), and a re-drive counts one attempt up; a re-driven dead letter's or a
backfill's fresh budget lives only in the committing node's memory, so the owner reads the task's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sharding import shard_of_task_id
from tjobs.model import Flow

logger = logging.getLogger(__name__)

CLOSED_MS = -(2**62)  # a window that is closed whatever the clock says


class ForeignFlows:
    """Tells the flows of shards this node does not own from its own, and opens each one's window."""

    def __init__(self, owned: Callable[[], frozenset[int]], grace_s: float, clock_skew_max_ms: int) -> None:
        """``owned`` answers the shards this node owns now (:attr:`tjobs.firing.runner.JobRunner.owned`);
        ``grace_s`` is the compensators' (``compensator.grace_s``, the same on every node), and
        ``clock_skew_max_ms`` the clock fence's (``cluster.clock_skew_max_ms``)."""
        self._owned = owned
        self.safe_ms = int(grace_s * 1000) - 2 * clock_skew_max_ms

    def window(self, flow: Flow) -> OwnerWindow | None:
        """The window of ``flow`` as it reaches delivery here, or ``None`` when its shard is this node's."""
        if shard_of_task_id(flow.task_id) in self._owned():
            return None
        return OwnerWindow(flow.id, flow.next_attempt_at_ms, self.safe_ms)


class OwnerWindow:
    """How long the owner's compensator cannot lease one foreign flow as this node last stored it."""

    __slots__ = ("closes_ms", "flow_id", "next_closes_ms", "safe_ms")

    def __init__(self, flow_id: str, stored_next_ms: int | None, safe_ms: int) -> None:
        self.flow_id = flow_id
        self.safe_ms = safe_ms
        self.closes_ms = CLOSED_MS if stored_next_ms is None or safe_ms <= 0 else stored_next_ms + safe_ms
        self.next_closes_ms = self.closes_ms

    def retry_at(self, due_ms: int) -> None:
        """The outcome of the attempt just made is to be written ``pending`` at ``due_ms``."""
        self.next_closes_ms = due_ms + self.safe_ms if self.safe_ms > 0 else CLOSED_MS

    def written(self, now_ms: int) -> bool:
        """What this node last wrote of the flow is seen written at ``now_ms`` (the outcome of the attempt just
        made, or a park's; an at-most-once attempt's ``sending``; or nothing yet, before a first attempt): whether
        the flow may still be sent from here (the window then follows the retry's stored time); once it may not,
        it never may again."""
        if now_ms < self.closes_ms:
            self.closes_ms = self.next_closes_ms
            return True
        self.closes_ms = self.next_closes_ms = CLOSED_MS
        logger.warning(
            "flow %s of a shard this node does not own: its attempt, or its write, came after the owner's compensator"
            " could have leased it; not sent from here, left to the owner's compensator",
            self.flow_id,
            extra={"action": "retry_left_to_owner", "flow_id": self.flow_id},
        )
        return False
