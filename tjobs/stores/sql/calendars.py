"""The SQL store's calendars (:class:`tjobs.stores.contracts.calendars.CalendarRecords`): ``calendars``
of the first logical database, over the engines of the
:class:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore` it is given (no pool of its own). A write is an
``INSERT`` of version 1, or when the key is taken an ``UPDATE ... SET version = version + 1`` and the row
read back in the same transaction (an insert first: two writers of a new name never deadlock on a gap lock).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import MetaData, delete, insert, select, update
from sqlalchemy import exc as sa_exc

from tjobs.specs.calendar import Calendar, CalendarRules, calendar_rules_from_json, calendar_rules_to_json
from tjobs.stores.contracts.calendars import CalendarRecords
from tjobs.stores.schema_calendars import calendars_table
from tjobs.stores.sql.apps_records import AppsDatabaseRecords

if TYPE_CHECKING:
    pass

_METADATA = MetaData()
CALENDARS = calendars_table(_METADATA)  # unqualified: the apps database's options point it there


def _from_row(row: Mapping[Any, Any]) -> Calendar:
    return Calendar(
        app_id=row["app_id"],
        name=row["name"],
        rules=calendar_rules_from_json(orjson.loads(row["rules"])),
        version=int(row["version"]),
        created_at_ms=int(row["created_at_ms"]),
        updated_at_ms=int(row["updated_at_ms"]),
    )


class SqlCalendars(AppsDatabaseRecords, CalendarRecords):
    async def put_calendar(self, app_id: str, name: str, rules: CalendarRules, now_ms: int) -> Calendar:
        text = orjson.dumps(calendar_rules_to_json(rules)).decode()
        key = (CALENDARS.c.app_id == app_id, CALENDARS.c.name == name)
        change = update(CALENDARS).where(*key).values(rules=text, version=CALENDARS.c.version + 1, updated_at_ms=now_ms)
        row = {
            "app_id": app_id,
            "name": name,
            "rules": text,
            "version": 1,
            "created_at_ms": now_ms,
            "updated_at_ms": now_ms,
        }
        try:
            async with self._store._write(self._url) as conn:
                await conn.execute(insert(CALENDARS), [row], execution_options=self._options)
            return _from_row(row)
        except sa_exc.IntegrityError:
            pass  # there is one: replace its rules
        async with self._store._write(self._url) as conn:
            await conn.execute(change, execution_options=self._options)
            stored = (
                (await conn.execute(select(CALENDARS).where(*key), execution_options=self._options)).mappings().first()
            )
        if stored is None:  # deleted in between: write it again
            return await self.put_calendar(app_id, name, rules, now_ms)
        return _from_row(stored)

    async def get_calendar(self, app_id: str, name: str) -> Calendar | None:
        statement = select(CALENDARS).where(CALENDARS.c.app_id == app_id, CALENDARS.c.name == name)
        async with self._store._connect(self._url) as conn:
            row = (await conn.execute(statement, execution_options=self._options)).mappings().first()
        return None if row is None else _from_row(row)

    async def list_calendars(self, app_id: str | None = None) -> list[Calendar]:
        statement = select(CALENDARS).order_by(CALENDARS.c.app_id, CALENDARS.c.name)
        if app_id is not None:
            statement = statement.where(CALENDARS.c.app_id == app_id)
        async with self._store._connect(self._url) as conn:
            rows = (await conn.execute(statement, execution_options=self._options)).mappings().all()
        return [_from_row(row) for row in rows]

    async def delete_calendar(self, app_id: str, name: str) -> bool:
        statement = delete(CALENDARS).where(CALENDARS.c.app_id == app_id, CALENDARS.c.name == name)
        async with self._store._write(self._url) as conn:
            gone = await conn.execute(statement, execution_options=self._options)
        return bool(gone.rowcount)
