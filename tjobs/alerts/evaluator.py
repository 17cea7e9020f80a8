"""The alert pass: every ``alerts.interval_s``, on ONE node of the cluster, evaluate every enabled rule
and send what :func:`tjobs.alerts.notifier.decide` calls for.

Once per cluster: the pass runs on every node but acts only on the dispatcher leader
(:class:`tjobs.cluster.etcd.EtcdCoordinator`'s ``is_leader`` in ``/v1/cluster``; the embedded node is
its own leader). Leadership can overlap briefly at a change; the states are written by
compare-and-set before anything is sent, so of two passes at once only the one whose write landed
sends, and a new leader reads what the last one sent (a subject already firing is not announced
again, only repeated when its ``repeat_s`` is due).

A firing notification that reached none of its rule's channels is written back as unsent
(:data:`tjobs.alerts.notifier.UNSENT`) and tried again at the next pass; a resolved one is not.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from tjobs.alerts.channels import Channel, Notification, channel_from_document
from tjobs.alerts.figures import read_figures
from tjobs.alerts.notifier import UNSENT, Step, decide
from tjobs.alerts.rules import Rule, evaluate, rule_from_document
from tjobs.alerts.sending import ChannelSender
from tjobs.clock import Clock
from tjobs.cluster.base import Coordinator
from tjobs.delivery.allow_list import EMPTY_ALLOW_LIST, AllowList
from tjobs.errors import TjobsError
from tjobs.periodic import PeriodicPass
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.alerts import AlertSettings, AlertState

logger = logging.getLogger(__name__)

AllowListOf = Callable[[str], Awaitable[AllowList]]
"""An app's callback allow-list (its channels' URLs are judged with it)."""


def leads(coordinator: Coordinator) -> bool:
    """Whether this node is the one that evaluates: the dispatcher leader, or the embedded node."""
    view = coordinator.describe()
    return view.get("mode") == "embedded" or bool(view.get("is_leader"))


class AlertEvaluator(PeriodicPass):
    name = "alerts"

    def __init__(
        self,
        alerts: AlertSettings,
        store: TaskStore,
        coordinator: Coordinator,
        sender: ChannelSender,
        clock: Clock,
        allow_list_of: AllowListOf,
        interval_s: float,
    ) -> None:
        super().__init__(interval_s)
        self._alerts = alerts
        self._store = store
        self._coordinator = coordinator
        self._sender = sender
        self._clock = clock
        self._allow_list_of = allow_list_of
        self.last_pass_ms: int | None = None  # when this node last evaluated (None: never, or not the leader)

    async def run_once(self) -> int:
        if not leads(self._coordinator):
            return 0
        return await self.evaluate(self._clock.now_ms())

    async def evaluate(self, now_ms: int) -> int:
        """One evaluation of every enabled rule at ``now_ms``; how many notifications were sent."""
        rules = [rule_from_document(s.id, s.app_id, s.document) for s in await self._alerts.list_alert_settings("rule")]
        rules = [rule for rule in rules if rule.enabled]
        channels = {
            s.id: channel_from_document(s.id, s.app_id, s.document)
            for s in await self._alerts.list_alert_settings("channel")
        }
        states: dict[str, dict[str, AlertState]] = {}
        for state in await self._alerts.read_alert_states():
            states.setdefault(state.rule_id, {})[state.subject] = state
        figures = await read_figures(rules, self._store, self._coordinator, now_ms)
        sent = 0
        for rule in rules:
            for step in decide(rule, evaluate(rule, figures, now_ms), states.get(rule.id, {}), now_ms):
                if await self._alerts.save_alert_state(step.state, step.expected_version):
                    sent += await self._notify(rule, step, channels)
        self.last_pass_ms = now_ms
        return sent

    async def _notify(self, rule: Rule, step: Step, channels: dict[str, Channel]) -> int:
        notification = step.notification
        sent = 0
        for channel_id in rule.channels:
            channel = channels.get(channel_id)
            if channel is None or channel.app_id not in (None, rule.app_id):
                continue  # deleted since, or (never stored so) another app's
            try:
                allow = await self._allow_of(channel)
            except TjobsError as unread:  # the app is gone, or its database does not answer
                error: str | None = f"the app's allow-list was not read: {unread}"
            else:
                error = await self._sender.send(channel, notification, allow)
            if error is None:
                sent += 1
            else:
                logger.warning(
                    "alert %s to channel %s not sent: %s",
                    notification.id,
                    channel.id,
                    error,
                    extra={"action": "alert_send_failed", "rule_id": rule.id, "channel_id": channel.id},
                )
        _log_sent(notification, sent)
        if sent == 0 and rule.channels and notification.status == "firing":
            unsent = replace(step.state, notified_at_ms=UNSENT, version=step.state.version + 1)
            await self._alerts.save_alert_state(unsent, step.state.version)
        return sent

    async def _allow_of(self, channel: Channel) -> AllowList:
        return EMPTY_ALLOW_LIST if channel.app_id is None else await self._allow_list_of(channel.app_id)


def _log_sent(notification: Notification, channels: int) -> None:
    logger.info(
        "alert %s %s: %s (%d channels)",
        notification.status,
        notification.dedup_key,
        notification.summary,
        channels,
        extra={"action": f"alert_{notification.status}", "rule_id": notification.rule_id},
    )
