"""The JSON the API answers (and the console shows) for rules, channels and alerts: one shape for both."""

from __future__ import annotations

from typing import Any

from tjobs.alerts.channels import Channel
from tjobs.alerts.rules import Rule
from tjobs.clock import iso_ms
from tjobs.stores.contracts.alerts import AlertState


def rule_json(rule: Rule) -> dict[str, Any]:
    return {"id": rule.id, "app_id": rule.app_id, **rule.document()}


def channel_json(channel: Channel, *, reveal_secret: bool = False) -> dict[str, Any]:
    """The channel with its secret as ``"***"`` (``reveal_secret``: the create's answer only)."""
    return channel.shown(reveal_secret=reveal_secret)


def alert_json(state: AlertState, rule: Rule | None) -> dict[str, Any]:
    return {
        "rule_id": state.rule_id,
        "rule_name": rule.name if rule is not None else None,
        "kind": rule.kind if rule is not None else None,
        "app_id": state.app_id,
        "subject": state.subject,
        "status": state.status,
        "summary": state.summary,
        "since": iso_ms(state.since_ms),
        "notified_at": iso_ms(state.notified_at_ms) if state.notified_at_ms else None,
        "resolved_at": iso_ms(state.resolved_at_ms) if state.resolved_at_ms else None,
        "details": dict(state.extra),
    }
