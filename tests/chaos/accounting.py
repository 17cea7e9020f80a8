"""The fault suite's bookkeeping: what was promised, what arrived, what the database holds, and the counts
that judge a run. Pure (no I/O, no clock), so its rules are unit-tested on their own
(``tests/chaos/test_accounting.py``).

The promise is per acknowledged task (a create answered ``201``): the instants it **must** fire (every
occurrence of its schedule, cut at the instant a pause or delete was *sent*) and the instants it **may**
fire (cut at the instant that pause or delete was *acknowledged*; an occurrence due while the request was
in flight may go either way). Against that:

* **lost** — a must-instant without a callback answered 2xx received by the deadline;
* **duplicate flows** — a ``(task, instant)`` with more than one flow row in the database, or whose
  callbacks carried more than one distinct flow id;
* **phantom** — a callback or flow row for an instant the task may not fire (off its schedule, past its
  end, after its pause/delete was acknowledged), or for a task no create ever answered (counted only when
  every create got an answer: a create that timed out may have committed). A create answered ``503
  storage_unavailable`` is an answer (nothing was stored, so anything it fires is phantom); one answered
  ``503 storage_outcome_unknown`` names the task it may have stored, which is then *unconfirmed*: it owes
  nothing and may fire its schedule, like a task whose create was acknowledged;
* **unreadable** — an acknowledged, not deleted task that ``GET /v1/tasks/{id}`` does not answer with 200;
* **attempt reuse** — the same ``(flow id, tjobs-attempt)`` received twice: a receiver could not tell a
  re-send from the first one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Instant = tuple[int, int]  # (task id, scheduled instant in epoch ms)


@dataclass(frozen=True)
class Promise:
    """What one acknowledged task owes: ``must`` ⊆ ``may`` (instants, epoch ms)."""

    task_id: int
    server: int  # the MariaDB server (index into the storage URLs) holding its shard
    must: frozenset[int]
    may: frozenset[int]
    deleted: bool = False
    create_sent_ms: int = 0
    create_acked_ms: int = 0  # an instant due before this measures the create path, not firing

    def __post_init__(self) -> None:
        if not self.must <= self.may:
            raise ValueError(f"task {self.task_id}: must-instants outside its may-instants")


@dataclass(frozen=True)
class Callback:
    """One request the receiver got (attempt and flow id as sent; ``delivered``: it answered 2xx)."""

    task_id: int
    scheduled_at_ms: int
    flow_id: str
    attempt: int
    sender: str  # the sending node's User-Agent
    received_ms: int
    delivered: bool


@dataclass(frozen=True)
class StoredFlow:
    """One flow row read back from the database."""

    task_id: int
    scheduled_at_ms: int
    status: str
    attempts: int
    created_at_ms: int


@dataclass
class Figures:
    expected: int = 0  # must-instants over all promises
    delivered: int = 0  # must-instants delivered by the deadline
    lost: list[Instant] = field(default_factory=list)
    duplicate_flows: list[Instant] = field(default_factory=list)
    phantom: list[Instant] = field(default_factory=list)
    unreadable: list[int] = field(default_factory=list)
    attempt_reuse: list[tuple[str, int]] = field(default_factory=list)
    unknown_task_callbacks: int = 0  # callbacks of tasks no 201 named (phantom unless a create went unanswered)
    # per delivered must-instant: first request received - instant, and first 2xx received - instant (ms)
    first_send_late_ms: dict[Instant, int] = field(default_factory=dict)
    delivered_late_ms: dict[Instant, int] = field(default_factory=dict)


def account(
    promises: Mapping[int, Promise],
    callbacks: Iterable[Callback],
    flows: Iterable[StoredFlow],
    *,
    deadline_ms: int,
    unreadable: Sequence[int] = (),
    unanswered_creates: int = 0,
    unconfirmed: Mapping[int, Promise] | None = None,
) -> Figures:
    """Judge one run. ``deadline_ms``: a must-instant counts as delivered only if a 2xx reply to one of its
    callbacks was received by then. ``unconfirmed``: the tasks creates may have stored without
    acknowledging them (``must`` empty): their fires are judged by their ``may`` alone."""
    unconfirmed = unconfirmed or {}
    figures = Figures(unreadable=sorted(unreadable))
    first_send: dict[Instant, int] = {}
    first_delivered: dict[Instant, int] = {}
    flow_ids: dict[Instant, set[str]] = defaultdict(set)
    attempts_seen: dict[tuple[str, int], int] = defaultdict(int)
    phantom: set[Instant] = set()
    for callback in callbacks:
        key = (callback.task_id, callback.scheduled_at_ms)
        attempts_seen[(callback.flow_id, callback.attempt)] += 1
        promise = promises.get(callback.task_id) or unconfirmed.get(callback.task_id)
        if promise is None:
            figures.unknown_task_callbacks += 1
            if unanswered_creates == 0:
                phantom.add(key)
            continue
        if callback.scheduled_at_ms not in promise.may:
            phantom.add(key)
        flow_ids[key].add(callback.flow_id)
        first_send[key] = min(first_send.get(key, callback.received_ms), callback.received_ms)
        if callback.delivered and callback.received_ms <= deadline_ms:
            first_delivered[key] = min(first_delivered.get(key, callback.received_ms), callback.received_ms)
    rows: dict[Instant, int] = defaultdict(int)
    for flow in flows:
        key = (flow.task_id, flow.scheduled_at_ms)
        rows[key] += 1
        promise = promises.get(flow.task_id) or unconfirmed.get(flow.task_id)
        if promise is not None and flow.scheduled_at_ms not in promise.may:
            phantom.add(key)
    duplicates = {key for key, count in rows.items() if count > 1}
    duplicates |= {key for key, ids in flow_ids.items() if len(ids) > 1}
    for promise in promises.values():
        for instant in promise.must:
            key = (promise.task_id, instant)
            figures.expected += 1
            if key in first_delivered:
                figures.delivered += 1
                figures.delivered_late_ms[key] = first_delivered[key] - instant
                figures.first_send_late_ms[key] = first_send[key] - instant
            else:
                figures.lost.append(key)
    figures.lost.sort()
    figures.duplicate_flows = sorted(duplicates)
    figures.phantom = sorted(phantom)
    figures.attempt_reuse = sorted(key for key, count in attempts_seen.items() if count > 1)
    return figures


def select(
    late_ms: Mapping[Instant, int],
    promises: Mapping[int, Promise],
    *,
    servers: set[int] | None = None,
    tasks: set[int] | None = None,
    due_from_ms: int | None = None,
    due_until_ms: int | None = None,
) -> list[int]:
    """The lateness values (ms) of instants matching every given filter: task on one of ``servers``, task in
    ``tasks``, instant in ``[due_from_ms, due_until_ms]``; never an instant due before its task's create
    was acknowledged (that lateness is the create's)."""
    chosen = []
    for (task_id, instant), late in late_ms.items():
        promise = promises[task_id]
        if instant < promise.create_acked_ms:
            continue
        if servers is not None and promise.server not in servers:
            continue
        if tasks is not None and task_id not in tasks:
            continue
        if due_from_ms is not None and instant < due_from_ms:
            continue
        if due_until_ms is not None and instant > due_until_ms:
            continue
        chosen.append(late)
    return chosen


def percentile(values: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile (``fraction`` in (0, 1]); 0 for no values."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def stale_sends(
    callbacks: Iterable[Callback],
    flows: Iterable[StoredFlow],
    *,
    sender: str,
    stopped_ms: int,
    resumed_ms: int,
    owns_again_ms: int | None = None,
    grace_ms: int = 200,
) -> list[Callback]:
    """Requests ``sender`` (a node frozen from ``stopped_ms`` to ``resumed_ms``, whose lease expired
    meanwhile) sent after it resumed and before it held jobs again (``owns_again_ms``; ``None``: never),
    for flows committed before it froze: a node whose lease expired must stop sending what it held. Once
    it owns jobs again, its compensator may rightly re-drive them."""
    committed_before = {(f.task_id, f.scheduled_at_ms) for f in flows if f.created_at_ms <= stopped_ms}
    until_ms = owns_again_ms if owns_again_ms is not None else math.inf
    return [
        c
        for c in callbacks
        if c.sender == sender
        and resumed_ms + grace_ms < c.received_ms < until_ms
        and (c.task_id, c.scheduled_at_ms) in committed_before
    ]
