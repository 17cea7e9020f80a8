"""Pacing of the cycle load: its reads spread over part of its lead, so firing keeps its tail.

A cycle load reads the next cycle's tasks ``load_lead_s`` before that cycle starts (and the overdue ones):
at 2,000 fires/s and a 60-s cycle, 120,000 rows. Read as fast as the server answers, eight shards at a
time, a page of 5,000 decoded and offered to the wheel in one go, it held the event loop for tens of ms at
a time over 1-2 s, and the fires due meanwhile waited: the 10-s slices holding a load had p99 88-337 ms
against 22-104 ms outside them (docs/benchmarks.md). Paced, the load reads at most
:attr:`LoadPace.rows_per_s` (the previous cycle load's rows over ``load_spread`` of the time left before
the new cycle's first instant), and offers a page in chunks of :data:`OFFER_CHUNK` rows with a yield to
the event loop between them (:func:`offer_in_chunks`), so ticks and committers run in between.

Every reader (a shard's load, eight at a time) waits after each page it read until the rows read so far
fit the schedule: a global rate, at most eight pages in flight. No wait is made after ``finish_by_ms``
(``load_spread`` of the time left before the cycle's first instant: a load larger than expected runs
unpaced from there), none is longer than :data:`MAX_WAIT_MS`, and none before a shard's next page whose
rows may be due within :data:`URGENT_MS` (pages come in instant order, ``ORDER BY next_run_at, id``, so a
page's last instant bounds the next one's). So a load that starts ``load_lead_s`` before its cycle has
read every task before the cycle's first instant unless the server itself is slower than that, as
unpaced; it reads and offers the same rows, each page once. What pacing may delay, by at most
``finish_by_ms``: a shard's first page, whose instants are not known before it is read; in it, the
overdue tasks (already late: changes the hot tier missed) and, in a cluster (no span skipped), the
re-read of the current cycle, already in the wheel unless the hot tier lost a change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

OFFER_CHUNK = 500  # rows offered to the wheel between two yields to the event loop
PACED_PAGE_ROWS = 1000  # a paced load's page (load_page_size if smaller): shorter decodes, even reads
URGENT_MS = 2_000  # no wait before a page whose rows may be due this soon
MAX_WAIT_MS = 1_000  # the longest wait between two pages
MIN_ROWS_PER_S = 10_000.0  # the pace when the previous load read few rows (or none: the first)

Row = TypeVar("Row")


@dataclass(slots=True)
class LoadPace:
    """The schedule of one cycle load's reads, shared by its shards: the ``n``-th row read may be read
    ``n / rows_per_s`` after ``start_ms``. Pure: the time is passed in."""

    start_ms: int
    finish_by_ms: int
    rows_per_s: float
    read: int = field(default=0)  # rows read so far, every shard

    @classmethod
    def for_cycle(cls, now_ms: int, first_due_ms: int, spread: float, expected_rows: int) -> LoadPace | None:
        """The pace of a cycle load starting at ``now_ms`` whose new cycle's first instant is
        ``first_due_ms``: ``spread`` of the time left, at the rate that reads ``expected_rows`` in it
        (at least :data:`MIN_ROWS_PER_S`). ``None`` (unpaced) with ``spread`` 0 or no time left."""
        if spread <= 0 or first_due_ms <= now_ms:
            return None
        span_ms = max(1, int((first_due_ms - now_ms) * spread))
        rows_per_s = max(expected_rows * 1000 / span_ms, MIN_ROWS_PER_S)
        return cls(now_ms, now_ms + span_ms, rows_per_s)

    def wait_ms(self, rows: int, next_due_ms: int | None, now_ms: int) -> int:
        """Count a page of ``rows`` just read; how long its reader waits before reading again: until the
        rows read so far, every shard's, are due by the schedule, at most :data:`MAX_WAIT_MS`, never past
        :attr:`finish_by_ms`, and not at all when the next page's rows may be due within :data:`URGENT_MS`
        (``next_due_ms``: the page's last instant when the same shard's next page follows; ``None``
        when another shard's first page does, whose instants are not known)."""
        self.read += rows
        if now_ms >= self.finish_by_ms or (next_due_ms is not None and next_due_ms - now_ms < URGENT_MS):
            return 0
        slot_ms = self.start_ms + self.read * 1000 / self.rows_per_s
        return max(0, min(int(slot_ms - now_ms), MAX_WAIT_MS, self.finish_by_ms - now_ms))


async def offer_in_chunks(rows: Sequence[Row], offer: Callable[[Row], None], chunk: int = OFFER_CHUNK) -> None:
    """``offer`` each row in order, yielding to the event loop after every ``chunk`` rows (not after the
    last): the ticks and committers of the fire path run between chunks."""
    for start in range(0, len(rows), chunk):
        if start:
            await asyncio.sleep(0)
        for row in rows[start : start + chunk]:
            offer(row)
