"""Apps (tenants): their management (create, update, rotate) and a small cache in front of the store.

Key rotation: a new API key replaces the old at once (its hash is what the store keeps). A new signing
secret goes first in ``App.secrets`` and the old one keeps signing beside it for a grace window
(``settings.retiring_secrets`` holds its expiry, by hash); afterwards it is dropped on read, and from
the store at the next rotation or update.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
from dataclasses import replace
from typing import Any

from tjobs.clock import Clock
from tjobs.delivery.signing import generate_secret
from tjobs.delivery.ssrf import AllowList
from tjobs.errors import ConfirmationRequired, InvalidInput, NotFound, known_object
from tjobs.model import DISABLED_AT, App
from tjobs.service import audit_scope
from tjobs.service.cursors import LIST_PAGE_MAX, Page, decode_position, encode_position
from tjobs.service.directory_cache import CachePolicy, DirectoryCache
from tjobs.service.disabled_apps import DisabledApps
from tjobs.service.tasks import SHARD_WINDOW
from tjobs.service.validation import check_name
from tjobs.settings import Settings
from tjobs.stores.base import TaskStore
from tjobs.wire import APP_ID_PATTERN, CallbackDefaults

DEFAULT_SECRET_GRACE_S = 86_400
MAX_SECRET_GRACE_S = 30 * 86_400
MAX_ACTIVE_TASKS = 1_000_000_000_000  # a per-app quota; beyond it a count could not be stored
DELETE_BATCH = 1000  # tasks deleted per transaction when an app is deleted
_APP_ID = re.compile(APP_ID_PATTERN)
_CALLBACK_DEFAULT_KEYS = frozenset(CallbackDefaults.model_fields)
_APP_KEYS = frozenset(
    {
        "name",
        "rate_limit_per_s",
        "max_concurrency",
        "allowed_callback_hosts",
        "callback_defaults",
        "max_active_tasks",
        "api_rate_limit_per_s",
        "create_rate_limit_per_s",
        "run_log_retention_days",
    }
)


def hash_api_key(api_key: str) -> str:
    """API keys are stored as SHA-256 hex digests; they are random 32-byte tokens, so no salt is needed."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def generate_api_key() -> str:
    return "tjk_" + secrets.token_urlsafe(32)


def _secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def live_secrets(app: App, now_ms: int) -> App:
    """``app`` without the retired secrets whose grace window has ended (the newest always stays)."""
    retiring = app.settings.get("retiring_secrets")
    if not retiring:
        return app
    expired = {r["sha256"] for r in retiring if r["until_ms"] <= now_ms}
    if not expired:
        return app
    kept = [s for i, s in enumerate(app.secrets) if i == 0 or _secret_hash(s) not in expired]
    settings = dict(app.settings)
    settings["retiring_secrets"] = [r for r in retiring if r["sha256"] not in expired]
    return replace(app, secrets=kept, settings=settings)


