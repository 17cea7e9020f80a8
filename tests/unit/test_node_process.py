"""What a node process does for itself: the app lookups of the fire path, the collector's settings."""

from __future__ import annotations

import asyncio
import gc

from tjobs.model import App
from tjobs.node import GC_THRESHOLDS, Node, settle_heap
from tjobs.settings import Settings, StorageSettings
from tjobs.stores.memory import MemoryTaskStore


class SlowAppStore(MemoryTaskStore):
    """Counts app reads, each taking a while (a database round trip)."""

    reads = 0

    async def get_app(self, app_id: str) -> App | None:
        self.reads += 1
        await asyncio.sleep(0.05)
        return await super().get_app(app_id)


def _node() -> tuple[Node, SlowAppStore]:
    from sharding import Topology
    from tjobs.node import NodeParts

    store = SlowAppStore(Topology.parse("1x1x4"))
    settings = Settings(storage=StorageSettings(urls=["memory://"], topology="1x1x4"))
    return Node(settings, NodeParts(store=store)), store


async def test_a_burst_of_fires_missing_the_app_cache_shares_one_lookup() -> None:
    # Given an app the node has not cached (or whose entry just expired)
    node, store = _node()
    await store.put_app(App("app-a", "Orders", "hash-a", ["whsec_c2VjcmV0"]))
    # When a burst of fires and sends all need it at once
    apps = await asyncio.gather(*(node._fetch_app("app-a") for _ in range(200)))
    # Then the store is asked once, and every caller gets the app
    assert store.reads == 1
    assert {app.id for app in apps} == {"app-a"}
    # and once it is cached nobody asks again; an expired entry costs one more read, not 200
    await asyncio.gather(*(node._allow_list_of("app-a") for _ in range(50)))
    assert store.reads == 1


async def test_a_cancelled_caller_does_not_cancel_the_shared_lookup() -> None:
    node, store = _node()
    await store.put_app(App("app-a", "Orders", "hash-a", ["whsec_c2VjcmV0"]))
    impatient = asyncio.ensure_future(node._fetch_app("app-a"))
    patient = asyncio.ensure_future(node._fetch_app("app-a"))
    await asyncio.sleep(0.01)
    impatient.cancel()
    assert (await patient).id == "app-a"
    assert store.reads == 1


def test_settle_heap_freezes_startup_objects_and_raises_the_thresholds() -> None:
    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
