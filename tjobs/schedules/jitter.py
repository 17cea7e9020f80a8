"""Jitter: each occurrence of a recurring schedule fires a reproducible offset after its nominal instant.

A schedule with ``jitter_ms`` = J fires its nominal instant ``n`` (the cron's or interval's own) at

    jittered(n) = n + min(h(seed, n) mod (J + 1), next(n) - n - 1)

where ``h`` is BLAKE2b of the seed (the task id) and ``n``, and ``next(n)`` the nominal instant after
``n`` (no cap for the last one). So the offset lies in ``[0, J]``, never moves a fire earlier than its
nominal instant, is the same on every node and after every restart, and the jittered instants keep the
nominal ones' order: ``n <= jittered(n) < next(n)``. Validation keeps J within the schedule's period, so
the cap is only a guard (a DST repeat can bring two cron instants closer than the sampled period).

The task's ``next_run_at`` holds the jittered instant (the wheel, the loads and the hot tier place it as
any other), and the fire planner maps it back to its nominal instant with :meth:`nominal_of` (the latest
nominal instant at or before it, unique because of the order above): the flow is keyed by
``(task_id, nominal instant)``, so the idempotency key and ``tjobs-scheduled-at`` a receiver sees are
the nominal instant, and jitter neither adds a flow nor skips an instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from hashlib import blake2b

from tjobs.model import ScheduleKind
from tjobs.schedules.base import Schedule


def jitter_offset_ms(seed: int, nominal_ms: int, jitter_ms: int) -> int:
    """The uncapped offset in ``[0, jitter_ms]`` of the occurrence at ``nominal_ms`` (pure, reproducible)."""
    if jitter_ms <= 0:
        return 0
    digest = blake2b(f"{seed}:{nominal_ms}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter_ms + 1)


@dataclass(frozen=True, slots=True)
class JitteredSchedule(Schedule):
    """``kept``'s occurrences (``base``'s, less those a calendar excludes; default all of them), each
    moved to its jittered instant (see the module docs). The cap and the way back to the nominal
    instant read ``base``, so they do not depend on the calendar: a jittered instant lies before the
    next of ``base``'s instants whatever the calendar says, now or later."""

    base: Schedule
    jitter_ms: int
    seed: int
    kept: Schedule | None = None
    kind: ScheduleKind = field(init=False)
    max_fires: int | None = field(init=False)

    def __post_init__(self) -> None:
        if self.jitter_ms < 0:
            raise ValueError("jitter_ms must not be negative")
        object.__setattr__(self, "kind", self.base.kind)
        object.__setattr__(self, "max_fires", self.base.max_fires)

    def jittered(self, nominal_ms: int) -> int:
        """Where the occurrence at ``nominal_ms`` (one of ``base``'s) fires."""
        offset = jitter_offset_ms(self.seed, nominal_ms, self.jitter_ms)
        if offset:
            following = self.base.next_fire(nominal_ms)
            if following is not None:
                offset = min(offset, following - nominal_ms - 1)
        return nominal_ms + offset

    def nominal_of(self, instant_ms: int) -> int:
        """The nominal instant of a jittered one: the latest of ``base``'s at or before it (the instant
        itself when there is none within ``jitter_ms``, as for a row stored before jitter was set)."""
        found = self._floor(instant_ms)
        return instant_ms if found is None else found

    def next_fire(self, after_ms: int) -> int | None:
        latest = self._floor(after_ms)
        if latest is not None and self.jittered(latest) > after_ms and self._fires(latest):
            return self.jittered(latest)
        following = (self.kept or self.base).next_fire(after_ms)
        return None if following is None else self.jittered(following)

    def first_fire(self, now_ms: int) -> int | None:
        first = (self.kept or self.base).first_fire(now_ms)
        return None if first is None else self.jittered(first)

    def _fires(self, nominal_ms: int) -> bool:
        return self.kept is None or self.kept.next_fire(nominal_ms - 1) == nominal_ms

    def _floor(self, instant_ms: int) -> int | None:
        """The latest of ``base``'s instants in ``[instant_ms - jitter_ms, instant_ms]``, if any (the
        only ones whose jittered instant can reach ``instant_ms``)."""
        found = self.base.next_fire(instant_ms - self.jitter_ms - 1)
        if found is None or found > instant_ms:
            return None
        following = self.base.next_fire(found)
        while following is not None and following <= instant_ms:
            found, following = following, self.base.next_fire(following)
        return found