def validate_app_fields(body: Any, settings: Settings, *, creating: bool) -> dict[str, Any]:
    """Check an app create/update body; return the fields it sets (each named on error)."""
    known_object(body, _APP_KEYS)
    fields: dict[str, Any] = {}
    if creating or "name" in body:
        fields["name"] = check_name(body.get("name"), "name", 100)
    callbacks = settings.callbacks
    if creating or "rate_limit_per_s" in body:
        rate = body.get("rate_limit_per_s", callbacks.default_rate_limit_per_s)
        if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 < rate <= 1_000_000:
            raise InvalidInput("rate_limit_per_s", "must be a number within (0, 1000000]")
        fields["rate_limit_per_s"] = float(rate)
    if creating or "max_concurrency" in body:
        concurrency = body.get("max_concurrency", callbacks.default_max_concurrency)
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or not 1 <= concurrency <= 10_000:
            raise InvalidInput("max_concurrency", "must be an integer within 1..10000")
        fields["max_concurrency"] = concurrency
    if "allowed_callback_hosts" in body:
        hosts = body["allowed_callback_hosts"]
        if not isinstance(hosts, list) or len(hosts) > 100 or not all(isinstance(h, str) for h in hosts):
            raise InvalidInput("allowed_callback_hosts", "must be a list of at most 100 host names or networks")
        AllowList.parse(hosts)
        fields["allowed_callback_hosts"] = hosts
    if "callback_defaults" in body:
        fields["callback_defaults"] = _callback_defaults(body["callback_defaults"], settings)
    if "max_active_tasks" in body:
        quota = body["max_active_tasks"]
        if quota is not None and (
            not isinstance(quota, int) or isinstance(quota, bool) or not 0 <= quota <= MAX_ACTIVE_TASKS
        ):
            raise InvalidInput(
                "max_active_tasks", f"must be an integer within 0..{MAX_ACTIVE_TASKS} (0: the node default)"
            )
        fields["max_active_tasks"] = quota
    for name in ("api_rate_limit_per_s", "create_rate_limit_per_s"):  # API limits (tjobs.api.ratelimit)
        if name in body:
            rate = body[name]
            if rate is not None and (
                not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 < rate <= 1_000_000
            ):
                raise InvalidInput(name, "must be a number within (0, 1000000], or null for the node default")
            fields[name] = None if rate is None else float(rate)
    if "run_log_retention_days" in body:
        fields["run_log_retention_days"] = _run_log_retention(body["run_log_retention_days"], settings)
    return fields


def _run_log_retention(days: Any, settings: Settings) -> float | None:
    """An app's run log retention (README "Job runs"): days after a flow ended that its run log is kept,
    within (0, retention.days]; null: the flow's own retention. A log cannot outlive its flow, so a
    longer one is refused, not kept as asked and silently cut."""
    flows_days = settings.retention.days
    if days is None:
        return None
    if not isinstance(days, int | float) or isinstance(days, bool) or not days > 0:
        raise InvalidInput(
            "run_log_retention_days", "must be a number of days above 0, or null for the flows' retention"
        )
    if days > flows_days:
        raise InvalidInput(
            "run_log_retention_days",
            f"must be at most the node's flow retention, retention.days ({flows_days:g}): a run's log is purged "
            "with its flow at the latest",
            "exceeds_retention",
        )
    return float(days)


def _callback_defaults(value: Any, settings: Settings) -> dict[str, Any]:
    from tjobs.service.validation import parse_callback_request

    if not isinstance(value, dict):
        raise InvalidInput("callback_defaults", "must be an object")
    unknown = set(value) - _CALLBACK_DEFAULT_KEYS
    if unknown:
        raise InvalidInput(f"callback_defaults.{sorted(unknown)[0]}", "unknown field", "unknown_field")
    try:  # validate as a callback spec with a placeholder target
        parse_callback_request({**value, "url": "https://placeholder.invalid/"}, settings.limits)
    except InvalidInput as error:
        raise InvalidInput(
            error.field.replace("callback.", "callback_defaults.", 1), error.message.partition(": ")[2], error.code
        ) from None
    return dict(value)


_SETTINGS_FIELDS = (
    "allowed_callback_hosts",
    "callback_defaults",
    "max_active_tasks",
    "api_rate_limit_per_s",
    "create_rate_limit_per_s",
    "run_log_retention_days",
)


