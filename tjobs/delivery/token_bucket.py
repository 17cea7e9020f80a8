"""One token bucket, kept as GCRA virtual scheduling (the theoretical arrival time of the next token).

A bucket refills at ``rate_per_s`` and holds ``burst_s`` seconds of tokens (at least one). Two ways to
take from it:

- :meth:`TokenBucket.reserve` always takes one token and answers how long the caller must wait for it
  (callers that queue: the callback limiter; reservations are served in arrival order);
- :meth:`TokenBucket.take` takes ``cost`` tokens only if the bucket holds them now, else takes nothing
  and answers how long until it would (callers that refuse: the API's 429 with ``Retry-After``). A cost
  above the bucket's size is admitted when the bucket is full and leaves it in debt for the rest, so a
  large batch is never refused forever.

A rate of 0 or infinity means unlimited. Time is passed in (seconds on a monotonic clock).
"""

from __future__ import annotations

import math


class TokenBucket:
    __slots__ = ("burst", "interval_s", "rate_per_s", "tat", "tolerance_s")

    def __init__(self, rate_per_s: float, burst_s: float) -> None:
        self.rate_per_s = 0.0
        self.interval_s = 0.0
        self.tolerance_s = 0.0
        self.burst = 1.0
        self.tat = 0.0
        self.set_rate(rate_per_s, burst_s)

    @property
    def unlimited(self) -> bool:
        return self.interval_s == 0.0

    def set_rate(self, rate_per_s: float, burst_s: float) -> None:
        self.rate_per_s = rate_per_s
        if rate_per_s <= 0 or math.isinf(rate_per_s):
            self.interval_s = 0.0
            self.tolerance_s = 0.0
            return
        self.interval_s = 1.0 / rate_per_s
        self.burst = max(1.0, rate_per_s * burst_s)
        self.tolerance_s = (self.burst - 1.0) * self.interval_s

    def reserve(self, now_s: float) -> float:
        """Take the next token; return how long the caller must wait for it (0 if none)."""
        if self.interval_s == 0.0:
            return 0.0
        start = self.tat if self.tat > now_s else now_s
        self.tat = start + self.interval_s
        delay = start - now_s - self.tolerance_s
        return delay if delay > 0.0 else 0.0

    def take(self, now_s: float, cost: float = 1.0) -> float:
        """Take ``cost`` tokens if they are there (answer 0), else take none and answer the wait in s."""
        if self.interval_s == 0.0:
            return 0.0
        start = self.tat if self.tat > now_s else now_s
        admitted_cost = cost if cost < self.burst else self.burst
        wait_s = start + (admitted_cost - 1.0) * self.interval_s - now_s - self.tolerance_s
        if wait_s > 1e-9:
            return wait_s
        self.tat = start + cost * self.interval_s
        return 0.0

    def would_take(self, now_s: float) -> bool:
        """Whether :meth:`take` of one token would take it now (nothing is taken)."""
        if self.interval_s == 0.0:
            return True
        start = self.tat if self.tat > now_s else now_s
        return start - now_s - self.tolerance_s <= 1e-9

    def give_back(self, cost: float = 1.0) -> None:
        """Return tokens taken for work that turned out not to count (never beyond a full bucket)."""
        self.tat -= cost * self.interval_s
