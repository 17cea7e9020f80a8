"""Tables of one-request cases checked inside one test, each case's assertions as before.

A table of thousands of small cases (the bad-input table, the SSRF matrix) cost more in pytest than in the
cases: ~2.4 ms per test of collection (on every xdist worker), setup and reporting beside a request of a few
milliseconds. :func:`check_every` runs a check per case inside one test, goes on past a failing case, and
fails once at the end naming every failing case with its own assertion's message, so a failure still says
which cases broke and why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import pytest

T = TypeVar("T")

_LINES_PER_FAILURE = 12  # a failing case's message, first lines (a rewritten assertion explains at length)


async def check_every(cases: Iterable[T], check: Callable[[T], Awaitable[None]], label: Callable[[T], str]) -> None:
    """Await ``check(case)`` for every case; then fail naming each case whose check raised, with why."""
    failures: list[str] = []
    count = 0
    for case in cases:
        count += 1
        try:
            await check(case)
        except (Exception, pytest.fail.Exception) as error:  # pytest.raises' "did not raise" is a BaseException
            failures.append(_failure(label(case), error))
    _report(failures, count)


def check_every_sync(cases: Iterable[T], check: Callable[[T], None], label: Callable[[T], str]) -> None:
    """:func:`check_every` for a check that is a plain function."""
    failures: list[str] = []
    count = 0
    for case in cases:
        count += 1
        try:
            check(case)
        except (Exception, pytest.fail.Exception) as error:
            failures.append(_failure(label(case), error))
    _report(failures, count)


def _failure(label: str, error: BaseException) -> str:
    lines = (str(error) or repr(error)).splitlines() or [""]
    if len(lines) > _LINES_PER_FAILURE:
        lines = [*lines[:_LINES_PER_FAILURE], f"... ({len(lines) - _LINES_PER_FAILURE} more lines)"]
    head = f"- {label}: {type(error).__name__}: {lines[0]}"
    return "\n".join([head, *(f"    {line}" for line in lines[1:])])


def _report(failures: list[str], count: int) -> None:
    if count == 0:
        raise AssertionError("the table has no cases")
    if failures:
        raise AssertionError(f"{len(failures)} of {count} cases failed:\n" + "\n".join(failures))