class AppService:
    """App management behind the admin API."""

    def __init__(
        self,
        store: TaskStore,
        directory: AppDirectory,
        settings: Settings,
        clock: Clock,
        disabled_apps: DisabledApps | None = None,
    ) -> None:
        self._store = store
        self._directory = directory
        self._settings = settings
        self._clock = clock
        self._disabled_apps = disabled_apps

    async def create(self, body: Any, app_id: str | None = None) -> tuple[App, str]:
        """Store a new app; returns it with its API key (shown once, stored only as a hash)."""
        fields = validate_app_fields(body, self._settings, creating=True)
        api_key = generate_api_key()
        app = App(
            id=app_id or f"app_{secrets.token_hex(6)}",
            name=fields["name"],
            api_key_hash=hash_api_key(api_key),
            secrets=[generate_secret()],
            rate_limit_per_s=fields["rate_limit_per_s"],
            max_concurrency=fields["max_concurrency"],
            created_at_ms=self._clock.now_ms(),
            settings={
                "allowed_callback_hosts": fields.get("allowed_callback_hosts", []),
                **{k: fields[k] for k in _SETTINGS_FIELDS[1:] if k in fields},
            },
        )
        await self._store.put_app(app)
        self._directory.put(app)
        return app, api_key

    async def get(self, app_id: str) -> App:
        """The stored app; :class:`NotFound` if none, or if ``app_id`` cannot be an app's id (no store asked)."""
        app = await self._store.get_app(app_id) if _APP_ID.fullmatch(app_id) else None
        if app is None:
            raise NotFound("app", app_id)
        return live_secrets(app, self._clock.now_ms())

    async def update(self, app_id: str, body: Any) -> App:
        fields = validate_app_fields(body, self._settings, creating=False)
        app = await self.get(app_id)
        audit_scope.saw_before("app", app_id, app)
        settings = dict(app.settings)
        for key in _SETTINGS_FIELDS:
            if key in fields:
                settings[key] = fields[key]
        app = replace(
            app,
            name=fields.get("name", app.name),
            rate_limit_per_s=fields.get("rate_limit_per_s", app.rate_limit_per_s),
            max_concurrency=fields.get("max_concurrency", app.max_concurrency),
            settings=settings,
        )
        await self.put(app)
        return app

    async def rotate(
        self, app_id: str, *, api_key: bool, secret: bool, grace_s: int = DEFAULT_SECRET_GRACE_S
    ) -> tuple[App, str | None]:
        """New API key (the old stops at once) and/or new signing secret (the old signs for ``grace_s``)."""
        if not 0 <= grace_s <= MAX_SECRET_GRACE_S:
            raise InvalidInput("grace_s", f"must be within 0..{MAX_SECRET_GRACE_S}")
        if not api_key and not secret:
            raise InvalidInput("rotate", "rotate api_key, secret or both")
        app = await self.get(app_id)
        audit_scope.saw_before("app", app_id, app)
        new_key: str | None = None
        if api_key:
            new_key = generate_api_key()
            self._directory.forget_key_hash(app.api_key_hash)
            app = replace(app, api_key_hash=hash_api_key(new_key))
        if secret:
            now_ms = self._clock.now_ms()
            settings = dict(app.settings)
            retiring = list(settings.get("retiring_secrets") or [])
            old = app.secrets[0]
            retiring.append({"sha256": _secret_hash(old), "until_ms": now_ms + grace_s * 1000})
            settings["retiring_secrets"] = retiring
            app = live_secrets(
                replace(app, secrets=[generate_secret(), *app.secrets], settings=settings),
                now_ms + (1 if grace_s == 0 else 0),
            )
        await self.put(app)
        return app, new_key

    async def stored(self, app_id: str) -> App | None:
        """The app as stored, every secret kept (expired ones too); ``None`` if there is none."""
        return await self._store.get_app(app_id)

    async def put(self, app: App) -> None:
        """Store ``app`` as given (a created, edited or bootstrapped app) and refresh the directory's copy."""
        await self._store.put_app(app)
        self._directory.put(app)

    async def list_page(self, limit: int = 100, cursor: str | None = None) -> Page:
        """Every app by ascending id; the cursor is the last id listed."""
        if not 1 <= limit <= LIST_PAGE_MAX:
            raise InvalidInput("limit", f"must be within 1..{LIST_PAGE_MAX}")
        after = None if cursor is None else str(decode_position(cursor, "apps", (str,))[0])
        now_ms = self._clock.now_ms()
        apps = [app for app in await self._store.list_apps() if after is None or app.id > after]
        page = [live_secrets(app, now_ms) for app in apps[:limit]]
        return Page(page, encode_position("apps", (page[-1].id,)) if len(apps) > limit else None)

    async def set_disabled(self, app_id: str, disabled: bool) -> App:
        """Disable (its key answers 403, its tasks do not fire) or enable again (its tasks resume
        under their misfire policy); doing either twice changes nothing."""
        app = await self.get(app_id)
        audit_scope.saw_before("app", app_id, app)
        if (app.disabled_at_ms is not None) == disabled:
            return app
        settings = {k: v for k, v in app.settings.items() if k != DISABLED_AT}
        if disabled:
            settings[DISABLED_AT] = self._clock.now_ms()
        app = replace(app, settings=settings)
        await self.put(app)
        if self._disabled_apps is not None:
            await self._disabled_apps.changed(app)
        return app

    async def delete(self, app_id: str, confirm: str | None) -> int:
        """Delete the app with its tasks (their pending flows cancelled; flows stay as history until
        retention) and its targets; ``confirm`` must repeat the app id. The app is disabled first, so
        nothing of it fires or is changed meanwhile, and a call cut short can be repeated: it goes on
        where the first stopped. Returns how many tasks were deleted."""
        await self.get(app_id)
        if confirm != app_id:
            raise ConfirmationRequired(
                "confirm", f"deleting an app deletes all its tasks: repeat its id, ?confirm={app_id}"
            )
        app = await self.set_disabled(app_id, True)
        self._directory.forget_key_hash(app.api_key_hash)
        now_ms = self._clock.now_ms()
        shards = list(range(self._store.topology.shard_count))
        deleted = 0
        for start in range(0, len(shards), SHARD_WINDOW):
            counts = await asyncio.gather(
                *(self._delete_tasks(app_id, shard, now_ms) for shard in shards[start : start + SHARD_WINDOW])
            )
            deleted += sum(counts)
        while targets := await self._store.list_targets(app_id, None, DELETE_BATCH):
            for target in targets:
                await self._store.delete_target(app_id, target.name)
        await self._store.delete_app(app_id)
        self._directory.invalidate(app_id)
        self._directory.forget_key_hash(app.api_key_hash)
        if self._disabled_apps is not None:
            self._disabled_apps.forget(app_id)
        return deleted

    async def _delete_tasks(self, app_id: str, shard: int, now_ms: int) -> int:
        deleted = 0
        while True:
            count = await self._store.delete_app_tasks(app_id, shard, DELETE_BATCH, now_ms)
            deleted += count
            if count < DELETE_BATCH:
                return deleted


