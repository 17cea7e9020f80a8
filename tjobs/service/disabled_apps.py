"""The apps an operator has disabled, known to every node without a read on the fire path.

While an app is disabled its tasks do not fire: the fire planner declines their fires inside the fire
transaction (:class:`tjobs.firing.planner.FirePlanner`: the task stays at its instant, untouched, and no
flow is written) and the runner keeps them out of the wheel (:meth:`tjobs.firing.runner.JobRunner._offer`).
Both ask this set, a frozenset membership test per fire and per offer. When an app is enabled again the
runner reloads its owned shards (:meth:`tjobs.firing.runner.JobRunner.reload`), so the overdue tasks fire
at once under their misfire policy instead of waiting for the next cycle load.

A node learns of a change made through its own API at once (:meth:`DisabledApps.changed`) and of one
made on another node within ``refresh_s``: each pass reads the apps table once (apps are few). Flows
committed before the disable are still delivered and retried.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from tjobs.model import App
from tjobs.periodic import PeriodicPass
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

REFRESH_S = 5.0

Listener = Callable[[], Awaitable[None]]


class DisabledApps(PeriodicPass):
    name = "disabled_apps"

    def __init__(self, store: TaskStore, refresh_s: float = REFRESH_S) -> None:
        super().__init__(refresh_s)
        self._store = store
        self._ids: frozenset[str] = frozenset()
        self._on_enabled: list[Listener] = []

    def __contains__(self, app_id: object) -> bool:
        return app_id in self._ids

    @property
    def ids(self) -> frozenset[str]:
        return self._ids

    def subscribe(self, on_enabled: Listener) -> None:
        """``on_enabled()`` is awaited whenever an app leaves the set (the runner's reload)."""
        self._on_enabled.append(on_enabled)

    async def start(self) -> None:
        """Read the set once before the node loads anything, then refresh it every ``refresh_s``."""
        await self.run_once()
        await super().start()

    async def run_once(self) -> int:
        apps = await self._store.list_apps()
        await self._replace(frozenset(app.id for app in apps if app.disabled_at_ms is not None))
        return len(self._ids)

    async def changed(self, app: App) -> None:
        """This node's API disabled, enabled or deleted ``app`` (``app`` as stored afterwards; a
        deleted app is passed disabled, so its tasks stay out of the wheel until they are gone)."""
        disabled = app.disabled_at_ms is not None
        await self._replace(self._ids | {app.id} if disabled else self._ids - {app.id})

    def forget(self, app_id: str) -> None:
        """The app's row is gone: nothing of it is left to fire."""
        self._ids = self._ids - {app_id}

    async def _replace(self, ids: frozenset[str]) -> None:
        enabled = self._ids - ids
        disabled = ids - self._ids
        self._ids = ids
        if disabled:
            logger.info("apps disabled: %s", ", ".join(sorted(disabled)), extra={"action": "apps_disabled"})
        if enabled:
            logger.info("apps enabled: %s", ", ".join(sorted(enabled)), extra={"action": "apps_enabled"})
            for listener in self._on_enabled:
                await listener()
