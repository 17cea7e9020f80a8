"""What the soak keeps of a failing count's examples, so a run can be explained afterwards without its
in-memory callbacks: for a reused attempt, every request that carried it (which node sent it, when it
arrived, whether the receiver answered 2xx); for a lost instant, every request of it and its stored flow
rows; for a phantom one, the same and what its task was promised (none: a task no create named). Pure
(``tests/unit/test_soak_evidence.py``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tests.chaos.accounting import Callback, Figures, Promise, StoredFlow


def _send(callback: Callback) -> dict[str, Any]:
    return {
        "flow_id": callback.flow_id,
        "attempt": callback.attempt,
        "sender": callback.sender,
        "received_ms": callback.received_ms,
        "delivered": callback.delivered,
    }


def _by_arrival(sends: list[Callback]) -> list[Callback]:
    return sorted(sends, key=lambda callback: callback.received_ms)


def _promised(promise: Promise | None) -> dict[str, Any] | None:
    if promise is None:
        return None
    return {
        "must": len(promise.must),
        "may": len(promise.may),
        "may_first_ms": min(promise.may, default=None),
        "may_last_ms": max(promise.may, default=None),
        "deleted": promise.deleted,
        "create_sent_ms": promise.create_sent_ms,
        "create_acked_ms": promise.create_acked_ms,
    }


def evidence(
    figures: Figures,
    callbacks: Iterable[Callback],
    flows: Iterable[StoredFlow],
    limit: int,
    promises: Mapping[int, Promise] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The first ``limit`` reused attempts, lost instants and phantom instants of ``figures``, each with its
    requests (in arrival order); a lost or phantom one with its flow rows, a phantom one with what its task
    was promised in ``promises`` (the acknowledged and the unconfirmed tasks)."""
    promises = promises or {}
    reused: Sequence[tuple[str, int]] = figures.attempt_reuse[:limit]
    lost = figures.lost[:limit]
    phantom = figures.phantom[:limit]
    wanted_reuse = set(reused)
    wanted_lost = set(lost) | set(phantom)
    sends_by_attempt: dict[tuple[str, int], list[Callback]] = defaultdict(list)
    sends_by_instant: dict[tuple[int, int], list[Callback]] = defaultdict(list)
    for callback in callbacks:
        if (callback.flow_id, callback.attempt) in wanted_reuse:
            sends_by_attempt[(callback.flow_id, callback.attempt)].append(callback)
        if (callback.task_id, callback.scheduled_at_ms) in wanted_lost:
            sends_by_instant[(callback.task_id, callback.scheduled_at_ms)].append(callback)
    rows: dict[tuple[int, int], list[StoredFlow]] = defaultdict(list)
    for flow in flows:
        if (flow.task_id, flow.scheduled_at_ms) in wanted_lost:
            rows[(flow.task_id, flow.scheduled_at_ms)].append(flow)

    def instant(task_id: int, at_ms: int) -> dict[str, Any]:
        return {
            "task_id": task_id,
            "scheduled_at_ms": at_ms,
            "sends": [_send(c) for c in _by_arrival(sends_by_instant[(task_id, at_ms)])],
            "flows": [
                {"status": f.status, "attempts": f.attempts, "created_at_ms": f.created_at_ms}
                for f in rows[(task_id, at_ms)]
            ],
        }

    return {
        "attempt_reuse": [
            {"flow_id": flow_id, "attempt": attempt, "sends": [_send(c) for c in _by_arrival(sends_by_attempt[key])]}
            for key in reused
            for flow_id, attempt in [key]
        ],
        "lost": [instant(task_id, at_ms) for task_id, at_ms in lost],
        "phantom": [
            {**instant(task_id, at_ms), "promise": _promised(promises.get(task_id))} for task_id, at_ms in phantom
        ],
    }
