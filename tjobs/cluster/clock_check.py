"""Does this node's clock agree with the database's? A node whose clock is off by more than
``cluster.clock_skew_max_ms`` fences itself (:meth:`tjobs.cluster.etcd.EtcdCoordinator.may_fire`): it
fires nothing, gives its groups up and tells the others it is unhealthy, so the plan moves its jobs.

The offset is the database's clock minus this node's, measured every ``CLOCK_CHECK_INTERVAL_S`` by
reads of the database's clock (:meth:`tjobs.stores.base.TaskStore.database_now_ms`) compared with
the midpoint of the node's clock around each; the read with the shortest round trip counts, and its
error is at most half that round trip, which is allowed for when judging. Between two reads a step
of the node's wall clock (``date -s``, an NTP step, a VM resumed) is seen at once: the wall clock
moved differently from the monotonic clock since the read, and :attr:`ClockCheck.offset_ms` moves by
that difference, with no I/O. So a clock stepped 30 s ahead is fenced at its next commit, before a
fire 30 s early could commit.

Hysteresis: out of bound past ``max_offset_ms``; back in only at half of it, so an offset near the
bound does not flap. ``max_offset_ms`` 0 disables the check (the offset is still measured and shown).

etcd is not a second reference: its responses carry no time (the header has revisions and a raft
term only), so the database is the one clock the nodes are compared with. Database reachability is
not this check's business (:class:`tjobs.cluster.db_health.DatabaseHealth`): a read that gets no
answer changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tjobs.cancellation import within
from tjobs.clock import Clock
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

CLOCK_CHECK_INTERVAL_S = 5.0
CLOCK_READ_TIMEOUT_S = 2.0
READS_PER_CHECK = 3


def _monotonic_ms() -> float:
    return time.monotonic_ns() / 1_000_000


class ClockCheck:
    def __init__(
        self,
        store: TaskStore,
        clock: Clock,
        max_offset_ms: int,
        monotonic_ms: Callable[[], float] = _monotonic_ms,
        read_timeout_s: float = CLOCK_READ_TIMEOUT_S,
    ) -> None:
        self._store = store
        self._clock = clock
        self._monotonic_ms = monotonic_ms
        self._read_timeout_s = read_timeout_s
        self.max_offset_ms = max_offset_ms
        self.measured = False  # a read of the database's clock has answered
        self.round_trip_ms = 0  # of the last read
        self._measured_offset_ms = 0
        self._wall_at_read_ms = 0.0  # the node's wall and monotonic clocks at the read's midpoint
        self._monotonic_at_read_ms = 0.0
        self._exceeded = False

    @property
    def offset_ms(self) -> int:
        """The database's clock minus this node's, now: the last read, moved by any step of the wall
        clock since (positive: this node is behind)."""
        if not self.measured:
            return 0
        wall_moved = self._clock.now_ms() - self._wall_at_read_ms
        monotonic_moved = self._monotonic_ms() - self._monotonic_at_read_ms
        return round(self._measured_offset_ms - (wall_moved - monotonic_moved))

    @property
    def ok(self) -> bool:
        """Within bound (with hysteresis); judged on the current :attr:`offset_ms`, without I/O."""
        self._judge(self.offset_ms)
        return not self._exceeded

    async def check(self) -> None:
        """Read the database's clock ``READS_PER_CHECK`` times and keep the read with the shortest round
        trip (the least error: a read slowed by a busy event loop or a new connection is outvoted); no
        answer (or a failure) changes nothing."""
        best: tuple[float, float, float, int] | None = None  # round trip, wall and monotonic midpoints, db
        for _ in range(READS_PER_CHECK):
            try:
                before_wall = self._clock.now_ms()
                before_monotonic = self._monotonic_ms()
                # within: asyncmy connects within wait_for, which can swallow a deadline (gh-86296)
                database_ms = await within(self._store.database_now_ms(), self._read_timeout_s)
                after_wall = self._clock.now_ms()
                after_monotonic = self._monotonic_ms()
            except Exception:
                break  # reachability is the health loop's business
            round_trip_ms = after_monotonic - before_monotonic
            if best is None or round_trip_ms < best[0]:
                best = (
                    round_trip_ms,
                    (before_wall + after_wall) / 2,
                    (before_monotonic + after_monotonic) / 2,
                    database_ms,
                )
        if best is None:
            return
        round_trip_ms, self._wall_at_read_ms, self._monotonic_at_read_ms, database_ms = best
        self._measured_offset_ms = round(database_ms - self._wall_at_read_ms)
        self.round_trip_ms = max(round(round_trip_ms), 0)
        self.measured = True
        self._judge(self._measured_offset_ms)

    def _judge(self, offset_ms: int) -> None:
        bound_ms = self.max_offset_ms
        if bound_ms <= 0 or not self.measured:
            exceeded = False
        elif self._exceeded:
            exceeded = abs(offset_ms) > bound_ms // 2 + self.round_trip_ms // 2
        else:
            exceeded = abs(offset_ms) > bound_ms + self.round_trip_ms // 2
        if exceeded == self._exceeded:
            return
        self._exceeded = exceeded
        if exceeded:
            logger.error(
                "CLOCK OFFSET: this node's clock is %d ms %s the database's (bound %d ms); "
                "refusing to fire and giving up my jobs until it is back within %d ms",
                abs(offset_ms),
                "behind" if offset_ms > 0 else "ahead of",
                bound_ms,
                bound_ms // 2,
                extra={"action": "clock_offset_exceeded", "offset_ms": offset_ms, "bound_ms": bound_ms},
            )
        else:
            logger.warning(
                "clock back within bound: %d ms off the database's (bound %d ms); taking jobs again",
                offset_ms,
                bound_ms,
                extra={"action": "clock_offset_recovered", "offset_ms": offset_ms, "bound_ms": bound_ms},
            )

    def describe(self) -> dict[str, object]:
        return {
            "clock_offset_ms": self.offset_ms if self.measured else None,
            "clock_offset_max_ms": self.max_offset_ms,
            "clock_offset_exceeded": not self.ok,
            "clock_round_trip_ms": self.round_trip_ms if self.measured else None,
        }
