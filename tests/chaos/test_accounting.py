"""The fault suite's judge, on hand-made runs: each count catches what it names, and only that."""

from __future__ import annotations

import pytest

from tests.chaos.accounting import Callback, Promise, StoredFlow, account, percentile, select, stale_sends
from tests.chaos.scenario import LONG, FaultWindow, Outcome
from tests.chaos.workload import STOP_RACE_MS, Registered, create_answer

T1, T2 = 101, 202


def promise(task_id: int, *instants: int, server: int = 0) -> Promise:
    return Promise(task_id, server, frozenset(instants), frozenset(instants))


def sent(
    task_id: int,
    instant: int,
    received_ms: int,
    *,
    attempt: int = 1,
    delivered: bool = True,
    flow_id: str | None = None,
    sender: str = "n1",
) -> Callback:
    return Callback(task_id, instant, flow_id or f"{task_id}-{instant}", attempt, sender, received_ms, delivered)


def stored(task_id: int, instant: int, created_at_ms: int = 0) -> StoredFlow:
    return StoredFlow(task_id, instant, "delivered", 1, created_at_ms)


def test_every_instant_delivered_once_counts_nothing_and_measures_lateness() -> None:
    owed = {T1: promise(T1, 1000, 2000), T2: promise(T2, 1000, server=1)}
    calls = [sent(T1, 1000, 1040), sent(T1, 2000, 2500), sent(T2, 1000, 1010)]
    figures = account(owed, calls, [stored(T1, 1000), stored(T1, 2000), stored(T2, 1000)], deadline_ms=9999)
    assert (figures.expected, figures.delivered) == (3, 3)
    assert figures.lost == figures.duplicate_flows == figures.phantom == []
    assert figures.attempt_reuse == []
    assert figures.delivered_late_ms == {(T1, 1000): 40, (T1, 2000): 500, (T2, 1000): 10}
    assert select(figures.delivered_late_ms, owed, servers={0}) == [40, 500]


def test_an_instant_never_answered_2xx_or_answered_after_the_deadline_is_lost() -> None:
    owed = {T1: promise(T1, 1000, 2000, 3000)}
    calls = [sent(T1, 1000, 1100), sent(T1, 2000, 2100, delivered=False), sent(T1, 3000, 9000)]
    figures = account(owed, calls, [], deadline_ms=5000)
    assert figures.lost == [(T1, 2000), (T1, 3000)]
    assert figures.delivered == 1


def test_a_retry_that_succeeds_delivers_and_the_first_send_sets_the_send_lateness() -> None:
    owed = {T1: promise(T1, 1000)}
    calls = [sent(T1, 1000, 1050, delivered=False), sent(T1, 1000, 1400, attempt=2)]
    figures = account(owed, calls, [stored(T1, 1000)], deadline_ms=5000)
    assert figures.lost == [] and figures.attempt_reuse == []
    assert figures.first_send_late_ms[(T1, 1000)] == 50 and figures.delivered_late_ms[(T1, 1000)] == 400


def test_two_flow_rows_or_two_flow_ids_for_one_instant_are_duplicate_flows() -> None:
    owed = {T1: promise(T1, 1000, 2000)}
    calls = [sent(T1, 1000, 1100), sent(T1, 2000, 2100), sent(T1, 2000, 2200, flow_id="other")]
    figures = account(owed, calls, [stored(T1, 1000), stored(T1, 1000)], deadline_ms=9999)
    assert figures.duplicate_flows == [(T1, 1000), (T1, 2000)]


def test_a_second_2xx_of_the_same_flow_is_not_a_duplicate_flow() -> None:
    owed = {T1: promise(T1, 1000)}
    calls = [sent(T1, 1000, 1100), sent(T1, 1000, 4100, attempt=2)]
    assert account(owed, calls, [stored(T1, 1000)], deadline_ms=9999).duplicate_flows == []


def test_the_same_attempt_number_sent_twice_is_attempt_reuse() -> None:
    owed = {T1: promise(T1, 1000)}
    calls = [sent(T1, 1000, 1100), sent(T1, 1000, 4100)]
    assert account(owed, calls, [], deadline_ms=9999).attempt_reuse == [(f"{T1}-1000", 1)]


def test_an_instant_off_the_schedule_or_after_an_acknowledged_pause_is_phantom() -> None:
    paused = Registered(T1, [1000, 2000, 3000, 4000], stop_sent_ms=2100 + STOP_RACE_MS, stop_acked_ms=3500)
    assert paused.promise(0).must == {1000, 2000} and paused.promise(0).may == {1000, 2000, 3000}
    paused.stop_sent_ms, paused.stop_acked_ms = 1500 + STOP_RACE_MS, 2500
    assert paused.promise(0).must == {1000} and paused.promise(0).may == {1000, 2000}
    owed = {T1: paused.promise(0), T2: promise(T2, 1000)}
    calls = [sent(T1, 1000, 1010), sent(T1, 2000, 2010), sent(T1, 3000, 3010), sent(T2, 1500, 1510)]
    figures = account(owed, calls, [stored(T2, 1700)], deadline_ms=9999)
    assert figures.phantom == [(T1, 3000), (T2, 1500), (T2, 1700)]
    assert figures.lost == [(T2, 1000)]


def test_a_recurring_task_owes_the_instants_from_its_acknowledgement_and_may_fire_those_from_its_send() -> None:
    slow = Registered(T1, [1000, 2000, 3000, 4000], create_sent_ms=1500, create_acked_ms=3000).promise(0)
    assert slow.must == {3000, 4000} and slow.may == {2000, 3000, 4000}
    late_one_shot = Registered(T2, [1000], create_sent_ms=900, create_acked_ms=1500, recurring=False).promise(0)
    assert late_one_shot.must == {1000}


