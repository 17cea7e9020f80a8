"""The schedule contract: pure functions from an instant to the task's next occurrence.

A schedule never reads the clock; every method takes the instant it reasons from. Instants are UTC
epoch milliseconds. A schedule knows its own bounds (``start_at_ms`` / ``end_at_ms``) but not how many
times its task has fired: ``max_fires`` is carried for the fire planner, which holds the count.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from tjobs.model import ScheduleKind


class Schedule(ABC):
    __slots__ = ()

    kind: ScheduleKind
    max_fires: int | None = None

    @abstractmethod
    def next_fire(self, after_ms: int) -> int | None:
        """The first occurrence strictly after ``after_ms`` within the bounds; ``None`` if there is none.

        Successive calls ``t1 = next_fire(t0)``, ``t2 = next_fire(t1)``, ... enumerate every occurrence
        once, in strictly increasing order.
        """

    @abstractmethod
    def first_fire(self, now_ms: int) -> int | None:
        """Where a newly registered (or resumed) task starts.

        One-shot kinds return their instant even if it is already past (validation decides whether
        that is acceptable); recurring kinds return their first occurrence at or after ``now_ms``.
        """

    def occurrences_between(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        """Occurrences in ``(after_ms, until_ms]``, oldest first, at most ``limit`` of them."""
        found: list[int] = []
        cursor = after_ms
        while len(found) < limit:
            nxt = self.next_fire(cursor)
            if nxt is None or nxt > until_ms:
                break
            found.append(nxt)
            cursor = nxt
        return found
