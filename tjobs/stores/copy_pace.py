"""How hard a shard move's copy and catch-up may work the servers (``tjobs shards move --copy-duty``,
``--max-rows-per-s``): after each batch the copy rests, so that it keeps the servers busy at most
``duty`` of the time and, if capped, copies at most ``max_rows_per_s``.

**Why a duty cycle by default, not a rows-per-second limit.** An unpaced copy is one statement after
another on both servers, and on a small machine it takes the CPU the fire path needs (docs/benchmarks.md,
"Moving a logical database under load"). A rest in proportion to the batch's own time bounds the share
of the servers' time the copy takes whatever the machine, the rows' width or the other load, where a
fixed rows-per-second figure is too slow on a big server and too fast on a busy small one. And it backs
off by itself: when the servers are busy with firing, the batch's statements take longer, so its rest
does too. The cap is for operators who want the move's length (rows / cap) known in advance.

The pace applies to the bulk copy and to the catch-up before the cut-over, never to the cut-over's
last catch-up (writes to the database are refused then: it runs as fast as it can).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_COPY_DUTY = 0.25
"""The share of the time the copy keeps the servers busy (``--copy-duty``'s default); measured in
docs/benchmarks.md, "Moving a logical database under load"."""


@dataclass(frozen=True, slots=True)
class CopyPace:
    duty: float = DEFAULT_COPY_DUTY  # the share of the time spent copying, (0, 1]; 1 never rests
    max_rows_per_s: int | None = None  # copy no faster than this (None: no cap)

    def __post_init__(self) -> None:
        if not 0 < self.duty <= 1:  # NaN fails it too
            raise ValueError(
                f"--copy-duty must be above 0 and at most 1 (the share of the time spent copying), not {self.duty}"
            )
        if self.max_rows_per_s is not None and self.max_rows_per_s < 1:
            raise ValueError(f"--max-rows-per-s must be at least 1 (or left out: no cap), not {self.max_rows_per_s}")

    @property
    def unpaced(self) -> bool:
        return self.duty == 1 and self.max_rows_per_s is None

    def rest_s(self, rows: int, busy_s: float) -> float:
        """How long to rest after a batch of ``rows`` that took ``busy_s`` seconds."""
        rest = busy_s * (1 - self.duty) / self.duty
        if self.max_rows_per_s is not None:
            rest = max(rest, rows / self.max_rows_per_s - busy_s)
        return max(0.0, rest) if math.isfinite(rest) else 0.0


UNPACED = CopyPace(duty=1.0)
"""Copy as fast as the servers answer (the cut-over's last catch-up, and ``--copy-duty 1``)."""
