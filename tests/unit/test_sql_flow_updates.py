"""The MariaDB outcome writer's statements (tjobs/stores/sql_flow_updates.py), built without a server:
outcomes that each carry their own attempt history still share one UPDATE per shard table (each row's
values picked by CASE on its key), and the statement never matches a key it was not given. What the
statements do on a server is the store contract's (tests/contract)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tjobs.model import AttemptLog, AttemptRecord, FlowRun, FlowStatus, FlowUpdate, Reschedule, RunStatus
from tjobs.stores.sql_flow_updates import takes_simultaneous_assignment, update_statements

NOW_MS = 1_800_000_000_000
URL = "http://receiver.example/hook"


class _Shard:
    def __init__(self, shard: int) -> None:
        self.flows_sql = f"`db`.`flows_{shard:02d}`"


SHARDS: Any = [_Shard(n) for n in range(4)]


def _log(task_id: int) -> AttemptLog:
    return AttemptLog((AttemptRecord(1, NOW_MS + task_id, task_id % 7, 200, None, URL),), 1)


def test_outcomes_with_their_own_histories_share_one_update_per_shard_table() -> None:
    by_shard = {
        2: [FlowUpdate(t, NOW_MS, FlowStatus.DELIVERED, 1, None, 200, None, None, _log(t)) for t in (30, 10, 20)],
        0: [
            FlowUpdate(5, NOW_MS, FlowStatus.DELIVERED, 1, None, 200, None, None, _log(5)),
            FlowUpdate(6, NOW_MS, FlowStatus.PENDING, 2, NOW_MS + 500, 503, "busy", None, _log(6)),
            FlowUpdate(7, NOW_MS, FlowStatus.DEAD, 3, None, None, "refused", None, None),
        ],
    }
    statements = update_statements(by_shard, SHARDS, NOW_MS + 50)

    assert [sql.split(" SET ")[0] for sql, _ in statements] == ["UPDATE `db`.`flows_00`", "UPDATE `db`.`flows_02`"]
    for sql, params in statements:
        assert sql.count("UPDATE ") == 1 and sql.count("%s") == len(params)
    delivered_only, params = statements[1]
    for task_id in (10, 20, 30):  # each row's own history, in the one statement
        text = next(p for p in params if isinstance(p, str) and f"{NOW_MS + task_id}" in p)
        assert '"total":1' in text
    # keys in order (rows locked in the same order by every writer), and only those keys
    assert "(task_id, scheduled_at) IN ((%s, %s), (%s, %s), (%s, %s))" in delivered_only
    assert params[-6:] == [10, NOW_MS, 20, NOW_MS, 30, NOW_MS]
    mixed, _ = statements[0]
    # a terminal flow is never changed again
    assert "status IN ('pending', 'sending', 'running', 'cancelling')" in mixed
    assert "attempts <=" in mixed  # the open outcome never lowers the count


def test_a_table_with_one_flow_sets_only_what_its_outcome_carries() -> None:
    retry = FlowUpdate(40, NOW_MS, FlowStatus.PENDING, 2, NOW_MS + 500, 503, "busy")  # no history, no routes
    delivered = FlowUpdate(41, NOW_MS, FlowStatus.DELIVERED, 1, None, 200, None, None, _log(41))
    (open_sql, open_params), (done_sql, done_params) = update_statements({1: [retry], 3: [delivered]}, SHARDS, 9)

    assert "attempt_log" not in open_sql and "routes" not in open_sql  # the stored ones stay
    assert open_sql.endswith(" AND attempts <= %s") and open_params[-4:] == [9, 40, NOW_MS, 2]
    assert "attempt_log = %s" in done_sql and "routes" not in done_sql and "attempts <=" not in done_sql
    for sql, params in ((open_sql, open_params), (done_sql, done_params)):
        assert (
            sql.count("%s") == len(params) and "WHERE task_id = %s AND scheduled_at = %s AND " in sql
        )  # one key: two equalities


def test_two_ended_flows_of_one_fixed_delay_task_in_one_flush_each_carry_their_reschedule() -> None:
    """A re-driven old flow and the current one of the same fixed_delay task may end in one flush: ordering
    their task updates compared the two Reschedule values, which have no order (TypeError: the flush failed
    and was retried for ever)."""
    shards: Any = [
        type("S", (), {"flows_sql": f"`db`.`flows_{n:02d}`", "tasks_sql": f"`db`.`tasks_{n:02d}`"})() for n in range(4)
    ]
    ended = [
        replace(
            FlowUpdate(9, NOW_MS + at, FlowStatus.DELIVERED, 1, None, 200, None),
            reschedule=Reschedule("app", NOW_MS + 60_000, 4, NOW_MS + 5_000 + at),
        )
        for at in (0, 1_000)
    ]
    statements = update_statements({1: ended}, shards, NOW_MS + 50)
    task_updates = [params for sql, params in statements if sql.startswith("UPDATE `db`.`tasks_01`")]
    assert sorted(p[0] for p in task_updates) == [NOW_MS + 5_000, NOW_MS + 6_000]


def test_a_runs_start_is_written_apart_and_lands_only_on_a_flow_being_delivered() -> None:
    run = FlowRun(RunStatus.RUNNING, 1, NOW_MS, NOW_MS + 60_000)
    by_shard = {
        1: [
            FlowUpdate(10, NOW_MS, FlowStatus.DELIVERED, 1, None, 200, None, None, _log(10)),
            FlowUpdate(20, NOW_MS, FlowStatus.RUNNING, 1, NOW_MS + 60_000, 202, None, None, _log(20), run=run),
            FlowUpdate(30, NOW_MS, FlowStatus.DELIVERED, 1, None, 200, None, None, _log(30)),
        ]
    }
    statements = update_statements(by_shard, SHARDS, NOW_MS + 50)

    [(start, params), (send, send_params), (rest, _)] = statements
    assert "((status = 'pending' AND attempts < %s) OR (status = 'sending' AND attempts <= %s))" in start
    assert "run = %s" in start and params[-4:] == [20, NOW_MS, 1, 1] and start.count("%s") == len(params)
    # the send is recorded where the flow is at its attempt, even if a report overtook the start
    assert send.endswith(
        "SET last_status_code = %s, attempt_log = %s WHERE task_id = %s AND scheduled_at = %s AND attempts = %s"
    )
    assert send_params[0] == 202 and send_params[-3:] == [20, NOW_MS, 1]
    assert "IN ((%s, %s), (%s, %s))" in rest and " run = " not in rest  # the others keep their runs


def test_mariadb_starts_a_run_with_one_update_whose_set_clause_reads_the_row_as_it_was() -> None:
    run = FlowRun(RunStatus.RUNNING, 2, NOW_MS, NOW_MS + 60_000)
    start = FlowUpdate(8, NOW_MS, FlowStatus.RUNNING, 2, NOW_MS + 60_000, 202, None, None, _log(8), run=run)
    (sql, params), *others = update_statements({1: [start]}, SHARDS, NOW_MS + 5, simultaneous=True)

    assert others == [] and sql.count("UPDATE ") == 1 and sql.count("%s") == len(params)
    # MariaDB's order of assignment would let the status set first decide the attempt count's CASE
    assert sql.startswith("SET STATEMENT sql_mode = CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT') FOR UPDATE ")
    sets = sql.split(" SET ", 1)[1].split(" WHERE ")[0]
    assert "last_status_code = %s, " in sets and "attempt_log = %s, " in sets  # the send's record: on every row
    for column in ("status", "attempts", "next_attempt_at", "last_error", "run", "updated_at"):
        assert f"{column} = CASE WHEN ((status = 'pending' AND attempts < %s) OR " in sets
        assert f"THEN %s ELSE {column} END" in sets
    assert sql.endswith(
        "AND (((status = 'pending' AND attempts < %s) OR (status = 'sending' AND attempts <= %s)) OR attempts = %s)"
    )
    assert params[-5:] == [8, NOW_MS, 2, 2, 2]
    # SQLite (and the default) keeps the two statements, each read against the row as the one before left it
    assert len(update_statements({1: [start]}, SHARDS, NOW_MS + 5)) == 2


def test_only_mariadb_10_3_and_later_takes_a_run_start_as_one_update() -> None:
    assert takes_simultaneous_assignment("5.5.5-10.11.19-MariaDB-0+deb12u1")  # asyncmy's greeting of 10.11
    assert takes_simultaneous_assignment("10.3.39-MariaDB") and takes_simultaneous_assignment("11.4.2-MariaDB-log")
    assert not takes_simultaneous_assignment("5.5.5-10.2.44-MariaDB")  # the mode came with 10.3.5
    assert not takes_simultaneous_assignment("10.3.4-MariaDB")
    assert not takes_simultaneous_assignment("8.0.36") and not takes_simultaneous_assignment("8.4.0-commercial")
