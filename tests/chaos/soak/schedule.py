"""The soak's fault schedule: one fault every ``period_s``, cycling through the kinds, the victims taking
turns, and a quiet tail at the end so the last faults' instants settle before the run is judged.

Pure: the nemesis (:mod:`tests.chaos.soak.nemesis`) runs what this plans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

KILL = "kill"  # kill -9 of a node, restarted after the fault's duration
STOP = "stop"  # SIGSTOP of a node, SIGCONT after the duration
PARTITION = "partition"  # the node's path to database server 1 blackholed (TCP proxy), healed after
ROW_LOCK = "row_lock"  # the app's task rows on database server 1 held FOR UPDATE
CLOCK_AHEAD = "clock_ahead"  # the node's wall clock stepped +2 s (libfaketime), stepped back after
CLOCK_BEHIND = "clock_behind"  # ... -2 s
KINDS: tuple[str, ...] = (KILL, STOP, PARTITION, ROW_LOCK, CLOCK_AHEAD, CLOCK_BEHIND)
DURATIONS_S: Mapping[str, float] = {
    KILL: 8.0,  # past the 5-s lease TTL: its jobs move, then it comes back
    STOP: 10.0,  # past the lease TTL: it is fenced, then resumes
    PARTITION: 20.0,
    ROW_LOCK: 13.0,  # past innodb_lock_wait_timeout (10 s)
    CLOCK_AHEAD: 20.0,
    CLOCK_BEHIND: 20.0,
}
CLOCK_STEP_S: Mapping[str, float] = {CLOCK_AHEAD: 2.0, CLOCK_BEHIND: -2.0}
NODE_FAULTS = frozenset({KILL, STOP, PARTITION, CLOCK_AHEAD, CLOCK_BEHIND})  # a row lock has no victim node


@dataclass(frozen=True)
class PlannedFault:
    kind: str
    at_s: float  # after the soak's start
    duration_s: float
    victim_node: int | None  # None for a row lock


def fault_schedule(
    total_s: float,
    *,
    period_s: float = 60.0,
    first_at_s: float = 30.0,
    quiet_tail_s: float = 60.0,
    min_gap_s: float = 20.0,
    kinds: Sequence[str] = KINDS,
    victims: Sequence[int] = (2, 3),
    durations_s: Mapping[str, float] = DURATIONS_S,
) -> list[PlannedFault]:
    """Fault ``i`` starts at ``first_at_s + i * period_s`` and is of kind ``kinds[i % len(kinds)]``; its
    victim is ``victims[(i + i // len(kinds)) % len(victims)]`` (the turn shifts every cycle, so with an
    even number of kinds each kind still hits every victim). A fault is planned only if it ends by
    ``total_s - quiet_tail_s``. Raises ``ValueError`` when a fault would not leave ``min_gap_s`` of
    quiet before the next one starts."""
    if not kinds or not victims:
        raise ValueError("at least one fault kind and one victim")
    if period_s <= 0:
        raise ValueError("period_s must be positive")
    for kind in kinds:
        if durations_s[kind] + min_gap_s > period_s:
            raise ValueError(
                f"{kind} lasts {durations_s[kind]:g} s: a period of {period_s:g} s leaves < {min_gap_s:g} s"
            )
    planned: list[PlannedFault] = []
    index = 0
    while first_at_s + index * period_s < total_s - quiet_tail_s:
        kind = kinds[index % len(kinds)]
        at_s = first_at_s + index * period_s
        if at_s + durations_s[kind] <= total_s - quiet_tail_s:
            victim = victims[(index + index // len(kinds)) % len(victims)] if kind in NODE_FAULTS else None
            planned.append(PlannedFault(kind, at_s, durations_s[kind], victim))
        index += 1
    return planned
