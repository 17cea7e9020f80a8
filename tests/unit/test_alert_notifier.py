"""The notifier: one firing notification per subject, repeated every ``repeat_s``, one resolved; and the
evaluator: states written by compare-and-set, so two evaluators at once send once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

import pytest

from tjobs.alerts.channels import Channel, Notification
from tjobs.alerts.evaluator import AlertEvaluator
from tjobs.alerts.notifier import UNSENT, decide
from tjobs.alerts.rules import Finding, Rule
from tjobs.cluster.local import LocalCoordinator
from tjobs.delivery.allow_list import AllowList
from tjobs.errors import NotFound
from tjobs.model import SloCounts, SloMinute
from tjobs.stores.contracts.alerts import AlertSetting, AlertState
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.memory_alerts import MemoryAlertSettings

T0 = 1_800_000_000_000
RULE = Rule("rule_1", "a", "dlq", "dead_letters", {"threshold": 1, "window_minutes": 5}, ("chan_1",), repeat_s=600)
FIRING = [Finding("dead_letters", "3 dead letters")]


class Book:
    """The states as the evaluator would keep them: each step applied."""

    def __init__(self) -> None:
        self.states: dict[str, AlertState] = {}

    def step(self, findings: list[Finding] | None, now_ms: int) -> list[tuple[str, bool]]:
        steps = decide(RULE, findings, self.states, now_ms)
        for each in steps:
            self.states[each.state.subject] = each.state
        return [(each.notification.status, each.notification.repeat) for each in steps]


def test_firing_is_sent_once_repeated_after_the_interval_and_resolved_once() -> None:
    book = Book()
    assert book.step(FIRING, T0) == [("firing", False)]
    assert book.step(FIRING, T0 + 30_000) == []  # deduplicated
    assert book.step(FIRING, T0 + 599_999) == []
    assert book.step(FIRING, T0 + 600_000) == [("firing", True)]  # the repeat interval
    assert book.step(FIRING, T0 + 900_000) == []
    assert book.step([], T0 + 960_000) == [("resolved", False)]
    assert book.step([], T0 + 990_000) == []
    assert book.step(FIRING, T0 + 1_000_000) == [("firing", False)]  # fires again: a new firing
    assert book.states["dead_letters"].since_ms == T0 + 1_000_000


def test_unknown_figures_change_nothing() -> None:
    book = Book()
    book.step(FIRING, T0)
    assert book.step(None, T0 + 10_000_000) == []
    assert book.states["dead_letters"].status == "firing"


def test_a_firing_that_reached_no_channel_is_sent_again_at_the_next_pass() -> None:
    book = Book()
    book.step(FIRING, T0)
    state = book.states["dead_letters"]
    book.states["dead_letters"] = replace(state, notified_at_ms=UNSENT)
    assert book.step(FIRING, T0 + 30_000) == [("firing", False)]


def test_repeat_zero_never_repeats() -> None:
    rule = Rule(RULE.id, "a", "dlq", "dead_letters", RULE.params, RULE.channels, repeat_s=0)
    steps = decide(rule, FIRING, {}, T0)
    later = decide(rule, FIRING, {"dead_letters": steps[0].state}, T0 + 86_400_000)
    assert later == []


@dataclass
class RecordingSender:
    sent: list[tuple[str, Notification]] = field(default_factory=list)
    fail: bool = False

    async def send(self, channel: Channel, notification: Notification, allow: AllowList) -> str | None:
        await asyncio.sleep(0)  # let another evaluator interleave here
        if self.fail:
            return "refused"
        self.sent.append((channel.id, notification))
        return None


async def _setup(store: MemoryTaskStore, alerts: MemoryAlertSettings) -> None:
    await alerts.put_alert_setting(AlertSetting("rule", RULE.id, "a", RULE.document(), 1, 1))
    channel = {"name": "c", "kind": "slack", "settings": {"url": "http://example.com/x"}}
    await alerts.put_alert_setting(AlertSetting("channel", "chan_1", "a", channel, 1, 1))
    await store.add_slo_minutes("n1", [SloMinute("a", T0 // 60_000, SloCounts(dead=3))])


def _evaluator(store: MemoryTaskStore, alerts: MemoryAlertSettings, sender: RecordingSender) -> AlertEvaluator:
    async def no_allow_list(app_id: str) -> AllowList:
        return AllowList.parse([])

    coordinator = LocalCoordinator(store.topology.shard_count, "n1")
    return AlertEvaluator(alerts, store, coordinator, sender, _Clock(), no_allow_list, 60)  # type: ignore[arg-type]


class _Clock:
    def now_ms(self) -> int:
        return T0


@pytest.mark.asyncio
async def test_two_evaluators_at_once_send_each_notification_once() -> None:
    store, alerts, sender = MemoryTaskStore(), MemoryAlertSettings(), RecordingSender()
    await _setup(store, alerts)
    first, second = _evaluator(store, alerts, sender), _evaluator(store, alerts, sender)
    await asyncio.gather(first.evaluate(T0), second.evaluate(T0))
    assert [(channel, n.status) for channel, n in sender.sent] == [("chan_1", "firing")]
    # a new leader reads what was sent: nothing again while it fires, the resolve once
    await _evaluator(store, alerts, sender).evaluate(T0 + 60_000)
    assert len(sender.sent) == 1
    await asyncio.gather(first.evaluate(T0 + 7 * 60_000), second.evaluate(T0 + 7 * 60_000))  # out of the window
    assert [n.status for _, n in sender.sent] == ["firing", "resolved"]


@pytest.mark.asyncio
async def test_a_firing_notification_no_channel_took_is_sent_at_the_next_pass() -> None:
    store, alerts, sender = MemoryTaskStore(), MemoryAlertSettings(), RecordingSender(fail=True)
    await _setup(store, alerts)
    evaluator = _evaluator(store, alerts, sender)
    assert await evaluator.evaluate(T0) == 0
    sender.fail = False
    assert await evaluator.evaluate(T0 + 30_000) == 1
    assert await evaluator.evaluate(T0 + 60_000) == 0


@pytest.mark.asyncio
async def test_a_channel_whose_app_is_gone_fails_that_send_without_stopping_the_pass() -> None:
    store, alerts, sender = MemoryTaskStore(), MemoryAlertSettings(), RecordingSender()
    await _setup(store, alerts)

    async def gone(app_id: str) -> AllowList:
        raise NotFound("app", app_id)

    coordinator = LocalCoordinator(store.topology.shard_count, "n1")
    evaluator = AlertEvaluator(alerts, store, coordinator, sender, _Clock(), gone, 60)  # type: ignore[arg-type]
    assert await evaluator.evaluate(T0) == 0
    (state,) = await alerts.read_alert_states()
    assert state.status == "firing" and state.notified_at_ms == UNSENT  # tried again next pass
