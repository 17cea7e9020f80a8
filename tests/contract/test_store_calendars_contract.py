"""Calendars: kept per app and name, every write moves the version, a delete forgets the calendar."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from tjobs.specs.calendar import CalendarRules
from tjobs.stores.base import TaskStore
from tjobs.stores.calendar_store import calendars_of

pytestmark = pytest.mark.asyncio

HOLIDAYS = CalendarRules(
    dates=("2026-12-25",),
    ranges=(("2026-12-24", "2027-01-01"),),
    weekdays=(6, 7),
    annual=("01-01",),
    periods=(("2026-12-31T18:00:00", "2027-01-01T06:00:00"),),
)


def _app() -> str:
    return f"app-{secrets.token_hex(4)}"  # each test's rows apart from the others' (the tables are not wiped)


async def test_a_calendar_is_created_at_version_1_and_each_write_moves_it(store: TaskStore) -> None:
    calendars = calendars_of(store)
    app = _app()
    created = await calendars.put_calendar(app, "holidays", HOLIDAYS, 1_000)
    assert (created.version, created.created_at_ms, created.updated_at_ms, created.rules) == (1, 1_000, 1_000, HOLIDAYS)
    weekends = CalendarRules(weekdays=(6, 7))
    changed = await calendars.put_calendar(app, "holidays", weekends, 2_000)
    assert (changed.version, changed.created_at_ms, changed.updated_at_ms, changed.rules) == (2, 1_000, 2_000, weekends)
    assert await calendars.get_calendar(app, "holidays") == changed


async def test_calendars_are_kept_per_app_and_listed_by_name(store: TaskStore) -> None:
    calendars = calendars_of(store)
    app, other = _app(), _app()
    await calendars.put_calendar(app, "b", HOLIDAYS, 1)
    await calendars.put_calendar(app, "a", CalendarRules(), 1)
    await calendars.put_calendar(other, "a", HOLIDAYS, 1)
    assert [c.name for c in await calendars.list_calendars(app)] == ["a", "b"]
    assert (await calendars.get_calendar(other, "a")).rules == HOLIDAYS  # type: ignore[union-attr]
    assert await calendars.get_calendar(other, "b") is None
    every = {(c.app_id, c.name) for c in await calendars.list_calendars()}
    assert {(app, "a"), (app, "b"), (other, "a")} <= every


async def test_a_deleted_calendar_is_gone_and_a_new_one_starts_again(store: TaskStore) -> None:
    calendars = calendars_of(store)
    app = _app()
    await calendars.put_calendar(app, "h", HOLIDAYS, 1)
    await calendars.put_calendar(app, "h", HOLIDAYS, 2)
    assert await calendars.delete_calendar(app, "h")
    assert not await calendars.delete_calendar(app, "h")
    assert await calendars.get_calendar(app, "h") is None
    again = await calendars.put_calendar(app, "h", HOLIDAYS, 3)
    assert (again.version, again.created_at_ms) == (1, 3)


async def test_concurrent_writes_each_move_the_version_once(store: TaskStore) -> None:
    calendars = calendars_of(store)
    app = _app()
    written = await asyncio.gather(*(calendars.put_calendar(app, "c", HOLIDAYS, n) for n in range(5)))
    assert sorted(c.version for c in written) == [1, 2, 3, 4, 5]
    assert (await calendars.get_calendar(app, "c")).version == 5  # type: ignore[union-attr]
