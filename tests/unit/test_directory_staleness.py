"""The app and target directories while the server holding the apps table is frozen or cut (issue 28).

A delivery needs its app (secrets, allow-list) and, for a task naming targets, its targets. Both live on
one database server. Given a copy read before that server stopped answering, a delivery is made from
the copy (the last good one) instead of waiting on the server, for at most the stated bound
(``directory.serve_stale_s``); a change the server does answer with (a deleted app, a deleted target)
applies at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from tests.delivery_fakes import APP, CLOCK, SETTINGS, NoJitter, delivered_all, scripted, settle, stored_flow
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.signing import generate_secret
from tjobs.errors import NotFound, StorageUnavailable
from tjobs.model import App, FlowStatus
from tjobs.service.apps import AppDirectory, hash_api_key
from tjobs.service.directory_cache import RETRY_MS
from tjobs.service.targets import TargetDirectory
from tjobs.stores.memory import MemoryTaskStore
from tjobs.targets.model import HttpTarget, RetryPolicy, Target

TTL_MS = 10_000
SERVE_STALE_MS = 60_000
READ_DEADLINE_MS = 100
WALL_S = 2.0  # how long a test waits (wall clock) for what must not wait on the frozen server


class FreezableStore(MemoryTaskStore):
    """The memory store whose app and target reads can be made to hang (a SIGSTOPped server: the
    connection stays open, nothing answers) or fail (a cut one), and are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.answering = asyncio.Event()
        self.answering.set()
        self.refusing = False
        self.app_reads = 0
        self.target_reads = 0

    def freeze(self) -> None:
        self.answering.clear()

    def thaw(self) -> None:
        self.answering.set()

    async def _server(self) -> None:
        await self.answering.wait()
        if self.refusing:
            raise ConnectionRefusedError("the apps server is cut off")

    async def get_app(self, app_id: str) -> App | None:
        self.app_reads += 1
        await self._server()
        return await super().get_app(app_id)

    async def find_app_by_key_hash(self, api_key_hash: str) -> App | None:
        self.app_reads += 1
        await self._server()
        return await super().find_app_by_key_hash(api_key_hash)

    async def get_target(self, app_id: str, name: str) -> Target | None:
        self.target_reads += 1
        await self._server()
        return await super().get_target(app_id, name)


@pytest.fixture
def store() -> FreezableStore:
    return FreezableStore()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK.now_ms())


@pytest.fixture
async def apps(store: FreezableStore, clock: ManualClock) -> AsyncIterator[AppDirectory]:
    await store.put_app(APP)
    directory = AppDirectory(
        store, clock, ttl_ms=TTL_MS, serve_stale_ms=SERVE_STALE_MS, read_deadline_ms=READ_DEADLINE_MS
    )
    yield directory
    store.thaw()
    await directory.close()


# ---- a delivery never waits on the frozen server when a copy exists ---------------------------------------


async def test_a_delivery_after_the_app_entry_expired_does_not_wait_on_a_frozen_apps_server(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory
) -> None:
    # Given a node delivering an app's flows, its app cached
    transport = scripted()
    deliverer = Deliverer(
        store,
        transport,
        AppLimiter(SETTINGS.global_max_in_flight),
        SETTINGS,
        clock,
        NoJitter(),
        apps=apps,
        flush_batch=1,
    )
    await deliverer.start()
    try:
        deliverer.deliver(*await stored_flow(store, clock=clock))
        await transport.wait_for(1, WALL_S)
        await delivered_all(deliverer)

        # When the server holding the apps table freezes and the app's entry expires
        store.freeze()
        clock.advance(TTL_MS + 1)
        for _ in range(3):
            deliverer.deliver(*await stored_flow(store, clock=clock))

        # Then the flows are delivered from the last good copy, without waiting on the frozen server
        assert len(await transport.wait_for(4, WALL_S)) == 4
    finally:
        store.thaw()
        await deliverer.stop(1.0)


