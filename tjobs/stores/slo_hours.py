"""Which minutes of a service-level sum are read from the per-hour sums, and which from the minutes.

Every node adds each minute's counts to its row of that minute and to its row of the minute's hour, in
one transaction (:meth:`tjobs.stores.base.TaskStore.add_slo_minutes`), and retention drops whole hours
(minutes and hour rows alike), so an hour row always holds the sum of its stored minutes. A range of
minutes that covers at least one whole hour is therefore read as its whole hours from the hour rows and
the minutes before the first and after the last whole hour (at most 59 at each end) from the minute
rows: the same counts. A week for every app reads 168 hour rows and at most 118 minute rows per app and
node instead of 10,080 minute rows.
"""

from __future__ import annotations

from dataclasses import dataclass

MINUTES_PER_HOUR = 60


@dataclass(frozen=True, slots=True)
class HourSplit:
    """Whole hours ``[from_hour, to_hour)`` and the minute ranges ``[start, end)`` at the edges (none empty)."""

    from_hour: int
    to_hour: int
    edges: tuple[tuple[int, int], ...]


def split_by_hours(from_minute: int, to_minute: int) -> HourSplit | None:
    """How to read minutes ``[from_minute, to_minute)``; ``None`` when they hold no whole hour (read
    them all from the minutes)."""
    from_hour = -(-from_minute // MINUTES_PER_HOUR)
    to_hour = to_minute // MINUTES_PER_HOUR
    if to_hour <= from_hour:
        return None
    edges = (
        (from_minute, from_hour * MINUTES_PER_HOUR),
        (to_hour * MINUTES_PER_HOUR, to_minute),
    )
    return HourSplit(from_hour, to_hour, tuple((start, end) for start, end in edges if start < end))


def hour_of(minute: int) -> int:
    return minute // MINUTES_PER_HOUR


def purge_cutoff_hour(before_minute: int) -> int:
    """Retention drops the hours wholly before ``before_minute``: those before this hour."""
    return before_minute // MINUTES_PER_HOUR
