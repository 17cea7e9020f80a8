"""The soak keeps, for each example of a reused attempt or a lost instant, the requests behind it
(tests/chaos/soak/evidence.py). The 2-hour soak of 2026-12-05 counted 107 reused attempts and 518 lost
instants but kept only their keys, so which node sent what could not be told afterwards."""

from __future__ import annotations

from tests.chaos.accounting import Callback, Figures, Promise, StoredFlow
from tests.chaos.soak.evidence import evidence


def send(flow_id: str, attempt: int, sender: str, at: int, delivered: bool = True) -> Callback:
    task_id, instant = (int(part) for part in flow_id.split("-"))
    return Callback(task_id, instant, flow_id, attempt, sender, at, delivered)


def test_a_reused_attempt_keeps_every_request_that_carried_it_with_its_sender_in_arrival_order() -> None:
    figures = Figures(attempt_reuse=[("7-1000", 2)])
    callbacks = [
        send("7-1000", 1, "tjobs/node1", 1100, delivered=False),
        send("7-1000", 2, "tjobs/node3", 1900),
        send("7-1000", 2, "tjobs/node1", 1500, delivered=False),
        send("8-1000", 2, "tjobs/node1", 1600),
    ]
    kept = evidence(figures, callbacks, [], limit=20)
    assert kept["attempt_reuse"] == [
        {
            "flow_id": "7-1000",
            "attempt": 2,
            "sends": [
                {"flow_id": "7-1000", "attempt": 2, "sender": "tjobs/node1", "received_ms": 1500, "delivered": False},
                {"flow_id": "7-1000", "attempt": 2, "sender": "tjobs/node3", "received_ms": 1900, "delivered": True},
            ],
        }
    ]


def test_a_lost_instant_keeps_its_requests_and_its_flow_rows() -> None:
    figures = Figures(lost=[(7, 1000)])
    callbacks = [send("7-1000", 1, "tjobs/node2", 1300, delivered=False), send("7-2000", 1, "tjobs/node2", 2100)]
    flows = [StoredFlow(7, 1000, "dead", 8, 1010), StoredFlow(7, 2000, "delivered", 1, 2010)]
    kept = evidence(figures, callbacks, flows, limit=20)
    assert kept["lost"] == [
        {
            "task_id": 7,
            "scheduled_at_ms": 1000,
            "sends": [
                {"flow_id": "7-1000", "attempt": 1, "sender": "tjobs/node2", "received_ms": 1300, "delivered": False}
            ],
            "flows": [{"status": "dead", "attempts": 8, "created_at_ms": 1010}],
        }
    ]


def test_only_the_first_limit_examples_are_kept() -> None:
    figures = Figures(lost=[(1, 10), (2, 10), (3, 10)], attempt_reuse=[("1-10", 2), ("2-10", 2)])
    kept = evidence(figures, [], [], limit=1)
    assert [e["task_id"] for e in kept["lost"]] == [1]
    assert [e["flow_id"] for e in kept["attempt_reuse"]] == ["1-10"]


def test_a_phantom_instant_keeps_its_requests_its_flow_rows_and_what_its_task_was_promised() -> None:
    # A phantom of a known task (an instant past what it may fire) and one of a task no create named
    figures = Figures(phantom=[(7, 3000), (9, 1000)])
    callbacks = [send("7-3000", 1, "tjobs/node2", 3050), send("9-1000", 1, "tjobs/node3", 1020)]
    flows = [StoredFlow(7, 3000, "delivered", 1, 3010)]
    promised = {
        7: Promise(
            7, 1, frozenset({1000}), frozenset({1000, 2000}), deleted=True, create_sent_ms=400, create_acked_ms=500
        )
    }
    kept = evidence(figures, callbacks, flows, limit=20, promises=promised)
    assert kept["phantom"] == [
        {
            "task_id": 7,
            "scheduled_at_ms": 3000,
            "sends": [
                {"flow_id": "7-3000", "attempt": 1, "sender": "tjobs/node2", "received_ms": 3050, "delivered": True}
            ],
            "flows": [{"status": "delivered", "attempts": 1, "created_at_ms": 3010}],
            "promise": {
                "must": 1,
                "may": 2,
                "may_first_ms": 1000,
                "may_last_ms": 2000,
                "deleted": True,
                "create_sent_ms": 400,
                "create_acked_ms": 500,
            },
        },
        {
            "task_id": 9,
            "scheduled_at_ms": 1000,
            "sends": [
                {"flow_id": "9-1000", "attempt": 1, "sender": "tjobs/node3", "received_ms": 1020, "delivered": True}
            ],
            "flows": [],
            "promise": None,
        },
    ]