@pytest.mark.parametrize("change", ["frozen past the bound", "deleted"])
async def test_an_apps_deliveries_stop_once_its_copy_is_past_the_bound_or_the_server_says_it_is_gone(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory, change: str
) -> None:
    # Given a node that delivered an app's flows, its app cached
    transport = scripted()
    deliverer = Deliverer(
        store,
        transport,
        AppLimiter(SETTINGS.global_max_in_flight),
        SETTINGS,
        clock,
        NoJitter(),
        apps=apps,
        flush_batch=1,
    )
    await deliverer.start()
    try:
        deliverer.deliver(*await stored_flow(store, clock=clock))
        await transport.wait_for(1, WALL_S)
        await delivered_all(deliverer)
        # When the app is deleted (or disabled: this node cannot tell) on a server it no longer hears
        # from, past the stated bound; or deleted, and the server says so
        if change == "deleted":
            await store.delete_app(APP.id)
            clock.advance(TTL_MS + 1)
        else:
            store.freeze()
            clock.advance(TTL_MS + SERVE_STALE_MS + 1)
        task, flow = await stored_flow(store, clock=clock)
        deliverer.deliver(task, flow)
        await asyncio.sleep(READ_DEADLINE_MS * 3 / 1000)
        # Then nothing more is sent for it: the flow stays pending in the store (the compensator
        # re-drives it once the app can be read, and a deleted app's flows are cancelled with its tasks)
        assert len(transport.requests) == 1
        stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
        assert stored is not None and stored.status is FlowStatus.PENDING
    finally:
        store.thaw()
        await deliverer.stop(1.0)


async def test_the_first_lookup_after_expiry_waits_only_the_read_deadline_and_later_ones_not_at_all(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory
) -> None:
    await apps.get(APP.id)
    store.freeze()
    clock.advance(TTL_MS + 1)

    # The first caller past expiry gives the (frozen) server the read deadline, then takes the copy
    loop = asyncio.get_running_loop()
    started_s = loop.time()
    assert (await asyncio.wait_for(apps.get(APP.id), WALL_S)).id == APP.id
    assert loop.time() - started_s < WALL_S
    # and from then on the fast lane serves the copy while the read is still under way
    assert apps.cached(APP.id) is not None
    reads = store.app_reads
    for _ in range(10):
        assert (await asyncio.wait_for(apps.get(APP.id), READ_DEADLINE_MS / 1000 / 2)).id == APP.id
    assert store.app_reads == reads, "one read under way at a time"


