"""Alert rules, channels and states: kept per kind and app, and a state written only by compare-and-set."""

from __future__ import annotations

import secrets
from dataclasses import replace

import pytest

from tjobs.stores.alert_store import alert_settings_of
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.alerts import AlertSetting, AlertState

pytestmark = pytest.mark.asyncio


def _app() -> str:
    return f"app-{secrets.token_hex(4)}"  # each test's rows apart from the others' (the tables are not wiped)


def _rule(rule_id: str, app_id: str | None, threshold: int = 5) -> AlertSetting:
    return AlertSetting("rule", rule_id, app_id, {"kind": "dead_letters", "threshold": threshold}, 1_000, 1_000)


async def test_settings_are_kept_per_kind_and_app_and_replaced_whole(store: TaskStore) -> None:
    alerts = alert_settings_of(store)
    app = _app()
    await alerts.put_alert_setting(_rule(f"{app}-r1", app))
    await alerts.put_alert_setting(_rule(f"{app}-r2", app))
    await alerts.put_alert_setting(AlertSetting("channel", f"{app}-c1", app, {"kind": "slack", "url": "u"}, 1, 1))
    await alerts.put_alert_setting(replace(_rule(f"{app}-r1", app, threshold=9), updated_at_ms=2_000))

    rules = await alerts.list_alert_settings("rule", app)
    assert [rule.id for rule in rules] == [f"{app}-r1", f"{app}-r2"]
    assert rules[0].document == {"kind": "dead_letters", "threshold": 9} and rules[0].updated_at_ms == 2_000
    assert [channel.id for channel in await alerts.list_alert_settings("channel", app)] == [f"{app}-c1"]
    assert await alerts.list_alert_settings("rule", _app()) == []


async def test_a_global_setting_has_no_app_and_is_listed_with_every_app(store: TaskStore) -> None:
    alerts = alert_settings_of(store)
    rule_id = f"global-{secrets.token_hex(4)}"
    await alerts.put_alert_setting(_rule(rule_id, None))
    every = {rule.id: rule for rule in await alerts.list_alert_settings("rule")}
    assert every[rule_id].app_id is None


async def test_deleting_a_rule_deletes_its_states(store: TaskStore) -> None:
    alerts = alert_settings_of(store)
    app = _app()
    rule_id = f"{app}-r"
    await alerts.put_alert_setting(_rule(rule_id, app))
    assert await alerts.save_alert_state(AlertState(rule_id, "pool:a", app, "firing", 10, 10, "2 < 3"), None)
    assert await alerts.delete_alert_setting("rule", rule_id)
    assert not await alerts.delete_alert_setting("rule", rule_id)
    assert await alerts.list_alert_settings("rule", app) == []
    assert await alerts.read_alert_states(app) == []


async def test_a_state_is_written_only_at_the_version_expected(store: TaskStore) -> None:
    alerts = alert_settings_of(store)
    app = _app()
    first = AlertState(f"{app}-r", "node:n2", app, "firing", 10, 10, "node n2 down", extra={"nodes": 2})
    assert await alerts.save_alert_state(first, None)
    assert not await alerts.save_alert_state(first, None)  # a second evaluator creating it too: loses

    resolved = replace(first, status="resolved", resolved_at_ms=50, notified_at_ms=50, version=2)
    assert await alerts.save_alert_state(resolved, 1)
    assert not await alerts.save_alert_state(replace(resolved, summary="late", version=2), 1)  # stale version

    (stored,) = await alerts.read_alert_states(app)
    assert stored == resolved
    assert stored.extra == {"nodes": 2}
