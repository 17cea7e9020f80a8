"""The SQL store's alert settings and states (:class:`tjobs.stores.contracts.alerts.AlertSettings`):
``alert_settings`` and ``alert_states`` of the first logical database, over the engines of the
:class:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore` it is given (no pool of its own). A global
setting's ``app_id`` is stored as ``""``. A state is written by ``UPDATE ... WHERE version = expected``
or, when there is none yet, an ``INSERT`` that a primary-key clash turns into ``False``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import MetaData, delete, insert, select, update
from sqlalchemy import exc as sa_exc

from tjobs.stores.contracts.alerts import AlertSetting, AlertSettingKind, AlertSettings, AlertState
from tjobs.stores.schema import dumps, loads
from tjobs.stores.schema_alerts import alert_settings_table, alert_states_table
from tjobs.stores.sql.apps_records import AppsDatabaseRecords

if TYPE_CHECKING:
    pass

_METADATA = MetaData()
SETTINGS = alert_settings_table(_METADATA)  # unqualified: the apps database's options point it there
STATES = alert_states_table(_METADATA)


def _setting_from_row(row: Mapping[Any, Any]) -> AlertSetting:
    return AlertSetting(
        kind=row["kind"],
        id=row["id"],
        app_id=row["app_id"] or None,
        document=loads(row["document"]),
        created_at_ms=int(row["created_at_ms"]),
        updated_at_ms=int(row["updated_at_ms"]),
    )


def _state_row(state: AlertState) -> dict[str, Any]:
    return {
        "rule_id": state.rule_id,
        "subject": state.subject,
        "app_id": state.app_id or "",
        "status": state.status,
        "since_ms": state.since_ms,
        "notified_at_ms": state.notified_at_ms,
        "resolved_at_ms": state.resolved_at_ms,
        "summary": state.summary,
        "extra": dumps(dict(state.extra)),
        "version": state.version,
    }


def _state_from_row(row: Mapping[Any, Any]) -> AlertState:
    resolved = row["resolved_at_ms"]
    return AlertState(
        rule_id=row["rule_id"],
        subject=row["subject"],
        app_id=row["app_id"] or None,
        status=row["status"],
        since_ms=int(row["since_ms"]),
        notified_at_ms=int(row["notified_at_ms"]),
        summary=row["summary"],
        resolved_at_ms=None if resolved is None else int(resolved),
        version=int(row["version"]),
        extra=loads(row["extra"]),
    )


class SqlAlertSettings(AppsDatabaseRecords, AlertSettings):
    async def put_alert_setting(self, setting: AlertSetting) -> None:
        key = (SETTINGS.c.kind == setting.kind, SETTINGS.c.id == setting.id)
        values = {
            "app_id": setting.app_id or "",
            "document": dumps(dict(setting.document)),
            "created_at_ms": setting.created_at_ms,
            "updated_at_ms": setting.updated_at_ms,
        }
        async with self._store._write(self._url) as conn:
            result = await conn.execute(update(SETTINGS).where(*key).values(**values), execution_options=self._options)
            if result.rowcount == 0:
                row = {"kind": setting.kind, "id": setting.id, **values}
                await conn.execute(insert(SETTINGS), [row], execution_options=self._options)

    async def list_alert_settings(self, kind: AlertSettingKind, app_id: str | None = None) -> list[AlertSetting]:
        statement = select(SETTINGS).where(SETTINGS.c.kind == kind).order_by(SETTINGS.c.id)
        if app_id is not None:
            statement = statement.where(SETTINGS.c.app_id == app_id)
        async with self._store._connect(self._url) as conn:
            rows = (await conn.execute(statement, execution_options=self._options)).mappings().all()
        return [_setting_from_row(row) for row in rows]

    async def delete_alert_setting(self, kind: AlertSettingKind, setting_id: str) -> bool:
        async with self._store._write(self._url) as conn:
            gone = await conn.execute(
                delete(SETTINGS).where(SETTINGS.c.kind == kind, SETTINGS.c.id == setting_id),
                execution_options=self._options,
            )
            if gone.rowcount and kind == "rule":
                await conn.execute(
                    delete(STATES).where(STATES.c.rule_id == setting_id), execution_options=self._options
                )
        return bool(gone.rowcount)

    async def read_alert_states(self, app_id: str | None = None) -> list[AlertState]:
        statement = select(STATES).order_by(STATES.c.rule_id, STATES.c.subject)
        if app_id is not None:
            statement = statement.where(STATES.c.app_id == app_id)
        async with self._store._connect(self._url) as conn:
            rows = (await conn.execute(statement, execution_options=self._options)).mappings().all()
        return [_state_from_row(row) for row in rows]

    async def save_alert_state(self, state: AlertState, expected_version: int | None) -> bool:
        row = _state_row(state)
        if expected_version is None:
            try:
                async with self._store._write(self._url) as conn:
                    await conn.execute(insert(STATES), [row], execution_options=self._options)
            except sa_exc.IntegrityError:
                return False
            return True
        where = (
            STATES.c.rule_id == state.rule_id,
            STATES.c.subject == state.subject,
            STATES.c.version == expected_version,
        )
        async with self._store._write(self._url) as conn:
            result = await conn.execute(update(STATES).where(*where).values(**row), execution_options=self._options)
        return bool(result.rowcount)
