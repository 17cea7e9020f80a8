"""The app directory in front of the store: the fire path's app lookups share one read per app."""

from __future__ import annotations

import asyncio

import pytest

from sharding import Topology
from tjobs.clock import ManualClock
from tjobs.errors import NotFound
from tjobs.model import App
from tjobs.service.apps import AppDirectory, hash_api_key
from tjobs.stores.memory import MemoryTaskStore


class SlowAppStore(MemoryTaskStore):
    """Counts app reads, each taking a while (a database round trip)."""

    reads = 0
    key_reads = 0

    async def get_app(self, app_id: str) -> App | None:
        self.reads += 1
        await asyncio.sleep(0.05)
        return await super().get_app(app_id)

    async def find_app_by_key_hash(self, api_key_hash: str) -> App | None:
        self.key_reads += 1
        await asyncio.sleep(0.05)
        return await super().find_app_by_key_hash(api_key_hash)


async def _directory() -> tuple[AppDirectory, SlowAppStore, ManualClock]:
    store, clock = SlowAppStore(Topology.parse("1x1x4")), ManualClock(1_000_000)
    await store.put_app(App("app-a", "Orders", hash_api_key("tjk_key-a"), ["whsec_c2VjcmV0"]))
    return AppDirectory(store, clock, ttl_ms=10_000), store, clock


async def test_a_burst_of_fires_missing_the_app_cache_shares_one_lookup() -> None:
    # Given an app the node has not cached (or whose entry just expired)
    directory, store, clock = await _directory()
    # When a burst of fires and sends all need it at once
    apps = await asyncio.gather(*(directory.get("app-a") for _ in range(200)))
    # Then the store is asked once, and every caller gets the app
    assert store.reads == 1
    assert {app.id for app in apps} == {"app-a"}
    # and once it is cached nobody asks again; an expired entry costs one more read, not 200
    await asyncio.gather(*(directory.get("app-a") for _ in range(50)))
    assert store.reads == 1 and directory.cached("app-a") is not None
    clock.advance(10_000)
    assert directory.cached("app-a") is None
    await asyncio.gather(*(directory.get("app-a") for _ in range(200)))
    assert store.reads == 2


async def test_a_cancelled_caller_does_not_cancel_the_shared_lookup() -> None:
    directory, store, _ = await _directory()
    impatient = asyncio.ensure_future(directory.get("app-a"))
    patient = asyncio.ensure_future(directory.get("app-a"))
    await asyncio.sleep(0.01)
    impatient.cancel()
    assert (await patient).id == "app-a"
    assert store.reads == 1


async def test_a_missing_app_fails_every_waiter_and_the_next_caller_asks_again() -> None:
    directory, store, _ = await _directory()
    results = await asyncio.gather(*(directory.get("nobody") for _ in range(20)), return_exceptions=True)
    assert all(isinstance(result, NotFound) for result in results) and store.reads == 1
    with pytest.raises(NotFound):
        await directory.get("nobody")
    assert store.reads == 2


async def test_a_burst_of_creates_whose_key_entry_expired_shares_one_key_lookup() -> None:
    # Given a key the node accepted, whose cache entry then expired
    directory, store, clock = await _directory()
    assert (await directory.authenticate("tjk_key-a")) is not None and store.key_reads == 1
    clock.advance(10_000)
    # When 64 requests in flight present it at once
    apps = await asyncio.gather(*(directory.authenticate("tjk_key-a") for _ in range(64)))
    # Then the store is asked once more, not 64 times, and every request gets the app
    assert store.key_reads == 2
    assert {app.id for app in apps if app is not None} == {"app-a"} and None not in apps
    # and an unknown key is refused to every caller, each burst reading once
    unknown = await asyncio.gather(*(directory.authenticate("tjk_nobody") for _ in range(20)))
    assert unknown == [None] * 20 and store.key_reads == 3


async def test_a_cancelled_request_does_not_cancel_the_shared_key_lookup() -> None:
    directory, store, _ = await _directory()
    impatient = asyncio.ensure_future(directory.authenticate("tjk_key-a"))
    patient = asyncio.ensure_future(directory.authenticate("tjk_key-a"))
    await asyncio.sleep(0.01)
    impatient.cancel()
    found = await patient
    assert found is not None and found.id == "app-a" and store.key_reads == 1
