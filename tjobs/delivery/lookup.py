"""A committed flow's app and named targets, as the deliverer finds them (:class:`JobLookup`) before
the first attempt and, for the targets, again before every attempt.

The app comes from the app directory (:class:`AppSource`): cached, or read once for every flow waiting
on it (a flow whose app cannot be read now stays ``pending`` in the store, and the compensator re-drives
it). While the server holding the apps table does not answer, both directories serve the last good
copy for a bounded time (:mod:`tjobs.service.directory_cache`), so a delivery waits on that server at
most a short read deadline. A task naming targets (``callback.targets``) has them from the target directory
(:class:`TargetSource`, cached per app): read before the first attempt (a flow whose targets cannot be
read now stays ``pending`` too), and again before every attempt (one that cannot be read then keeps its
last version).

**Named targets.** A flow whose task names targets (``callback.targets``) sends to each of them,
tracked as ``target:<name>`` like a multicast URL (a retry goes only to the targets not yet
delivered). The targets come from the target directory (:class:`TargetSource`, cached per app;
:mod:`tjobs.service.targets`): read before the first attempt (a flow whose targets cannot be read
now stays ``pending`` for the compensator, like one whose app cannot), and again before every
attempt, so a changed target applies to the next attempt. A target deleted while tasks still name it
is a permanent failure naming the target (``target 'x' no longer exists``): the flow dead-letters,
never silently dropped. Budget precedence per field: the task's explicit ``callback`` value, else the
target's retry policy, else the node's default; with several targets each field takes the largest of
the targets' values (the most patient target sets the flow's budget, since retries only go to the
targets not delivered yet). A target's timeout (HTTP ``timeout_ms``, gRPC ``deadline_ms``) applies
unless the task sets ``timeout_ms``. A task with inline URLs pays for none of this: no lookup, no
extra work per attempt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tjobs.model import App, Flow, Task
from tjobs.targets.model import Target

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class CallbackJob:
    """A committed fire to deliver: the task as it was after the fire, its flow, and its app; for a
    task naming targets, each target as read (``None``: the app has no target of that name)."""

    task: Task
    flow: Flow
    app: App
    targets: dict[str, Target | None] | None = None


class TargetSource(Protocol):
    """Where the deliverer finds a flow's named targets (:class:`tjobs.service.targets.TargetDirectory`)."""

    def cached(self, app_id: str, name: str) -> Target | None:
        """The target without waiting: fresh, or the last good copy while its server is silent
        (``None``: ask :meth:`get`)."""
        ...

    async def get(self, app_id: str, name: str) -> Target | None:
        """The target, read if need be; ``None`` if the app has none of that name; raises if it
        cannot be read now."""
        ...


class AppSource(Protocol):
    """Where the deliverer finds a flow's app (:class:`tjobs.service.apps.AppDirectory`)."""

    def cached(self, app_id: str) -> App | None:
        """The app without waiting: fresh, or the last good copy while its server is silent."""
        ...

    async def get(self, app_id: str) -> App:
        """The app, read if need be (one read per app at a time); raises if it cannot be had."""
        ...


class JobLookup:
    def __init__(self, apps: AppSource | None, targets: TargetSource | None) -> None:
        self.apps = apps
        self.targets = targets

    def cached(self, task: Task, flow: Flow) -> CallbackJob | None:
        """The job from the directories' caches, without waiting (``None``: :meth:`read` it)."""
        assert self.apps is not None, "a deliverer without an app source only takes submit(job)"
        app = self.apps.cached(task.app_id)
        if app is not None:
            names = task.callback.targets
            if not names:
                return CallbackJob(task, flow, app)
            targets = self._cached_targets(app.id, names)
            if targets is not None:
                return CallbackJob(task, flow, app, targets)
        return None

    async def read(self, task: Task, flow: Flow) -> CallbackJob | None:
        """The job, its app and targets read if need be (``None``: one could not be read; logged)."""
        assert self.apps is not None
        try:
            app = await self.apps.get(task.app_id)
        except Exception:
            _deferred("app %s unavailable for flow %s", task, flow)
            return None
        targets: dict[str, Target | None] | None = None
        if task.callback.targets and self.targets is not None:
            try:
                targets = await self._read_targets(app.id, task.callback.targets)
            except Exception:
                _deferred("targets of app %s unavailable for flow %s", task, flow)
                return None
        return CallbackJob(task, flow, app, targets)

    def _cached_targets(self, app_id: str, names: tuple[str, ...]) -> dict[str, Target | None] | None:
        """Every named target from the directory's cache, or ``None`` if one must be read."""
        if self.targets is None:
            return None
        found: dict[str, Target | None] = {}
        for name in names:
            target = self.targets.cached(app_id, name)
            if target is None:
                return None
            found[name] = target
        return found

    async def _read_targets(self, app_id: str, names: Sequence[str]) -> dict[str, Target | None]:
        assert self.targets is not None
        source = self.targets
        read = await asyncio.gather(*(source.get(app_id, name) for name in names))
        return dict(zip(names, read, strict=True))

    async def refresh_targets(self, app_id: str, names: list[str], named: dict[str, Target | None]) -> None:
        """Read the targets again through the directory (cached for its TTL); one that cannot be read
        now keeps its last version."""
        source = self.targets
        if source is None:
            return
        stale = []
        for name in names:
            target = source.cached(app_id, name)
            if target is None:
                stale.append(name)
            else:
                named[name] = target
        if not stale:
            return
        read = await asyncio.gather(*(source.get(app_id, name) for name in stale), return_exceptions=True)
        for name, outcome in zip(stale, read, strict=True):
            if isinstance(outcome, BaseException):
                logger.warning(
                    "target %s of app %s could not be read (%s); its last version is used",
                    name,
                    app_id,
                    type(outcome).__name__,
                    extra={"action": "target_unavailable"},
                )
                continue
            named[name] = outcome


def _deferred(message: str, task: Task, flow: Flow) -> None:
    """Log (with its traceback) why ``flow`` of ``task`` is not delivered now: ``message`` takes the app id
    and the flow id. The flow stays pending in the store; the compensator re-drives it."""
    logger.exception(message, task.app_id, flow.id, extra={"action": "delivery_deferred", "flow_id": flow.id})
