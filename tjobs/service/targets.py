"""Named delivery targets behind the API (create, read, list, change, delete), and the cache delivery
reads them through.

**Versions.** Every change moves a target's ``version``. An update carrying ``version`` (as last read)
is refused with 409 ``version_conflict`` if the target moved since, as a task's update is; without
it the last change wins (the store's compare-and-set still orders concurrent writers).

**Credentials** are accepted on create and update and never answered: answers show their keys, each
value ``***`` (:func:`tjobs.targets.codec.target_json`); log lines name the target and its protocol
only, and validation errors name the key, never the value.

**SSRF.** An HTTP target's URLs are judged at create and update like inline callback URLs (the URL
model, the node's policy, the app's allow-list) and again at every send. Any other protocol connects
only to an address the operator allowed (``targets.allowed_addresses``,
:mod:`tjobs.targets.addresses`): anything else is a 422 here and a permanent refusal at send.

**Deleting a target that tasks still name** is a 409 ``target_in_use`` whose ``details.tasks`` says
how many (tasks that can still fire: active or paused). The count is bounded by the references, not
by the tasks: each task naming targets has one ``task_targets_TT`` row per target in its own shard,
written in the same transaction as the task (:meth:`tjobs.stores.base.TaskStore.
count_target_references`), so a delete reads that target's index range once per logical database,
never a task row it does not need, and the count is exact at the instant it is read (no counter to
drift across servers, since a task and its references commit together on one server). A task
registered between the count and the delete (on another node) names a target that is gone: its
flows dead-letter with an error naming the target, never silently.

**The directory** (:class:`TargetDirectory`) caches targets per ``(app, name)`` for
``targets.cache_ttl_s`` (5 s by default), so delivery reads a target once per TTL, not once per
attempt. A change made through this node's API replaces the entry at once, so this node's next
attempt uses it; another node's entry expires within ``cache_ttl_s``, after which its next attempt
reads the change.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

from tjobs import wire
from tjobs.clock import Clock
from tjobs.delivery.ssrf import TargetGuard, allow_list_of_app
from tjobs.errors import Conflict, InvalidInput, NotFound, TargetInUse, TargetVersionConflict
from tjobs.model import App
from tjobs.service import audit_scope
from tjobs.service.cursors import decode_position, encode_position
from tjobs.service.directory_cache import CachePolicy, DirectoryCache
from tjobs.service.target_requests import kept_credentials, parse_create, parse_update
from tjobs.settings import Settings
from tjobs.stores.base import TaskStore
from tjobs.targets.addresses import AddressAllowList
from tjobs.targets.model import BROKER_PROTOCOLS, HttpTarget, RetryPolicy, Target, TargetSettings

logger = logging.getLogger(__name__)

LIST_PAGE_MAX = 1000
UPDATE_ATTEMPTS = 3  # an update without ``version`` re-reads and retries when another lands first


class TargetDirectory:
    """Targets by ``(app, name)``: a :class:`tjobs.service.directory_cache.DirectoryCache` (fresh for
    ``ttl_ms``, read again ahead of expiry while in use, served from the last good copy for up to
    ``serve_stale_ms`` more while the apps server is frozen or cut). A miss reads the store once per
    key at a time (every caller waiting on that key shares the read). Misses are not cached: a target
    created on another node is found by the next read; a target the store says is gone is dropped."""

    def __init__(
        self,
        store: TaskStore,
        clock: Clock,
        ttl_ms: int = 5000,
        serve_stale_ms: int = 300_000,
        read_deadline_ms: int = 200,
    ) -> None:
        self._store = store
        self._targets: DirectoryCache[tuple[str, str], Target] = DirectoryCache(
            self._read, clock, CachePolicy(ttl_ms, serve_stale_ms, read_deadline_ms), "targets"
        )

    def cached(self, app_id: str, name: str) -> Target | None:
        """The target without touching the store (``None``: ask :meth:`get`): fresh, or the last good
        copy while the apps server is silent (within ``serve_stale_ms``)."""
        return self._targets.cached((app_id, name))

    async def get(self, app_id: str, name: str, miss_deadline_ms: int | None = None) -> Target | None:
        """The target (cached, else read once for every caller waiting on it); ``None`` if the app has
        no target of that name. Raises what the store raises (``StorageUnavailable``) when there is no
        copy to serve, and ``StorageUnavailable`` when the read outlives ``miss_deadline_ms`` (if given)."""
        return await self._targets.get((app_id, name), miss_deadline_ms)

    async def _read(self, key: tuple[str, str]) -> Target | None:
        return await self._store.get_target(*key)

    def put(self, target: Target) -> None:
        self._targets.put((target.app_id, target.name), target)

    def forget(self, app_id: str, name: str) -> None:
        self._targets.forget((app_id, name))

    async def close(self) -> None:
        """Cancel the reads under way (the node is stopping)."""
        await self._targets.close()


class TargetService:
    """Target management behind ``/v1/targets`` (see the module docstring)."""

    def __init__(
        self, store: TaskStore, directory: TargetDirectory, settings: Settings, clock: Clock, guard: TargetGuard
    ) -> None:
        self._store = store
        self._directory = directory
        self._settings = settings
        self._clock = clock
        self._guard = guard
        self.allowed_addresses = AddressAllowList.parse(settings.targets.allowed_addresses)

    async def create(self, app: App, body: Any) -> Target:
        fields = parse_create(body, self._settings.limits)
        assert fields.name is not None and fields.settings is not None and fields.retry is not None
        await self._check_addresses(app, fields.settings, body["settings"])
        now_ms = self._clock.now_ms()
        target = Target(
            app_id=app.id,
            name=fields.name,
            settings=fields.settings,
            version=1,
            retry=fields.retry,
            credentials=fields.credentials or {},
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
        )
        await self._store.put_target(target, None)
        self._directory.put(target)
        logger.info(
            "target %s (%s) created for app %s",
            target.name,
            target.protocol.value,
            app.id,
            extra={"action": "target_created"},
        )
        return target

    async def get(self, app: App, name: str) -> Target:
        target = await self._store.get_target(app.id, name)
        if target is None:
            raise NotFound("target", name)
        return target

    async def references(self, app: App, name: str) -> int:
        """How many of ``app``'s tasks that can still fire (active or paused) name the target ``name``."""
        return await self._store.count_target_references(app.id, name)

    async def list_targets(
        self, app: App, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[Target], str | None]:
        """The app's targets by name; the cursor is the last name of the previous page."""
        if not 1 <= limit <= LIST_PAGE_MAX:
            raise InvalidInput("limit", f"must be within 1..{LIST_PAGE_MAX}")
        after = None if cursor is None else _decode_cursor(cursor)
        page = await self._store.list_targets(app.id, after, limit + 1)
        more = len(page) > limit
        page = page[:limit]
        return page, (_encode_cursor(page[-1].name) if more else None)

    async def update(self, app: App, name: str, body: Any) -> Target:
        """Apply the body's fields to the stored target (see the module docstring for ``version``)."""
        for _ in range(UPDATE_ATTEMPTS):
            current = await self.get(app, name)
            fields = parse_update(body, current.protocol, self._settings.limits, current.credentials)
            if fields.version is not None and fields.version != current.version:
                raise TargetVersionConflict(name, fields.version, current.version)
            settings = fields.settings or current.settings
            credentials = fields.credentials
            if credentials is None:  # kept: still valid for the (maybe changed) protocol?
                probe = replace(current, settings=settings)
                credentials = kept_credentials(
                    current.credentials, current.protocol, probe.protocol, self._settings.limits
                )
            await self._check_addresses(app, settings, body.get("settings"))
            audit_scope.saw_before("target", name, current)
            changed = replace(
                current,
                settings=settings,
                retry=current.retry if fields.retry is None else fields.retry,
                credentials=credentials,
                version=current.version + 1,
                updated_at_ms=self._clock.now_ms(),
            )
            try:
                await self._store.put_target(changed, current.version)
            except TargetVersionConflict:
                if fields.version is not None:
                    raise
                continue  # another change landed first: apply this one to it
            self._directory.put(changed)
            logger.info(
                "target %s (%s) of app %s is at version %d",
                name,
                changed.protocol.value,
                app.id,
                changed.version,
                extra={"action": "target_updated"},
            )
            return changed
        raise Conflict(f"target {name!r} changed {UPDATE_ATTEMPTS} times while this update was applied; retry")

    async def delete(self, app: App, name: str) -> None:
        """Delete the target unless tasks that can still fire name it (409 with how many)."""
        audit_scope.saw_before("target", name, await self.get(app, name))
        naming = await self._store.count_target_references(app.id, name)
        if naming:
            raise TargetInUse(name, naming)
        await self._store.delete_target(app.id, name)
        self._directory.forget(app.id, name)
        logger.info("target %s of app %s deleted", name, app.id, extra={"action": "target_deleted"})

    async def check_named(
        self, app: App, names: tuple[str, ...], unicast: bool, *, run_on_publish: bool = False
    ) -> None:
        """422 naming the field (``callback.target`` or ``callback.targets[i]``) for a name the app
        has no target of, and ``callback.run_on_publish`` for a target that is no broker's; the
        registration of a task naming targets. A target this node has no copy of waits for the apps
        server at most ``storage.create_timeout_s`` (then 503 ``storage_unavailable``)."""
        deadline_ms = int(self._settings.storage.create_timeout_s * 1000)
        for index, name in enumerate(names):
            target = await self._directory.get(app.id, name, deadline_ms)
            if target is None:
                field = "callback.target" if unicast else f"callback.targets[{index}]"
                raise InvalidInput(field, f"the app has no target named {name!r}", "unknown_target")
            if run_on_publish and target.protocol not in BROKER_PROTOCOLS:
                raise InvalidInput(
                    "callback.run_on_publish",
                    f"target {name!r} is {target.protocol.value}, not a broker (amqp, nats, redis_stream): it "
                    "accepts a run by its answer (202 with tjobs-run: accepted)",
                    "broker_run",
                )

    async def retry_policies(self, app: App, names: tuple[str, ...]) -> list[RetryPolicy]:
        """The retry policies of the named targets that exist (through the directory)."""
        found = [await self._directory.get(app.id, name) for name in names]
        return [target.retry for target in found if target is not None]

    async def _check_addresses(self, app: App, settings: TargetSettings, request: Any) -> None:
        """The SSRF rules (see the module docstring); ``request`` is the settings object as sent, to
        name ``settings.url`` or ``settings.urls[i]`` as it was spelled."""
        if isinstance(settings, HttpTarget):
            allow = allow_list_of_app(app.settings)
            unicast = isinstance(request, dict) and "url" in request
            for index, url in enumerate(settings.urls):
                reason = await self._guard.refusal(url, allow)
                if reason is not None:
                    field = "settings.url" if unicast else f"settings.urls[{index}]"
                    raise InvalidInput(field, f"target refused: {reason}", "target_refused")
            return
        refusal = self.allowed_addresses.refusal(settings)
        if refusal is not None:
            field, reason = refusal
            raise InvalidInput(field, f"target refused: {reason}", "target_refused")


TARGET_CURSOR = "targets"
_TARGET_NAME = re.compile(wire.TARGET_NAME_PATTERN)


def _encode_cursor(name: str) -> str:
    return encode_position(TARGET_CURSOR, (name,))


def _decode_cursor(cursor: str) -> str:
    """The last name of the previous page; a cursor this listing did not return (another listing's, a
    tampered one, a position no target name can hold) is a 422 ``bad_cursor`` naming ``cursor``."""
    (name,) = decode_position(cursor, TARGET_CURSOR, (str,))
    if not _TARGET_NAME.fullmatch(str(name)):
        raise InvalidInput("cursor", "not a cursor this API returned", "bad_cursor")
    return str(name)
