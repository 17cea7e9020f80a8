"""Managing alert rules and channels (``/v1/alerts/...``, ``tjobs alerts``, the console's alerts page).

The caller is an app (its key: its own rules, channels and alerts) or the admin (``None``: global rules
and channels, and every app's to read, edit and delete). A rule names channels of its own scope
(an app's rule its app's channels, a global rule global channels). A channel's URL is judged by the
callbacks' target policy with the app's callback allow-list (global: none) before it is stored. Another
app's rule or channel answers 404, as one that does not exist.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from tjobs.alerts.channels import Channel, channel_from_document, parse_channel
from tjobs.alerts.rules import Rule, parse_rule, rule_from_document
from tjobs.clock import Clock
from tjobs.delivery.allow_list import EMPTY_ALLOW_LIST, AllowList
from tjobs.delivery.ssrf import TargetGuard
from tjobs.errors import Conflict, InvalidInput, NotFound
from tjobs.stores.contracts.alerts import AlertSetting, AlertSettingKind, AlertSettings, AlertState

AllowListOf = Callable[[str], Awaitable[AllowList]]


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


class AlertService:
    def __init__(self, alerts: AlertSettings, guard: TargetGuard, clock: Clock, allow_list_of: AllowListOf) -> None:
        self._alerts = alerts
        self._guard = guard
        self._clock = clock
        self._allow_list_of = allow_list_of

    # ---- rules ---------------------------------------------------------------------------------------

    async def list_rules(self, caller: str | None) -> list[Rule]:
        return [rule_from_document(s.id, s.app_id, s.document) for s in await self._settings("rule", caller)]

    async def get_rule(self, caller: str | None, rule_id: str) -> Rule:
        setting = await self._setting("rule", caller, rule_id)
        return rule_from_document(setting.id, setting.app_id, setting.document)

    async def create_rule(self, caller: str | None, body: Any) -> Rule:
        rule = parse_rule(_new_id("rule"), caller, body)
        await self._check_channels(rule)
        await self._put("rule", rule.id, rule.app_id, rule.document(), None)
        return rule

    async def update_rule(self, caller: str | None, rule_id: str, body: Any) -> Rule:
        stored = await self._setting("rule", caller, rule_id)
        rule = parse_rule(
            rule_id, stored.app_id, body, partial_of=rule_from_document(rule_id, stored.app_id, stored.document)
        )
        await self._check_channels(rule)
        await self._put("rule", rule_id, rule.app_id, rule.document(), stored)
        return rule

    async def delete_rule(self, caller: str | None, rule_id: str) -> None:
        await self._setting("rule", caller, rule_id)
        await self._alerts.delete_alert_setting("rule", rule_id)

    async def _check_channels(self, rule: Rule) -> None:
        ours = {channel.id for channel in await self.list_channels(rule.app_id) if channel.app_id == rule.app_id}
        for index, channel_id in enumerate(rule.channels):
            if channel_id not in ours:
                raise InvalidInput(f"channels[{index}]", f"no channel {channel_id!r} of this rule's owner")

    # ---- channels ------------------------------------------------------------------------------------

    async def list_channels(self, caller: str | None) -> list[Channel]:
        return [channel_from_document(s.id, s.app_id, s.document) for s in await self._settings("channel", caller)]

    async def get_channel(self, caller: str | None, channel_id: str) -> Channel:
        setting = await self._setting("channel", caller, channel_id)
        return channel_from_document(setting.id, setting.app_id, setting.document)

    async def create_channel(self, caller: str | None, body: Any) -> Channel:
        channel = parse_channel(_new_id("chan"), caller, body)
        await self._judge(channel)
        await self._put("channel", channel.id, channel.app_id, channel.document(), None)
        return channel

    async def update_channel(self, caller: str | None, channel_id: str, body: Any) -> Channel:
        stored = await self._setting("channel", caller, channel_id)
        previous = channel_from_document(channel_id, stored.app_id, stored.document)
        channel = parse_channel(channel_id, stored.app_id, body, partial_of=previous)
        await self._judge(channel)
        await self._put("channel", channel_id, channel.app_id, channel.document(), stored)
        return channel

    async def delete_channel(self, caller: str | None, channel_id: str) -> None:
        await self._setting("channel", caller, channel_id)
        users = [rule.id for rule in await self.list_rules(None) if channel_id in rule.channels]
        if users:
            raise Conflict(f"channel {channel_id} is named by {len(users)} rules ({', '.join(users[:5])})")
        await self._alerts.delete_alert_setting("channel", channel_id)

    async def _judge(self, channel: Channel) -> None:
        url = channel.settings.get("url")
        if isinstance(url, str):
            allow = EMPTY_ALLOW_LIST if channel.app_id is None else await self._allow_list_of(channel.app_id)
            await self._guard.check_registration([url], allow, field="settings.url")

    # ---- what fires ----------------------------------------------------------------------------------

    async def active(self, caller: str | None, include_resolved: bool = False) -> list[tuple[AlertState, Rule | None]]:
        """The caller's states that fire (with ``include_resolved``, those resolved too), each with its rule;
        a disabled rule's are left out (it is not evaluated: its states say nothing of now)."""
        rules = {rule.id: rule for rule in await self.list_rules(caller) if rule.enabled}
        states = await self._alerts.read_alert_states(caller)
        return [
            (state, rules.get(state.rule_id))
            for state in states
            if (include_resolved or state.status == "firing") and state.rule_id in rules
        ]

    # ---- the store -----------------------------------------------------------------------------------

    async def _settings(self, kind: AlertSettingKind, caller: str | None) -> list[AlertSetting]:
        return await self._alerts.list_alert_settings(kind, caller)

    async def _setting(self, kind: AlertSettingKind, caller: str | None, setting_id: str) -> AlertSetting:
        for setting in await self._alerts.list_alert_settings(kind, caller):
            if setting.id == setting_id:
                return setting
        raise NotFound(f"alert {kind}", setting_id[:80])

    async def _put(
        self,
        kind: AlertSettingKind,
        setting_id: str,
        app_id: str | None,
        document: dict[str, Any],
        stored: AlertSetting | None,
    ) -> None:
        now_ms = self._clock.now_ms()
        created = now_ms if stored is None else stored.created_at_ms
        await self._alerts.put_alert_setting(AlertSetting(kind, setting_id, app_id, document, created, now_ms))
