"""Alerts: the rules and channels operators and apps configure, and what each rule's subjects are doing.

Two kinds of record live beside the apps, in the first logical database:

- an **alert setting** (:class:`AlertSetting`): one rule or one channel, kept as a JSON document that
  :mod:`tjobs.alerts` parses and judges (the store never reads inside it), under an id, owned by an app
  or global (``app_id`` ``None``: the admin's);
- an **alert state** (:class:`AlertState`): per rule and subject (a pool, a node, a server, a move, or
  the rule itself), whether it fires, since when, and when the last notification went out. The
  evaluator is one per cluster, but two leaders may briefly overlap: a state is written only by a
  compare-and-set on its ``version``, so of two evaluators the one whose write lands sends (style
  rule 5: idempotency is a database key, not a check in code), and a new leader reads what the last
  one sent instead of sending it again.

The role stands beside :class:`tjobs.stores.base.TaskStore`, over the same databases:
:func:`tjobs.stores.alert_store.alert_settings_of` gives a store's (the SQL store's shares its
engines; the memory twin's is its own dicts).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

AlertSettingKind = Literal["rule", "channel"]
AlertStatus = Literal["firing", "resolved"]


@dataclass(frozen=True, slots=True)
class AlertSetting:
    """One rule or channel as stored: ``document`` is its JSON object (the store copies it whole)."""

    kind: AlertSettingKind
    id: str
    app_id: str | None  # None: global, the admin's
    document: Mapping[str, Any]
    created_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class AlertState:
    """What one rule's subject is doing: ``firing`` since ``since_ms`` (or ``resolved`` at
    ``resolved_at_ms``), last notified at ``notified_at_ms`` (0: never), with the figure that made it
    fire in ``summary``. ``version`` is 1 for a new state and grows with every write."""

    rule_id: str
    subject: str
    app_id: str | None
    status: AlertStatus
    since_ms: int
    notified_at_ms: int
    summary: str
    resolved_at_ms: int | None = None
    version: int = 1
    extra: Mapping[str, Any] = field(default_factory=dict)  # JSON: the figures behind the summary


class AlertSettings(ABC):
    """Rules, channels and their states, in the first logical database. A database that cannot be
    reached raises :class:`tjobs.errors.StorageUnavailable`, and a failed call has written nothing."""

    @abstractmethod
    async def put_alert_setting(self, setting: AlertSetting) -> None:
        """Insert or replace the setting with ``(setting.kind, setting.id)``."""

    @abstractmethod
    async def list_alert_settings(self, kind: AlertSettingKind, app_id: str | None = None) -> list[AlertSetting]:
        """Every setting of ``kind`` (``app_id`` given: that app's only, not the global ones), by id."""

    @abstractmethod
    async def delete_alert_setting(self, kind: AlertSettingKind, setting_id: str) -> bool:
        """Delete the setting, and for a rule every state of it; ``False`` if it did not exist."""

    @abstractmethod
    async def read_alert_states(self, app_id: str | None = None) -> list[AlertState]:
        """Every state (``app_id`` given: that app's only), by rule and subject."""

    @abstractmethod
    async def save_alert_state(self, state: AlertState, expected_version: int | None) -> bool:
        """Write ``state`` if the stored one is still at ``expected_version`` (``None``: there is none
        yet), storing ``state.version`` as given (the caller sets it to ``expected_version + 1``, or 1);
        ``False`` (nothing written) when another writer got there first."""
