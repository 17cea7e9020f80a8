"""The memory twin's service-level minutes and their hourly sums (the store's ``add_slo_minutes``,
``sum_slo_minutes`` and ``purge_slo_minutes``), as the SQL stores keep them (:mod:`tjobs.stores.slo_hours`)."""

from __future__ import annotations

from collections.abc import Sequence

from tjobs.model import SloCounts, SloMinute
from tjobs.stores.slo_hours import MINUTES_PER_HOUR, hour_of, purge_cutoff_hour, split_by_hours

SloRows = dict[tuple[str, int, str], SloCounts]  # (app, minute or hour, node) -> counts


def _added(a: SloCounts, b: SloCounts) -> SloCounts:
    return a.added(b)


def _summed(rows: SloRows, app_id: str | None, ranges: Sequence[tuple[int, int]]) -> SloCounts:
    """The rows of ``app_id`` (every app: ``None``) whose minute or hour falls in one of ``ranges``."""
    total = SloCounts()
    for (app, period, _), counts in rows.items():
        if (app_id is None or app == app_id) and any(start <= period < end for start, end in ranges):
            total = _added(total, counts)
    return total


class MemorySlo:
    _slo_minutes: SloRows  # (app, minute, node)
    _slo_hours: SloRows  # (app, hour, node): its minutes' sums

    async def add_slo_minutes(self, node_id: str, minutes: Sequence[SloMinute]) -> None:
        for minute in minutes:
            for rows, key in (
                (self._slo_minutes, (minute.app_id, minute.minute, node_id)),
                (self._slo_hours, (minute.app_id, hour_of(minute.minute), node_id)),
            ):
                rows[key] = _added(rows.get(key, SloCounts()), minute.counts)

    async def sum_slo_minutes(self, app_id: str | None, from_minute: int, to_minute: int) -> SloCounts:
        split = split_by_hours(from_minute, to_minute)
        if split is None:
            return _summed(self._slo_minutes, app_id, [(from_minute, to_minute)])
        hours = _summed(self._slo_hours, app_id, [(split.from_hour, split.to_hour)])
        return _added(hours, _summed(self._slo_minutes, app_id, split.edges))

    async def purge_slo_minutes(self, before_minute: int, limit: int) -> int:
        before_hour = purge_cutoff_hour(before_minute)
        gone = 0
        for rows, before in ((self._slo_hours, before_hour), (self._slo_minutes, before_hour * MINUTES_PER_HOUR)):
            doomed = [key for key in rows if key[1] < before][:limit]
            for key in doomed:
                del rows[key]
            gone += len(doomed)
        return gone
