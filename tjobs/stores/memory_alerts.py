"""The memory twin's alert settings and states (:class:`tjobs.stores.contracts.alerts.AlertSettings`):
dicts keyed as the SQL tables are, documents copied in and out through JSON as a database would."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from tjobs.stores.contracts.alerts import AlertSetting, AlertSettingKind, AlertSettings, AlertState


def _copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


class MemoryAlertSettings(AlertSettings):
    def __init__(self) -> None:
        self._settings: dict[tuple[str, str], AlertSetting] = {}
        self._states: dict[tuple[str, str], AlertState] = {}

    async def put_alert_setting(self, setting: AlertSetting) -> None:
        self._settings[(setting.kind, setting.id)] = replace(setting, document=_copy(setting.document))

    async def list_alert_settings(self, kind: AlertSettingKind, app_id: str | None = None) -> list[AlertSetting]:
        found = [
            replace(setting, document=_copy(setting.document))
            for (each_kind, _), setting in self._settings.items()
            if each_kind == kind and (app_id is None or setting.app_id == app_id)
        ]
        return sorted(found, key=lambda setting: setting.id)

    async def delete_alert_setting(self, kind: AlertSettingKind, setting_id: str) -> bool:
        gone = self._settings.pop((kind, setting_id), None)
        if gone is not None and kind == "rule":
            for key in [key for key in self._states if key[0] == setting_id]:
                del self._states[key]
        return gone is not None

    async def read_alert_states(self, app_id: str | None = None) -> list[AlertState]:
        found = [
            replace(state, extra=_copy(state.extra))
            for state in self._states.values()
            if app_id is None or state.app_id == app_id
        ]
        return sorted(found, key=lambda state: (state.rule_id, state.subject))

    async def save_alert_state(self, state: AlertState, expected_version: int | None) -> bool:
        key = (state.rule_id, state.subject)
        stored = self._states.get(key)
        if (stored.version if stored is not None else None) != expected_version:
            return False
        self._states[key] = replace(state, extra=_copy(state.extra))
        return True
