"""The coordinator contract (:class:`tjobs.cluster.base.Coordinator`), run on every implementation:
the embedded one (in-process, one node owns every job) and the etcd one (a real etcd from
``TJOBS_TEST_ETCD_URL``, a fresh cluster name per test, its keys deleted afterwards).

Each test waits for a condition with a generous timeout, never for a time window: the etcd
coordinator runs with a 2 s lease and a 50 ms sync so that every condition arrives within a second or
two. The partition of the jobs between two nodes runs on the implementations that have more than one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace

import aetcd
import pytest

from sharding import Topology
from tjobs.clock import SystemClock
from tjobs.cluster.base import RENEW_LATER, Coordinator
from tjobs.cluster.db_health import DatabaseHealth
from tjobs.cluster.etcd import EtcdCoordinator, _host_port
from tjobs.cluster.local import LocalCoordinator
from tjobs.errors import StorageUnavailable
from tjobs.pools.model import Executor
from tjobs.settings import ClusterSettings
from tjobs.stores.memory import MemoryTaskStore

SHARDS = 16
EVERY_JOB = frozenset(range(SHARDS))
LEASE_TTL_S = 2
SYNC_INTERVAL_MS = 50
SETTLE_TIMEOUT_S = 8.0  # generous: every condition below settles within a sync or two once etcd answers


class Listener:
    """An ownership listener that records every hand-over, and raises on the next ``fail_next`` ones."""

    def __init__(self) -> None:
        self.calls: list[frozenset[int]] = []  # every hand-over, taken or not
        self.taken: list[frozenset[int]] = []  # the hand-overs that returned
        self.fail_next = 0

    async def __call__(self, owned: frozenset[int]) -> None:
        self.calls.append(owned)
        if self.fail_next:
            self.fail_next -= 1
            raise StorageUnavailable("MySQL server has gone away")  # a load of gained jobs failed
        self.taken.append(owned)

    @property
    def holds(self) -> frozenset[int]:
        return self.taken[-1] if self.taken else frozenset()


@dataclass
class Member:
    coordinator: Coordinator
    listener: Listener = field(default_factory=Listener)

    async def start(self) -> None:
        await self.coordinator.start(self.listener)


@dataclass
class Backend:
    """Makes coordinators of one cluster; stops every one it made when the test ends."""

    name: str
    new_coordinator: Callable[[str], Coordinator]
    multi_node: bool
    registered: Callable[[], Awaitable[set[str]]] | None = None  # the node ids the cluster lists as members
    members: list[Member] = field(default_factory=list)

    def member(self, node_id: str) -> Member:
        made = Member(self.new_coordinator(node_id))
        self.members.append(made)
        return made

    async def close(self) -> None:
        for made in self.members:
            with contextlib.suppress(Exception):
                await made.coordinator.stop()


def _local_backend() -> Backend:
    store = MemoryTaskStore(Topology(1, 1, SHARDS))
    return Backend(
        "local",
        lambda node_id: LocalCoordinator(
            SHARDS, node_id, DatabaseHealth(store, SHARDS), sync_interval_ms=SYNC_INTERVAL_MS
        ),
        multi_node=False,
    )


def _etcd_backend(etcd_url: str, cluster: str) -> Backend:
    host, port = _host_port(etcd_url)
    members_prefix = f"/tjobs/{cluster}/members/".encode()

    async def registered() -> set[str]:
        async with aetcd.Client(host=host, port=port) as client:
            found = await client.get_prefix(members_prefix)
        return {bytes(kv.key)[len(members_prefix) :].decode() for kv in found}

    settings = ClusterSettings(
        etcd_endpoints=[etcd_url],
        name=cluster,
        lease_ttl_s=LEASE_TTL_S,
        fence_margin_ms=500,
        sync_interval_ms=SYNC_INTERVAL_MS,
        pool_sync_interval_ms=SYNC_INTERVAL_MS,
    )
    return Backend(
        "etcd",
        lambda node_id: EtcdCoordinator(
            settings,
            node_id=node_id,
            address=f"http://{node_id}",
            shard_count=SHARDS,
            cycle_s=300,
            store=MemoryTaskStore(Topology(1, 1, SHARDS)),
            clock=SystemClock(),
        ),
        multi_node=True,
        registered=registered,
    )


async def _etcd_backend_for(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    etcd_url: str = request.getfixturevalue("etcd_url")
    cluster = f"contract-{secrets.token_hex(4)}"
    made = _etcd_backend(etcd_url, cluster)
    try:
        yield made
    finally:
        await made.close()
        host, port = _host_port(etcd_url)
        async with aetcd.Client(host=host, port=port) as client:
            await client.delete_prefix(f"/tjobs/{cluster}/".encode())
            await client.delete_prefix(f"/tjobs-pools/{cluster}/".encode())
            await client.delete_prefix(f"/tjobs-figures/{cluster}/".encode())


@pytest.fixture(params=["local", pytest.param("etcd", marks=pytest.mark.etcd)])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "local":
        made = _local_backend()
        try:
            yield made
        finally:
            await made.close()
        return
    async for made in _etcd_backend_for(request):
        yield made


@pytest.fixture(params=[pytest.param("etcd", marks=pytest.mark.etcd)])
async def cluster_backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The implementations where several nodes share the jobs."""
    async for made in _etcd_backend_for(request):
        assert made.multi_node
        yield made