def test_lateness_leaves_out_instants_due_before_the_create_was_acknowledged() -> None:
    owed = {T1: Promise(T1, 0, frozenset({1000, 2000}), frozenset({1000, 2000}), create_acked_ms=1500)}
    figures = account(owed, [sent(T1, 1000, 1600), sent(T1, 2000, 2050)], [], deadline_ms=9999)
    assert select(figures.first_send_late_ms, owed) == [50]


def test_a_callback_of_an_unknown_task_is_phantom_unless_a_create_went_unanswered() -> None:
    calls = [sent(999, 1000, 1010)]
    assert account({}, calls, [], deadline_ms=9999).phantom == [(999, 1000)]
    lenient = account({}, calls, [], deadline_ms=9999, unanswered_creates=1)
    assert lenient.phantom == [] and lenient.unknown_task_callbacks == 1


def test_a_task_a_create_may_have_stored_owes_nothing_and_may_fire_only_its_schedule() -> None:
    # Given a create answered 503 storage_outcome_unknown, naming task T2, and every create answered
    maybe = Registered(T2, [1000, 2000], create_sent_ms=900, create_acked_ms=6000, acknowledged=False).promise(1)
    assert maybe.must == frozenset() and maybe.may == {1000, 2000}
    calls = [sent(T2, 1000, 1010), sent(T2, 1500, 1510), sent(999, 1000, 1010)]
    figures = account({}, calls, [stored(T2, 1000)], deadline_ms=9999, unconfirmed={T2: maybe})
    # Then its fires on schedule are fine, off schedule phantom, and another unknown task's still phantom
    assert figures.phantom == [(T2, 1500), (999, 1000)]
    assert figures.expected == 0 and figures.lost == [] and figures.unknown_task_callbacks == 1


@pytest.mark.parametrize(
    ("status", "body", "answer"),
    [
        (201, {"id": "77"}, ("acknowledged", 77)),
        (503, {"error": {"code": "storage_unavailable", "message": "m"}}, ("unavailable", None)),
        (
            503,
            {
                "error": {
                    "code": "storage_outcome_unknown",
                    "message": "m",
                    "details": {"stored": "unknown", "task_id": "77"},
                }
            },
            ("unconfirmed", 77),
        ),
        (503, {"error": {"code": "shard_moving", "message": "m"}}, ("unanswered", None)),
        (503, None, ("unanswered", None)),
        (500, {"error": {"code": "internal", "message": "m"}}, ("unanswered", None)),
        (429, {"error": {"code": "rate_limited", "message": "m"}}, ("refused", None)),
        (422, {"error": {"code": "invalid_input", "message": "m"}}, ("refused", None)),
    ],
)
def test_a_create_answer_promises_only_what_it_says(status: int, body: object, answer: tuple[str, int | None]) -> None:
    assert create_answer(status, body) == answer


def test_unreadable_tasks_are_reported() -> None:
    assert account({}, [], [], deadline_ms=0, unreadable=[7, 3]).unreadable == [3, 7]


def test_a_promise_must_not_owe_what_it_may_not_fire() -> None:
    with pytest.raises(ValueError):
        Promise(T1, 0, frozenset({1}), frozenset())


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.99) == 0
    assert percentile(list(range(1, 101)), 0.99) == 99
    assert percentile([5, 1, 9], 0.5) == 5


def test_stale_sends_are_the_frozen_nodes_requests_after_it_resumed_for_flows_committed_before() -> None:
    flows = [stored(T1, 1000, created_at_ms=900), stored(T1, 6000, created_at_ms=6000)]
    calls = [
        sent(T1, 1000, 950, sender="n2"),  # before the freeze
        sent(T1, 1000, 12_000, sender="n2", attempt=2),  # after it resumed: stale
        sent(T1, 1000, 12_000, sender="n1", attempt=3),  # the new owner's re-drive
        sent(T1, 6000, 12_000, sender="n2"),  # committed after the freeze began: not the frozen node's
    ]
    assert stale_sends(calls, flows, sender="n2", stopped_ms=1000, resumed_ms=11_000) == [calls[1]]
    owning = stale_sends(calls, flows, sender="n2", stopped_ms=1000, resumed_ms=11_000, owns_again_ms=11_500)
    assert owning == [], "once it holds jobs again its re-drives are its own"


def test_the_figure_line_names_the_latest_instant_its_task_commit_and_sender() -> None:
    owed = {T1: promise(T1, 11_000), T2: promise(T2, 12_000, 13_000, server=1)}
    calls = [sent(T1, 11_000, 11_040), sent(T2, 12_000, 45_500, sender="tjobs-rig/node2"), sent(T2, 13_000, 13_020)]
    flows = [stored(T1, 11_000, 11_030), stored(T2, 12_000, 45_400), stored(T2, 13_000, 13_010)]
    figures = account(owed, calls, flows, deadline_ms=99_000)
    window = FaultWindow("etcd kill -9 7s", start_ms=10_000, end_ms=18_000)
    outcome = Outcome(LONG, window, figures, owed, calls, flows, deadline_ms=99_000, load=(0.0, 0.0, 0.0))
    line = outcome.latest_instant()
    assert line.startswith(f"latest=33500ms task {T2} ")
    assert "server 1 interval due fault+2000ms acked fault-10000ms" in line
    assert line.endswith("flow committed fault+35400ms sent by node2")
    assert line in outcome.summary()
