"""The SQL store's service levels (:class:`tjobs.stores.contracts.ServiceLevels`), in the first logical
database; the statements are :mod:`tjobs.stores.sql_slo`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from tjobs.model import SloCounts, SloMinute
from tjobs.stores import sql_slo
from tjobs.stores.contracts import ServiceLevels
from tjobs.stores.sql.connections import SqlBase


class SqlServiceLevels(SqlBase, ServiceLevels):
    """Per-minute delivery counts."""

    async def add_slo_minutes(self, node_id: str, minutes: Sequence[SloMinute]) -> None:
        if minutes:
            async with self._write(self.layout.apps_database.engine_url) as conn:
                await sql_slo.add_minutes(conn, self.layout.apps_options, node_id, minutes)

    async def sum_slo_minutes(self, app_id: str | None, from_minute: int, to_minute: int) -> SloCounts:
        async with self._connect(self.layout.apps_database.engine_url) as conn:
            return await sql_slo.sum_minutes(conn, self.layout.apps_options, app_id, from_minute, to_minute)

    async def purge_slo_minutes(self, before_minute: int, limit: int) -> int:
        async with self._write(self.layout.apps_database.engine_url) as conn:
            return await sql_slo.purge_minutes(conn, self.layout.apps_options, before_minute, limit)