async def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s} s: {what}", pytrace=False)
        await asyncio.sleep(0.01)


def now_ms() -> int:
    return SystemClock().now_ms()


# ---- one node ------------------------------------------------------------------------------------


async def test_before_start_nothing_is_owned_and_nothing_may_fire(backend: Backend) -> None:
    node = backend.member("n0")
    assert node.coordinator.owned_jobs() == frozenset()
    assert not node.coordinator.may_fire(now_ms())


async def test_start_hands_the_listener_the_owned_jobs_and_one_node_alone_owns_every_job(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await wait_for(lambda: node.listener.holds == EVERY_JOB, "the one node took every job")
    assert node.coordinator.owned_jobs() == node.listener.holds
    assert frozenset() not in node.listener.calls  # never handed an empty set before its first jobs


async def test_the_listener_is_handed_only_changes(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await wait_for(lambda: node.listener.holds == EVERY_JOB, "the one node took every job")
    await node.coordinator.stop()
    taken = node.listener.taken
    assert all(before != after for before, after in itertools.pairwise(taken)), taken


async def test_may_fire_while_owning_and_not_after_stop(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await wait_for(lambda: node.coordinator.may_fire(now_ms()), "may fire once owning")
    assert node.coordinator.owned_jobs()
    await node.coordinator.stop()
    assert not node.coordinator.may_fire(now_ms())


async def test_stop_hands_the_listener_the_empty_set(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await wait_for(lambda: node.listener.holds == EVERY_JOB, "the one node took every job")
    await node.coordinator.stop()
    assert node.listener.holds == frozenset()
    assert node.coordinator.owned_jobs() == frozenset()


async def test_stop_resigns_even_when_the_listener_raises_on_the_empty_set(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await wait_for(lambda: node.listener.holds == EVERY_JOB, "the one node took every job")
    node.listener.fail_next = 1
    await node.coordinator.stop()  # the listener's error is logged, not raised
    assert node.listener.calls[-1] == frozenset()
    assert node.coordinator.owned_jobs() == frozenset()
    assert not node.coordinator.may_fire(now_ms())


async def test_a_listener_that_raises_is_handed_the_set_again_at_the_next_sync(backend: Backend) -> None:
    node = backend.member("n0")
    node.listener.fail_next = 1
    await node.start()  # the listener's error does not escape start
    await wait_for(lambda: node.listener.holds == EVERY_JOB, "the jobs handed again after the failure")
    assert node.listener.calls[:2] == [EVERY_JOB, EVERY_JOB]  # the same set again, though unchanged
    assert node.coordinator.owned_jobs() == EVERY_JOB


async def test_a_listener_that_keeps_raising_is_handed_the_set_until_it_takes_it(backend: Backend) -> None:
    node = backend.member("n0")
    node.listener.fail_next = 3
    await node.start()
    await wait_for(lambda: node.listener.holds == EVERY_JOB, "the jobs taken after three failures")
    assert node.listener.calls[:4] == [EVERY_JOB] * 4
    assert node.coordinator.may_fire(now_ms())


async def test_describe_returns_the_documented_shape(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await wait_for(lambda: node.listener.holds == EVERY_JOB, "the one node took every job")
    view = node.coordinator.describe()
    assert json.loads(json.dumps(view)) == view  # JSON-able as it is
    assert view["mode"] in {"embedded", "cluster"}
    assert view["mode"] == ("cluster" if backend.multi_node else "embedded")
    assert view["node"] == "n0"
    nodes = view["nodes"]
    assert isinstance(nodes, list)
    assert [member["id"] for member in nodes] == ["n0"]
    assert all(isinstance(member["healthy"], bool) for member in nodes)
    assert view["owned_jobs"] == len(node.coordinator.owned_jobs()) == SHARDS
    assert view["fenced"] is None
    assert isinstance(view["database_servers"], list)


async def test_may_fire_is_owning_and_not_fenced(backend: Backend) -> None:
    node = backend.member("n0")
    assert node.coordinator.may_fire(now_ms()) == (
        bool(node.coordinator.owned_jobs()) and node.coordinator.describe()["fenced"] is None
    )
    await node.start()
    await wait_for(lambda: node.listener.holds == EVERY_JOB, "the one node took every job")
    assert node.coordinator.may_fire(now_ms())
    assert node.coordinator.describe()["fenced"] is None
    await node.coordinator.stop()
    view = node.coordinator.describe()
    assert view["owned_jobs"] == 0
    assert not node.coordinator.may_fire(now_ms())


# ---- several nodes -------------------------------------------------------------------------------


def partitioned(members: list[Member]) -> bool:
    """Every job owned by exactly one member, every member owning some, each listener holding its own."""
    owned = [job for member in members for job in member.coordinator.owned_jobs()]
    return (
        sorted(owned) == sorted(EVERY_JOB)
        and all(member.coordinator.owned_jobs() for member in members)
        and all(member.listener.holds == member.coordinator.owned_jobs() for member in members)
    )


async def test_two_nodes_partition_the_jobs(cluster_backend: Backend) -> None:
    members = [cluster_backend.member("n0"), cluster_backend.member("n1")]
    for member in members:
        await member.start()
    await wait_for(lambda: partitioned(members), "two nodes own every job once")
    for member in members:
        view = member.coordinator.describe()
        assert sorted(node["id"] for node in view["nodes"]) == ["n0", "n1"]  # type: ignore[attr-defined]
        assert member.coordinator.may_fire(now_ms())


async def test_a_stopping_node_hands_its_jobs_to_the_other(cluster_backend: Backend) -> None:
    members = [cluster_backend.member("n0"), cluster_backend.member("n1")]
    for member in members:
        await member.start()
    await wait_for(lambda: partitioned(members), "two nodes own every job once")
    leaving, staying = members
    await leaving.coordinator.stop()
    assert leaving.listener.holds == frozenset()
    await wait_for(lambda: staying.listener.holds == EVERY_JOB, "the staying node took every job")
    assert staying.coordinator.owned_jobs() == EVERY_JOB


async def test_a_stopping_node_whose_listener_raises_still_resigns(cluster_backend: Backend) -> None:
    members = [cluster_backend.member("n0"), cluster_backend.member("n1")]
    for member in members:
        await member.start()
    await wait_for(lambda: partitioned(members), "two nodes own every job once")
    leaving, staying = members
    leaving.listener.fail_next = 1
    await leaving.coordinator.stop()  # the listener's error is logged, not raised
    assert cluster_backend.registered is not None
    assert await cluster_backend.registered() == {"n1"}  # resigned: not left for its lease to end
    await wait_for(lambda: staying.listener.holds == EVERY_JOB, "the staying node took every job")


# ---- executor pools --------------------------------------------------------------------------------

EXECUTOR_TTL_S = 2  # etcd's floor


def executor(executor_id: str, address: str = "http://10.0.0.1:8000", zone: str = "a", **changes: object) -> Executor:
    return Executor(executor_id, address, zone, ttl_s=EXECUTOR_TTL_S, **changes)  # type: ignore[arg-type]


def ids(executors: list[Executor] | tuple[Executor, ...]) -> list[str]:
    return [found.id for found in executors]


async def test_a_registered_executor_is_listed_at_once_and_live_within_a_sync(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    assert await node.coordinator.register_executor("app1", "workers", executor("e1")) is True
    assert ids(await node.coordinator.pool_executors("app1", "workers")) == ["e1"]
    await wait_for(lambda: ids(node.coordinator.live_executors("app1", "workers")) == ["e1"], "e1 live")
    pools = await node.coordinator.app_pools("app1")
    assert list(pools) == ["workers"] and ids(pools["workers"]) == ["e1"]


async def test_registering_again_is_idempotent_and_replaces_what_changed(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    assert await node.coordinator.register_executor("app1", "workers", executor("e1")) is True
    assert await node.coordinator.register_executor("app1", "workers", executor("e1")) is False
    moved = executor("e1", address="http://10.0.0.2:9000", zone="b", weight=3, capacity=5)
    assert await node.coordinator.register_executor("app1", "workers", moved) is False
    (found,) = await node.coordinator.pool_executors("app1", "workers")
    assert (found.address, found.zone, found.weight, found.capacity) == ("http://10.0.0.2:9000", "b", 3, 5)
    await wait_for(
        lambda: [e.address for e in node.coordinator.live_executors("app1", "workers")] == ["http://10.0.0.2:9000"],
        "the changed address live",
    )


async def test_deregistering_removes_the_executor_and_renewing_it_then_says_unknown(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await node.coordinator.register_executor("app1", "workers", executor("e1"))
    await node.coordinator.register_executor("app1", "workers", executor("e2"))
    renewed = await node.coordinator.renew_executor("app1", "workers", "e1")
    assert renewed is not None and renewed.id == "e1"
    assert await node.coordinator.deregister_executor("app1", "workers", "e1") is True
    assert ids(await node.coordinator.pool_executors("app1", "workers")) == ["e2"]
    assert await node.coordinator.deregister_executor("app1", "workers", "e1") is False
    assert await node.coordinator.renew_executor("app1", "workers", "e1") is None
    assert await node.coordinator.renew_executor("app1", "workers", "never") is None
    await wait_for(lambda: ids(node.coordinator.live_executors("app1", "workers")) == ["e2"], "only e2 live")


async def test_a_renewal_answered_at_once_is_a_renewal_and_anything_else_is_left_to_renew_executor(
    backend: Backend,
) -> None:
    """``renew_executor_now`` (the heartbeat's path without I/O) answers what ``renew_executor`` would,
    or ``RENEW_LATER`` when only ``renew_executor`` can tell; an executor renewed through it stays live
    past twice its TTL, and nothing of another app's or a gone executor is renewed."""
    node = backend.member("n0")
    await node.start()
    coordinator = node.coordinator
    await coordinator.register_executor("app1", "workers", executor("beating"))
    await coordinator.register_executor("app1", "workers", executor("gone"))
    assert await coordinator.deregister_executor("app1", "workers", "gone") is True
    for app_id, executor_id in (("app1", "gone"), ("app1", "never"), ("app2", "beating")):
        assert coordinator.renew_executor_now(app_id, "workers", executor_id) in (None, RENEW_LATER)
    registered_at = time.monotonic()
    at_once = 0
    while time.monotonic() - registered_at < 3 * EXECUTOR_TTL_S:
        await asyncio.sleep(EXECUTOR_TTL_S / 4)
        found = coordinator.renew_executor_now("app1", "workers", "beating")
        if found is RENEW_LATER:
            found = await coordinator.renew_executor("app1", "workers", "beating")
        else:
            at_once += 1
        assert found is not None and found.id == "beating"
    assert at_once > 0  # both registries answer some heartbeats at once
    assert ids(await coordinator.pool_executors("app1", "workers")) == ["beating"]
    assert await coordinator.renew_executor("app2", "workers", "beating") is None


async def test_the_embedded_registry_answers_every_renewal_at_once() -> None:
    made = _local_backend()
    try:
        node = made.member("n0")
        await node.start()
        await node.coordinator.register_executor("app1", "workers", executor("e1"))
        renewed = node.coordinator.renew_executor_now("app1", "workers", "e1")
        assert renewed is not RENEW_LATER and renewed is not None and renewed.id == "e1"
        assert node.coordinator.renew_executor_now("app1", "workers", "never") is None
        assert node.coordinator.renew_executor_now("app2", "workers", "e1") is None
    finally:
        await made.close()


async def test_an_etcd_node_answers_at_once_only_a_lease_it_renewed_with_enough_left(
    cluster_backend: Backend,
) -> None:
    """At once means no keepalive: only for an executor in the node's view whose lease this node renewed
    recently enough; an executor it does not know (registered through another node, or never) is left
    to renew_executor, which reads it."""
    node = cluster_backend.member("n0")
    await node.start()
    coordinator = node.coordinator
    keepalives = coordinator._pools._keepalives  # type: ignore[attr-defined]
    await coordinator.register_executor("app1", "workers", replace(executor("e1"), ttl_s=30))
    assert coordinator.renew_executor_now("app1", "workers", "never") is RENEW_LATER
    assert await coordinator.renew_executor("app1", "workers", "e1") is not None  # renewed on the stream
    sent = keepalives.sent
    for _ in range(3):
        renewed = coordinator.renew_executor_now("app1", "workers", "e1")
        assert renewed is not RENEW_LATER and renewed is not None and renewed.id == "e1"
    assert keepalives.sent == sent


async def test_apps_see_only_their_own_pools(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await node.coordinator.register_executor("app1", "workers", executor("e1"))
    await node.coordinator.register_executor("app2", "other", executor("e9"))
    assert await node.coordinator.pool_executors("app2", "workers") == []
    assert list(await node.coordinator.app_pools("app2")) == ["other"]
    assert list(await node.coordinator.app_pools("app1")) == ["workers"]
    assert await node.coordinator.renew_executor("app2", "workers", "e1") is None
    assert await node.coordinator.deregister_executor("app2", "workers", "e1") is False
    await wait_for(lambda: ids(node.coordinator.live_executors("app1", "workers")) == ["e1"], "e1 live")
    assert node.coordinator.live_executors("app2", "workers") == ()


async def test_an_executor_that_stops_renewing_is_out_within_twice_its_ttl(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await node.coordinator.register_executor("app1", "workers", executor("silent"))
    await node.coordinator.register_executor("app1", "workers", executor("beating"))
    await wait_for(lambda: len(node.coordinator.live_executors("app1", "workers")) == 2, "both live")
    registered_at = time.monotonic()

    async def heartbeats() -> None:
        while True:
            await asyncio.sleep(EXECUTOR_TTL_S / 4)
            assert await node.coordinator.renew_executor("app1", "workers", "beating") is not None

    beating = asyncio.create_task(heartbeats())
    try:
        await wait_for(
            lambda: ids(node.coordinator.live_executors("app1", "workers")) == ["beating"],
            "the silent executor out of the live view",
            timeout_s=2 * EXECUTOR_TTL_S,
        )
        assert ids(await node.coordinator.pool_executors("app1", "workers")) == ["beating"]
        assert await node.coordinator.renew_executor("app1", "workers", "silent") is None
        await asyncio.sleep(max(2 * EXECUTOR_TTL_S - (time.monotonic() - registered_at), 0))  # past its TTL
        assert ids(await node.coordinator.pool_executors("app1", "workers")) == ["beating"]
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating  # a heartbeat that failed raises here


async def test_a_heartbeating_executor_stays_with_few_lease_renewals_and_a_silent_one_leaves_within_twice_its_ttl(
    cluster_backend: Backend,
) -> None:
    """An executor's lease outlasts its TTL (it is granted 2 x TTL - 1 s) and a node renews it only when
    less than half a TTL of it would be left by the next heartbeat's latest time: an executor beating
    every third of its TTL stays live on a few renewals, a silent one is out of every view within
    2 x TTL of its registration."""
    node = cluster_backend.member("n0")
    await node.start()
    pools = node.coordinator._pools  # type: ignore[attr-defined]
    await node.coordinator.register_executor("app1", "workers", executor("silent"))
    await node.coordinator.register_executor("app1", "workers", executor("beating"))
    registered_at = time.monotonic()
    sent = pools._keepalives.sent
    while time.monotonic() - registered_at < 6 * EXECUTOR_TTL_S:
        await asyncio.sleep(EXECUTOR_TTL_S / 3)
        assert await node.coordinator.renew_executor("app1", "workers", "beating") is not None
        if time.monotonic() - registered_at > 2 * EXECUTOR_TTL_S:
            assert ids(node.coordinator.live_executors("app1", "workers")) == ["beating"]
    # ~18 heartbeats over 12 s; a lease of 3 s renewed once less than 1 s of it would be left: every 2 to
    # 2.7 s (a 2 s lease renewed at half its TTL: every 1.3 s, 9 renewals)
    assert pools._keepalives.sent - sent <= 6


async def test_a_node_reads_the_pools_whole_only_when_they_changed_and_sees_every_change(
    cluster_backend: Backend,
) -> None:
    """The pool sync of a node whose pools did not change since its last whole read asks etcd only
    whether they did; a registration, a re-registration, a deregistration and a lease running out
    through another node still reach its view."""
    writer, reader = cluster_backend.member("n0"), cluster_backend.member("n1")
    for member in (writer, reader):
        await member.start()
    pools = reader.coordinator._pools  # type: ignore[attr-defined]
    for name in ("e1", "e2", "e3"):
        await writer.coordinator.register_executor("app1", "workers", replace(executor(name), ttl_s=30))
    await wait_for(lambda: ids(reader.coordinator.live_executors("app1", "workers")) == ["e1", "e2", "e3"], "3 live")
    whole, synced = pools.read_whole, pools.synced
    await wait_for(lambda: pools.synced >= synced + 5, "five more syncs")
    assert pools.read_whole == whole  # nothing changed: no whole read

    await writer.coordinator.register_executor("app1", "workers", replace(executor("e4"), ttl_s=30))
    await wait_for(lambda: len(reader.coordinator.live_executors("app1", "workers")) == 4, "e4 live on the reader")
    await writer.coordinator.register_executor("app1", "workers", replace(executor("e1", zone="b"), ttl_s=30))
    await wait_for(lambda: reader.coordinator.live_executors("app1", "workers")[0].zone == "b", "e1 moved zone")
    assert await writer.coordinator.deregister_executor("app1", "workers", "e2")
    await wait_for(lambda: ids(reader.coordinator.live_executors("app1", "workers")) == ["e1", "e3", "e4"], "e2 gone")
    await writer.coordinator.register_executor("app1", "workers", executor("silent"))  # TTL 2 s, never renewed
    await wait_for(lambda: len(reader.coordinator.live_executors("app1", "workers")) == 4, "silent live")
    await wait_for(
        lambda: ids(reader.coordinator.live_executors("app1", "workers")) == ["e1", "e3", "e4"],
        "the silent executor out of the reader's view",
        timeout_s=2 * EXECUTOR_TTL_S,
    )
    assert pools.read_whole > whole


async def test_an_executor_registered_through_one_node_is_live_renewed_and_removed_through_another(
    cluster_backend: Backend,
) -> None:
    first, second = cluster_backend.member("n0"), cluster_backend.member("n1")
    for member in (first, second):
        await member.start()
    await first.coordinator.register_executor("app1", "workers", executor("e1"))
    await wait_for(lambda: ids(second.coordinator.live_executors("app1", "workers")) == ["e1"], "e1 live on n1")
    assert await second.coordinator.renew_executor("app1", "workers", "e1") is not None
    assert await second.coordinator.deregister_executor("app1", "workers", "e1") is True
    await wait_for(lambda: first.coordinator.live_executors("app1", "workers") == (), "e1 gone on n0")


async def test_each_live_executor_is_read_with_its_lease_left_and_the_time_since_its_heartbeat(
    backend: Backend,
) -> None:
    node = backend.member("n0")
    await node.start()
    coordinator = node.coordinator
    await coordinator.register_executor("app1", "workers", executor("e1"))
    await coordinator.register_executor("app1", "other", replace(executor("e2"), ttl_s=30))
    assert await coordinator.renew_executor("app1", "workers", "e1") is not None

    leases = await coordinator.pool_leases("app1")
    assert list(leases) == ["other", "workers"]
    (e1,) = leases["workers"]
    assert e1.executor == (await coordinator.pool_executors("app1", "workers"))[0]
    # its lease ends at most TTL (embedded) or 2 x TTL - 1 s (etcd) after the heartbeat just sent
    assert 0 < e1.lease_left_ms <= (2 * EXECUTOR_TTL_S - 1) * 1000
    assert 0 <= e1.heartbeat_age_ms < SETTLE_TIMEOUT_S * 1000
    (e2,) = leases["other"]
    assert EXECUTOR_TTL_S * 1000 < e2.lease_left_ms <= (2 * 30 - 1) * 1000
    assert list(await coordinator.pool_leases("app1", "workers")) == ["workers"]
    assert await coordinator.pool_leases("app1", "none") == {}
    assert await coordinator.pool_leases("app2") == {}  # another app's pools are not its own


async def test_a_node_publishes_its_figures_and_reads_them_back(backend: Backend) -> None:
    node = backend.member("n0")
    await node.start()
    await node.coordinator.publish_node_figures({"wheel_tasks": 3, "published_at_ms": 1})
    await node.coordinator.publish_node_figures({"wheel_tasks": 4, "published_at_ms": 2})  # replaces the first
    assert await node.coordinator.node_figures() == {"n0": {"wheel_tasks": 4, "published_at_ms": 2}}


async def test_every_node_reads_every_live_nodes_figures_and_a_stopped_nodes_are_gone(
    cluster_backend: Backend,
) -> None:
    first, second = cluster_backend.member("n0"), cluster_backend.member("n1")
    for member in (first, second):
        await member.start()
    await first.coordinator.publish_node_figures({"wheel_tasks": 1})
    await second.coordinator.publish_node_figures({"wheel_tasks": 2})
    assert await first.coordinator.node_figures() == {"n0": {"wheel_tasks": 1}, "n1": {"wheel_tasks": 2}}
    await second.coordinator.stop()  # its lease revoked: its record with it
    assert await first.coordinator.node_figures() == {"n0": {"wheel_tasks": 1}}
