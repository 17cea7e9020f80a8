"""A node's alerts: the service the API and the console use, and the evaluator pass (which acts only
while the node is the dispatcher leader), over the store's :class:`AlertSettings`."""

from __future__ import annotations

from tjobs.alerts.evaluator import AlertEvaluator
from tjobs.alerts.sending import ChannelSender
from tjobs.alerts.service import AlertService
from tjobs.clock import Clock
from tjobs.cluster.base import Coordinator
from tjobs.delivery.allow_list import AllowList, allow_list_of_app
from tjobs.delivery.ssrf import TargetGuard
from tjobs.delivery.transport import Transport
from tjobs.service.apps import AppDirectory
from tjobs.settings import Settings
from tjobs.stores.alert_store import alert_settings_of
from tjobs.stores.base import TaskStore


class NodeAlerts:
    def __init__(
        self,
        settings: Settings,
        store: TaskStore,
        coordinator: Coordinator,
        apps: AppDirectory,
        guard: TargetGuard,
        transport: Transport,
        clock: Clock,
    ) -> None:
        self._enabled = settings.alerts.enabled
        self._apps = apps
        self.settings = alert_settings_of(store)
        self.service = AlertService(self.settings, guard, clock, self._allow_list_of)
        sender = ChannelSender(transport, settings.alerts, clock, settings.callbacks.user_agent)
        self.evaluator = AlertEvaluator(
            self.settings, store, coordinator, sender, clock, self._allow_list_of, settings.alerts.interval_s
        )

    async def _allow_list_of(self, app_id: str) -> AllowList:
        return allow_list_of_app((await self._apps.get(app_id)).settings)

    async def start(self) -> None:
        if self._enabled:
            await self.evaluator.start()

    async def stop(self) -> None:
        await self.evaluator.stop()
