"""``CalendarService.run_once``: every node's copy of every calendar, read again every ``refresh_s``
(README "Calendars"), including a write made on this node while a read was in flight; the node's refresh
interval is ``scheduler.calendar_refresh_s`` (docs/configuration.md), refused out of its bounds."""

from __future__ import annotations

import asyncio

import pytest

from tjobs.clock import ManualClock
from tjobs.node import Node
from tjobs.service.calendars import REFRESH_S, CalendarService
from tjobs.settings import InvalidSettings, Settings, load_settings
from tjobs.specs.calendar import Calendar, CalendarRules
from tjobs.stores.memory_calendars import MemoryCalendars

WEEKEND = CalendarRules(weekdays=(6, 7))
CHRISTMAS = CalendarRules(dates=("2026-12-25",))


class HeldRead(MemoryCalendars):
    """Its next full read takes its rows at once and answers only when ``release`` is set: a read whose
    snapshot predates a write that commits before it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.taken = asyncio.Event()
        self.release = asyncio.Event()

    async def list_calendars(self, app_id: str | None = None) -> list[Calendar]:
        rows = await super().list_calendars(app_id)
        if self.hold and app_id is None:
            self.hold = False
            self.taken.set()
            await self.release.wait()
        return rows


async def test_a_pass_reads_every_apps_calendars_and_forgets_the_deleted_ones() -> None:
    records = MemoryCalendars()
    service = CalendarService(records, ManualClock(0))
    await records.put_calendar("app-a", "weekend", WEEKEND, 1)
    await records.put_calendar("app-b", "holidays", CHRISTMAS, 1)
    assert service.rules("app-a", "weekend") is None  # written elsewhere: not known before a pass
    assert await service.run_once() == 2
    assert (service.rules("app-a", "weekend"), service.rules("app-b", "holidays")) == (WEEKEND, CHRISTMAS)
    await records.put_calendar("app-a", "weekend", CHRISTMAS, 2)  # changed on another node
    await records.delete_calendar("app-b", "holidays")
    assert service.rules("app-a", "weekend") == WEEKEND  # until the next pass
    assert await service.run_once() == 1
    assert service.rules("app-a", "weekend") == CHRISTMAS
    assert not service.known("app-b", "holidays") and service.rules("app-b", "holidays") is None


async def test_a_write_on_this_node_during_a_pass_is_not_undone_by_the_pass_s_older_read() -> None:
    records = HeldRead()
    service = CalendarService(records, ManualClock(0))
    await service.put("app-a", "weekend", {"weekdays": ["sat", "sun"]})
    await service.put("app-a", "gone", {"dates": ["2026-12-25"]})
    records.hold = True
    refresh = asyncio.create_task(service.run_once())
    await records.taken.wait()  # the pass has read the rows as they were before the writes below
    await service.put("app-a", "weekend", {"dates": ["2026-12-25"]})
    await service.put("app-a", "new", {"weekdays": ["sun"]})
    await service.delete("app-a", "gone")
    records.release.set()
    await refresh
    assert service.rules("app-a", "weekend") == CHRISTMAS
    assert service.rules("app-a", "new") == CalendarRules(weekdays=(7,))
    assert not service.known("app-a", "gone")
    assert await service.run_once() == 2  # the next pass reads them as written
    assert service.rules("app-a", "weekend") == CHRISTMAS and not service.known("app-a", "gone")


async def test_a_newer_version_read_from_another_node_wins_over_an_older_write_of_this_one() -> None:
    records = HeldRead()
    service = CalendarService(records, ManualClock(0))
    await service.put("app-a", "weekend", {"weekdays": ["sat", "sun"]})
    records.hold = True
    refresh = asyncio.create_task(service.run_once())
    await records.taken.wait()
    await service.put("app-a", "weekend", {"dates": ["2026-12-25"]})  # version 2
    await records.put_calendar("app-a", "weekend", WEEKEND, 5)  # version 3, written through another node
    records.release.set()
    await refresh  # the pass read version 1: this node's version 2 stands until the next pass
    assert service.rules("app-a", "weekend") == CHRISTMAS
    await service.run_once()
    assert service.rules("app-a", "weekend") == WEEKEND


MEMORY = {"urls": ["memory://"], "topology": "1x1x4"}


@pytest.mark.parametrize(
    ("refresh_s", "bound"),
    [(0, "greater than or equal to 0.5"), (0.49, "greater than or equal to 0.5"), (300.5, "less than or equal to 300")],
)
def test_a_calendar_refresh_out_of_its_bounds_is_refused_naming_it(refresh_s: float, bound: str) -> None:
    with pytest.raises(InvalidSettings, match=rf"^scheduler\.calendar_refresh_s: Input should be {bound}$"):
        load_settings(storage=MEMORY, scheduler={"calendar_refresh_s": refresh_s})


@pytest.mark.parametrize(("given", "refresh_s"), [(None, REFRESH_S), (0.5, 0.5), (300, 300.0)])
async def test_the_node_s_calendars_are_read_again_every_calendar_refresh_s(
    given: float | None, refresh_s: float
) -> None:
    scheduler = {} if given is None else {"calendar_refresh_s": given}
    node = Node(Settings(storage=MEMORY, scheduler=scheduler))
    try:
        assert node.calendars.refresh_s == refresh_s
    finally:
        await node.transport.close()
    assert REFRESH_S == 5.0  # the default, as README "Calendars" and docs/configuration.md say
