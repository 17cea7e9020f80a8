"""The row-lock fault's holder begins again after a deadlock or a lock-wait timeout (testkit/row_locks.py).

The 2-hour soak of 2026-12-05 lost its first row-lock fault to this: the holder's ``SELECT … FOR UPDATE``
waited beside the fire transactions, InnoDB chose it as a deadlock's victim, and the fault failed."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.row_locks import DEADLOCK, LOCK_WAIT_TIMEOUT, lock_rows


class OperationalError(Exception):
    """pymysql's shape: ``args`` is (code, message)."""


class ScriptedConnection:
    """Answers each ``SELECT`` with 3 rows, or raises the next scripted error code for it."""

    def __init__(self, failures: list[int]) -> None:
        self.failures = failures
        self.executed: list[str] = []
        self.rollbacks = 0

    def cursor(self) -> ScriptedConnection:
        return self

    def __enter__(self) -> ScriptedConnection:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def execute(self, query: str, args: Any = None) -> int:
        self.executed.append(query)
        if query.startswith("SELECT") and self.failures:
            code = self.failures.pop(0)
            raise OperationalError(code, "scripted")
        return 3 if query.startswith("SELECT") else 0

    def rollback(self) -> None:
        self.rollbacks += 1


STATEMENTS = [
    ("SELECT id FROM a WHERE app_id = %s FOR UPDATE", ("x",)),
    ("SELECT id FROM b WHERE app_id = %s FOR UPDATE", ("x",)),
]


@pytest.mark.parametrize("code", [DEADLOCK, LOCK_WAIT_TIMEOUT])
def test_a_holder_chosen_as_a_deadlock_victim_or_timed_out_begins_again_and_holds_every_row(code: int) -> None:
    connection = ScriptedConnection([code, code])
    assert lock_rows(connection, STATEMENTS) == 6
    assert connection.rollbacks == 2
    assert connection.executed[0] == "SET SESSION innodb_lock_wait_timeout = %s"
    assert connection.executed.count("BEGIN") == 3


def test_a_holder_gives_up_after_its_time_and_raises_the_error() -> None:
    ticks = iter([0.0, 10.0, 30.0])
    connection = ScriptedConnection([DEADLOCK, DEADLOCK, DEADLOCK])
    with pytest.raises(OperationalError) as raised:
        lock_rows(connection, STATEMENTS, give_up_s=25.0, clock=lambda: next(ticks))
    assert raised.value.args[0] == DEADLOCK
    assert connection.rollbacks == 1


def test_any_other_error_is_raised_at_once() -> None:
    connection = ScriptedConnection([1146])  # no such table
    with pytest.raises(OperationalError):
        lock_rows(connection, STATEMENTS)
    assert connection.rollbacks == 0
