"""Apps (tenants) as the fire path sees them: a small cache in front of the store."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from tjobs.clock import Clock
from tjobs.errors import NotFound
from tjobs.model import App
from tjobs.stores.base import TaskStore


def hash_api_key(api_key: str) -> str:
    """API keys are stored as SHA-256 hex digests; they are random 32-byte tokens, so no salt is needed."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def generate_api_key() -> str:
    return "tjk_" + secrets.token_urlsafe(32)


class AppDirectory:
    """Caches apps by id for ``ttl_ms`` so the fire path never waits on the store for them."""

    def __init__(self, store: TaskStore, clock: Clock, ttl_ms: int = 10_000) -> None:
        self._store = store
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._cache: dict[str, tuple[int, App]] = {}
        self._by_key_hash: dict[str, tuple[int, App]] = {}

    async def get(self, app_id: str) -> App:
        now_ms = self._clock.now_ms()
        cached = self._cache.get(app_id)
        if cached is not None and cached[0] > now_ms:
            return cached[1]
        app = await self._store.get_app(app_id)
        if app is None:
            raise NotFound("app", app_id)
        self._cache[app_id] = (now_ms + self._ttl_ms, app)
        return app

    async def authenticate(self, api_key: str) -> App | None:
        """The app owning ``api_key``; the key is hashed, and the lookup is by the hash (an index)."""
        key_hash = hash_api_key(api_key)
        now_ms = self._clock.now_ms()
        cached = self._by_key_hash.get(key_hash)
        if cached is not None and cached[0] > now_ms:
            return cached[1]
        app = await self._store.find_app_by_key_hash(key_hash)
        if app is None or not hmac.compare_digest(app.api_key_hash, key_hash):
            return None
        self._by_key_hash[key_hash] = (now_ms + self._ttl_ms, app)
        self.put(app)
        return app

    def cached(self, app_id: str) -> App | None:
        """The cached app if still fresh, without touching the store (the fire path's fast lane)."""
        cached = self._cache.get(app_id)
        if cached is not None and cached[0] > self._clock.now_ms():
            return cached[1]
        return None

    def invalidate(self, app_id: str) -> None:
        self._cache.pop(app_id, None)

    def put(self, app: App) -> None:
        self._cache[app.id] = (self._clock.now_ms() + self._ttl_ms, app)