class AppDirectory:
    """Apps by id for the fire and delivery paths, and by API key hash for the API's authentication, so
    neither waits on the apps server: two :class:`tjobs.service.directory_cache.DirectoryCache` (fresh for
    ``ttl_ms``, read again ahead of expiry while in use, served from the last good copy for up to
    ``serve_stale_ms`` more while the apps server is frozen or cut, dropped as soon as the server says
    the app or key is gone: deleted, or the key rotated).

    A miss reads the store once per app at a time: when an app's entry expires in the middle of a
    burst, every fire and send that misses it shares the one query instead of each sending its own.
    So does a key's: when a key's entry expires under a burst of creates, the requests in flight
    share one lookup by its hash (each sending its own was 3 % of a node's CPU at 64 creates in flight).
    A key with no copy to serve (never accepted by this node, or past the bound) waits for the apps
    server at most ``key_miss_deadline_ms``, then :class:`tjobs.errors.StorageUnavailable` (503).
    """

    def __init__(
        self,
        store: TaskStore,
        clock: Clock,
        ttl_ms: int = 10_000,
        serve_stale_ms: int = 300_000,
        read_deadline_ms: int = 200,
        key_miss_deadline_ms: int = 5_000,
    ) -> None:
        self._store = store
        self._clock = clock
        self._apps: DirectoryCache[str, App] = DirectoryCache(
            self._read_or_none, clock, CachePolicy(ttl_ms, serve_stale_ms, read_deadline_ms), "apps"
        )
        self._by_key_hash: DirectoryCache[str, App] = DirectoryCache(
            self._look_up,
            clock,
            CachePolicy(ttl_ms, serve_stale_ms, read_deadline_ms),
            "api keys",
        )
        self._key_miss_deadline_ms = key_miss_deadline_ms

    async def get(self, app_id: str, miss_deadline_ms: int | None = None) -> App:
        """The app (cached, else read once for every caller waiting on it); :class:`NotFound` if none.
        A caller that is cancelled leaves the shared read running for the others; one that passes
        ``miss_deadline_ms`` (an API request) waits that long at most when there is no copy to serve,
        then gets :class:`tjobs.errors.StorageUnavailable`."""
        app = await self._apps.get(app_id, miss_deadline_ms)
        if app is None:
            raise NotFound("app", app_id)
        return app

    async def _read_or_none(self, app_id: str) -> App | None:
        try:
            return await self._read(app_id)
        except NotFound:
            return None

    async def _read(self, app_id: str) -> App:
        app = await self._store.get_app(app_id)
        if app is None:
            raise NotFound("app", app_id)
        return live_secrets(app, self._clock.now_ms())

    async def close(self) -> None:
        """Cancel the reads under way (the node is stopping)."""
        await self._apps.close()
        await self._by_key_hash.close()

    async def authenticate(self, api_key: str, key_hash: str | None = None) -> App | None:
        """The app owning ``api_key`` (``None``: no app has it); the key is hashed (``key_hash``, when the
        caller hashed it already), and the lookup is by the hash (an index). Within the staleness bound
        a silent apps server is answered from the copy (see the class docstring); a caller that is
        cancelled leaves the shared lookup running for the others."""
        key_hash = hash_api_key(api_key) if key_hash is None else key_hash
        return await self._by_key_hash.get(key_hash, self._key_miss_deadline_ms)

    async def _look_up(self, key_hash: str) -> App | None:
        app = await self._store.find_app_by_key_hash(key_hash)
        if app is None or not hmac.compare_digest(app.api_key_hash, key_hash):
            return None
        app = live_secrets(app, self._clock.now_ms())
        self._apps.put(app.id, app)
        return app

    def cached_app(self, api_key_hash: str) -> App | None:
        """The app :meth:`authenticate` would answer for the key with this hash without waiting on the
        store (its copy is fresh, or its server silent and the copy within the bound), else ``None``."""
        return self._by_key_hash.cached(api_key_hash)

    def known_app(self, api_key_hash: str) -> App | None:
        """The app this node accepted the key with this hash for, without the store (maybe stale)."""
        return self._by_key_hash.last_copy(api_key_hash)

    def knows_key_hash(self, api_key_hash: str) -> bool:
        """This node has accepted the key with this hash before (its cache entry may be stale)."""
        return self._by_key_hash.holds(api_key_hash)

    def cached(self, app_id: str) -> App | None:
        """The cached app without touching the store (the fire path's fast lane): fresh, or the last
        good copy while the apps server is silent (within ``serve_stale_ms``)."""
        return self._apps.cached(app_id)

    def invalidate(self, app_id: str) -> None:
        self._apps.forget(app_id)

    def put(self, app: App) -> None:
        self._apps.put(app.id, app)
        if self._by_key_hash.holds(app.api_key_hash):
            self._by_key_hash.put(app.api_key_hash, app)

    def forget_key_hash(self, api_key_hash: str) -> None:
        """Stop accepting a (rotated) key on this node at once (a lookup under way keeps nothing); other
        nodes within ``ttl_ms`` while they read the apps server, within the staleness bound while not."""
        self._by_key_hash.forget(api_key_hash)