async def test_a_read_ahead_of_expiry_still_unanswered_at_expiry_serves_the_copy_without_any_wait(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory
) -> None:
    # Given an app in use whose server froze just before its read ahead of expiry started
    await apps.get(APP.id)
    store.freeze()
    clock.advance(TTL_MS * 9 // 10)
    assert apps.cached(APP.id) is not None  # starts the read, which hangs
    await settle()
    # When the entry expires with that read unanswered for longer than the read deadline
    clock.advance(TTL_MS // 10 + 1)
    # Then the fast lane serves the copy: not even the first delivery after expiry waits the deadline
    assert apps.cached(APP.id) is not None
    assert store.app_reads == 2


async def test_a_cut_server_is_retried_in_the_background_while_the_copy_is_served(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory
) -> None:
    await apps.get(APP.id)
    store.refusing = True
    clock.advance(TTL_MS + 1)
    assert (await apps.get(APP.id)).id == APP.id
    assert apps.cached(APP.id) is not None

    # When the server answers again with a changed app, the change is served once read
    store.refusing = False
    changed = App(APP.id, "renamed", APP.api_key_hash, APP.secrets, max_concurrency=3)
    await store.put_app(changed)
    clock.advance(5_000)
    apps.cached(APP.id)  # a hit starts the refresh when the last failure is old enough
    await settle()
    assert (await apps.get(APP.id)).name == "renamed"


async def test_entries_in_use_are_read_again_before_they_expire(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory
) -> None:
    # Given an app read once
    await apps.get(APP.id)
    assert store.app_reads == 1
    # When it is used past most of its TTL, the directory reads it again in the background
    clock.advance(TTL_MS * 9 // 10)
    assert apps.cached(APP.id) is not None
    await settle()
    assert store.app_reads == 2
    # so at the old expiry it is still fresh: the fast lane never misses while the server answers
    clock.advance(TTL_MS // 10 + 1)
    assert apps.cached(APP.id) is not None
    await settle()
    assert store.app_reads == 2


async def test_a_silent_server_is_logged_once_per_outage_not_once_per_app(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory, caplog: pytest.LogCaptureFixture
) -> None:
    # Given many apps cached (a node serving hundreds of tenants)
    ids = [f"app-{index}" for index in range(50)]
    for app_id in ids:
        await store.put_app(App(app_id, app_id, f"hash-{app_id}", APP.secrets))
        await apps.get(app_id)
    # When their server is cut and every entry expires, and later answers again
    store.refusing = True
    clock.advance(TTL_MS + 1)
    with caplog.at_level(logging.INFO, logger="tjobs.service.directory_cache"):
        for app_id in ids:
            assert (await apps.get(app_id)).id == app_id
        store.refusing = False
        clock.advance(RETRY_MS)
        for app_id in ids:
            apps.cached(app_id)
        await settle()
    # Then the outage is one line when it starts and one when the last copy is read again
    actions = [getattr(record, "action", None) for record in caplog.records]
    assert actions == ["directory_stale", "directory_recovered"], actions
    assert "50 entries" in caplog.records[-1].getMessage()


async def test_an_app_this_node_writes_while_it_is_silent_ends_the_outage(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory, caplog: pytest.LogCaptureFixture
) -> None:
    await apps.get(APP.id)
    store.refusing = True
    clock.advance(TTL_MS + 1)
    with caplog.at_level(logging.INFO, logger="tjobs.service.directory_cache"):
        await apps.get(APP.id)  # silent: served from the copy
        store.refusing = False
        apps.put(App(APP.id, "renamed", APP.api_key_hash, APP.secrets))  # this node's API wrote it
    written = apps.cached(APP.id)
    assert written is not None and written.name == "renamed"
    assert [getattr(r, "action", None) for r in caplog.records] == ["directory_stale", "directory_recovered"]


# ---- the bound on staleness, and changes that must still stop deliveries -----------------------------------


async def test_the_copy_is_served_no_longer_than_serve_stale_past_its_last_read(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory
) -> None:
    await apps.get(APP.id)
    store.freeze()
    # Still served just within the bound (counted from the last good read's expiry)
    clock.advance(TTL_MS + SERVE_STALE_MS - 1)
    assert (await asyncio.wait_for(apps.get(APP.id), WALL_S)).id == APP.id
    assert apps.cached(APP.id) is not None
    # Past it, nothing is served: a lookup waits on the server (the flow stays pending in the store)
    clock.advance(2)
    assert apps.cached(APP.id) is None
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(apps.get(APP.id), READ_DEADLINE_MS * 3 / 1000)
    # and once the server answers, the app is fresh again
    store.thaw()
    assert (await asyncio.wait_for(apps.get(APP.id), WALL_S)).id == APP.id
    assert apps.cached(APP.id) is not None


async def test_a_deleted_app_stops_being_served_as_soon_as_its_server_says_so(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory
) -> None:
    await apps.get(APP.id)
    # Given the app deleted through another node
    await store.delete_app(APP.id)
    # When this node's copy is read again (in the background, while in use)
    clock.advance(TTL_MS * 9 // 10)
    apps.cached(APP.id)
    await settle()
    # Then the copy is gone at once: no stale fallback for an app the server says does not exist
    assert apps.cached(APP.id) is None
    with pytest.raises(NotFound):
        await apps.get(APP.id)


async def test_a_disabled_app_is_seen_disabled_within_the_ttl_while_in_use(
    store: FreezableStore, clock: ManualClock, apps: AppDirectory
) -> None:
    await apps.get(APP.id)
    disabled = App(APP.id, APP.name, APP.api_key_hash, APP.secrets, settings={"disabled_at_ms": clock.now_ms()})
    await store.put_app(disabled)
    clock.advance(TTL_MS * 9 // 10)
    apps.cached(APP.id)
    await settle()
    app = apps.cached(APP.id)
    assert app is not None and app.disabled_at_ms is not None


# ---- API keys: a request's app (creates on a healthy server must not wait on the apps server) -------------

KEY = "tjk_the-shops-key"
KEYED = App("keyed", "keyed", hash_api_key(KEY), [generate_secret()])
MISS_DEADLINE_MS = 300


@pytest.fixture
async def keys(store: FreezableStore, clock: ManualClock) -> AsyncIterator[AppDirectory]:
    await store.put_app(KEYED)
    directory = AppDirectory(
        store,
        clock,
        ttl_ms=TTL_MS,
        serve_stale_ms=SERVE_STALE_MS,
        read_deadline_ms=READ_DEADLINE_MS,
        key_miss_deadline_ms=MISS_DEADLINE_MS,
    )
    yield directory
    store.thaw()
    await directory.close()


async def test_a_key_past_its_ttl_is_answered_from_its_copy_while_the_apps_server_is_frozen(
    store: FreezableStore, clock: ManualClock, keys: AppDirectory
) -> None:
    assert await keys.authenticate(KEY) == KEYED
    store.freeze()
    clock.advance(TTL_MS + 1)
    # the first request past expiry waits the read deadline at most, later ones not at all
    assert await asyncio.wait_for(keys.authenticate(KEY), WALL_S) == KEYED
    assert keys.cached_app(KEYED.api_key_hash) == KEYED
    for _ in range(10):
        assert await asyncio.wait_for(keys.authenticate(KEY), READ_DEADLINE_MS / 1000 / 2) == KEYED
    # and no longer than the bound past its last good read
    clock.advance(SERVE_STALE_MS)
    assert keys.cached_app(KEYED.api_key_hash) is None


@pytest.mark.parametrize("copy", ["never read", "past the bound"])
async def test_a_key_without_a_copy_to_serve_waits_for_a_frozen_apps_server_only_the_miss_deadline(
    store: FreezableStore, clock: ManualClock, keys: AppDirectory, copy: str
) -> None:
    if copy == "past the bound":
        await keys.authenticate(KEY)
    store.freeze()
    clock.advance(TTL_MS + SERVE_STALE_MS)
    loop = asyncio.get_running_loop()
    started_s = loop.time()
    with pytest.raises(StorageUnavailable, match=f"did not answer within {MISS_DEADLINE_MS} ms"):
        await asyncio.wait_for(keys.authenticate(KEY), WALL_S)
    assert loop.time() - started_s >= MISS_DEADLINE_MS / 1000 * 0.9
    # the read goes on; once the server answers, the key is accepted
    store.thaw()
    assert await asyncio.wait_for(keys.authenticate(KEY), WALL_S) == KEYED


async def test_a_key_rotated_elsewhere_is_refused_as_soon_as_the_apps_server_says_so(
    store: FreezableStore, clock: ManualClock, keys: AppDirectory
) -> None:
    # Given a key accepted, then rotated through another node while this node could not read the server
    assert await keys.authenticate(KEY) == KEYED
    store.refusing = True
    clock.advance(TTL_MS + 1)
    await store.put_app(App(KEYED.id, KEYED.name, hash_api_key("tjk_new"), KEYED.secrets))
    assert await keys.authenticate(KEY) == KEYED  # within the bound: the copy (docs/operations.md)
    # When the server answers again, the old key's lookup finds no app: refused at once, copy dropped
    store.refusing = False
    clock.advance(RETRY_MS)
    keys.cached_app(KEYED.api_key_hash)  # the retry
    await settle()
    assert await keys.authenticate(KEY) is None
    assert not keys.knows_key_hash(KEYED.api_key_hash)


async def test_a_key_forgotten_on_this_node_is_not_brought_back_by_a_lookup_already_under_way(
    store: FreezableStore, clock: ManualClock, keys: AppDirectory
) -> None:
    # Given a key in use whose read ahead of expiry is under way (its server slow to answer)
    assert await keys.authenticate(KEY) == KEYED
    store.freeze()
    clock.advance(TTL_MS * 9 // 10)
    assert keys.cached_app(KEYED.api_key_hash) == KEYED  # starts the read
    await settle()
    # When the key is rotated through this node before that read answers (with the old row)
    keys.forget_key_hash(KEYED.api_key_hash)
    store.thaw()
    await settle()
    # Then the old key stays refused on this node: the answer predates the rotation
    assert keys.cached_app(KEYED.api_key_hash) is None and not keys.knows_key_hash(KEYED.api_key_hash)


# ---- targets ------------------------------------------------------------------------------------------------

TARGET = Target(
    app_id=APP.id,
    name="orders",
    settings=HttpTarget(urls=("https://orders.example/hook",)),
    version=1,
    retry=RetryPolicy(),
    credentials={},
    created_at_ms=0,
    updated_at_ms=0,
)


@pytest.fixture
async def targets(store: FreezableStore, clock: ManualClock) -> AsyncIterator[TargetDirectory]:
    await store.put_target(TARGET, None)
    directory = TargetDirectory(
        store, clock, ttl_ms=5_000, serve_stale_ms=SERVE_STALE_MS, read_deadline_ms=READ_DEADLINE_MS
    )
    yield directory
    store.thaw()
    await directory.close()


async def test_a_target_is_served_from_its_copy_while_the_apps_server_is_frozen(
    store: FreezableStore, clock: ManualClock, targets: TargetDirectory
) -> None:
    assert await targets.get(APP.id, "orders") == TARGET
    store.freeze()
    clock.advance(5_001)
    assert await asyncio.wait_for(targets.get(APP.id, "orders"), WALL_S) == TARGET
    assert targets.cached(APP.id, "orders") == TARGET
    clock.advance(SERVE_STALE_MS)
    assert targets.cached(APP.id, "orders") is None


async def test_a_deleted_target_is_gone_as_soon_as_its_server_says_so(
    store: FreezableStore, clock: ManualClock, targets: TargetDirectory
) -> None:
    await targets.get(APP.id, "orders")
    await store.delete_target(APP.id, "orders")
    clock.advance(5_001)
    assert await targets.get(APP.id, "orders") is None
    assert targets.cached(APP.id, "orders") is None
