"""The etcd coordinator's session fence and ownership hand-over when etcd ended every lease at once
(etcd frozen or restarted past the lease TTL), against a real etcd, over the memory store.

Given two nodes whose leases etcd ended together, a node back first does not end the database
sessions of a node that is only re-registering (its member key is missing for the same reason as the
node's own); a recorded node that stays gone has its sessions ended once the others' had time to come
back. A listener that fails to take jobs (its database session was ended under it) is given the
same jobs again at the next sync instead of their being counted as taken. A node whose stop is slow
resigns (sessions record deleted, lease revoked) before the slow step, so its sessions are not ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable

import aetcd
import pytest

from sharding import Topology
from tjobs.clock import SystemClock
from tjobs.cluster.etcd import EtcdCoordinator, _host_port
from tjobs.cluster.session_fence import sessions_value
from tjobs.errors import StorageUnavailable
from tjobs.settings import ClusterSettings
from tjobs.stores.base import ServerSessions
from tjobs.stores.memory import MemoryTaskStore

pytestmark = [pytest.mark.etcd]

SHARDS = 8
SERVER = "db:3306"
LEASE_TTL_S = 2


class SessionsStore(MemoryTaskStore):
    """The memory twin with one recorded session per node, recording which sessions it was told to end."""

    def __init__(self, session_id: int, ended: list[int]) -> None:
        super().__init__(Topology(1, 1, SHARDS))
        self.session_id = session_id
        self.ended = ended

    def fire_sessions(self) -> dict[str, ServerSessions]:
        return {SERVER: ServerSessions(1, [self.session_id])}

    async def end_sessions(self, server: str, sessions: ServerSessions) -> int:
        self.ended.extend(sessions.ids)
        return len(sessions.ids)


class Node:
    def __init__(self, etcd_url: str, cluster: str, node_id: str, session_id: int, ended: list[int]) -> None:
        settings = ClusterSettings(
            etcd_endpoints=[etcd_url],
            name=cluster,
            lease_ttl_s=LEASE_TTL_S,
            fence_margin_ms=500,
            sync_interval_ms=50,
        )
        self.owned: frozenset[int] = frozenset()
        self.fail_next_gain = False
        self.coordinator = EtcdCoordinator(
            settings,
            node_id=node_id,
            address=f"http://{node_id}",
            shard_count=SHARDS,
            cycle_s=300,
            store=SessionsStore(session_id, ended),
            clock=SystemClock(),
        )

    async def on_change(self, owned: frozenset[int]) -> None:
        if self.fail_next_gain and owned - self.owned:
            self.fail_next_gain = False
            raise StorageUnavailable("MySQL server has gone away")  # a load on an ended session
        self.owned = owned

    async def pause(self) -> None:
        """Stop the node's loops (a node slow to come back), keeping its state."""
        coordinator = self.coordinator
        for task in coordinator._tasks:
            task.cancel()
        await asyncio.gather(*coordinator._tasks, return_exceptions=True)
        coordinator._tasks.clear()

    def resume(self) -> None:
        coordinator = self.coordinator
        coordinator._tasks = [
            asyncio.create_task(coordinator._keepalive_loop()),
            asyncio.create_task(coordinator._sync_loop()),
        ]


@pytest.fixture
async def etcd(etcd_url: str) -> AsyncIterator[aetcd.Client]:
    host, port = _host_port(etcd_url)
    async with aetcd.Client(host=host, port=port) as client:
        yield client


@pytest.fixture
async def cluster_name(etcd: aetcd.Client) -> AsyncIterator[str]:
    name = f"fence-{secrets.token_hex(4)}"
    yield name
    await etcd.delete_prefix(f"/tjobs/{name}/".encode())


@contextlib.asynccontextmanager
async def running(nodes: list[Node]) -> AsyncIterator[None]:
    for node in nodes:
        await node.coordinator.start(node.on_change)
    try:
        yield
    finally:
        for node in nodes:
            with contextlib.suppress(Exception):
                await node.coordinator.stop()


async def wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not reached within {timeout_s} s")


def partitioned(nodes: list[Node]) -> bool:
    owned = sorted(s for node in nodes for s in node.owned)
    return owned == list(range(SHARDS)) and all(node.owned for node in nodes)


async def end_every_lease(etcd: aetcd.Client, nodes: list[Node]) -> None:
    """What etcd does to every lease when it comes back from a freeze longer than their TTL."""
    for node in nodes:
        lease_id = node.coordinator._lease_id
        assert lease_id is not None
        await etcd.revoke_lease(lease_id)


async def test_a_node_back_first_does_not_end_the_sessions_of_a_node_re_registering(
    etcd_url: str, etcd: aetcd.Client, cluster_name: str
) -> None:
    ended: list[int] = []
    first, late = Node(etcd_url, cluster_name, "n0", 100, ended), Node(etcd_url, cluster_name, "n1", 200, ended)
    async with running([first, late]):
        await wait_for(lambda: partitioned([first, late]), 10)
        late_groups = late.owned

        # Given etcd ended both leases at once, and the late node comes back after the first one
        await late.pause()
        await end_every_lease(etcd, [first, late])
        await wait_for(lambda: late_groups <= first.owned, 10)  # the first took the late one's jobs
        await asyncio.sleep(0.3)
        late.resume()

        # Then the late node gets its jobs back, and nobody ended its sessions
        await wait_for(lambda: partitioned([first, late]), 10)
        await asyncio.sleep(LEASE_TTL_S + 0.5)
        assert 200 not in ended and 100 not in ended, ended


async def test_a_recorded_node_that_stays_gone_has_its_sessions_ended_after_an_etcd_outage(
    etcd_url: str, etcd: aetcd.Client, cluster_name: str
) -> None:
    ended: list[int] = []
    survivor = Node(etcd_url, cluster_name, "n0", 100, ended)
    gone = SessionsStore(300, [])
    value = sessions_value(gone)
    assert value is not None
    await etcd.put(f"/tjobs/{cluster_name}/sessions/gone".encode(), value)
    async with running([survivor]):
        await wait_for(lambda: 300 in ended, 10)  # no outage seen: ended on taking the jobs
        ended.clear()
        await etcd.put(f"/tjobs/{cluster_name}/sessions/gone".encode(), value)

        # When etcd ended the survivor's lease (an outage), the gone node's sessions are still ended
        # once the survivor holds jobs again and the gone node did not come back
        await end_every_lease(etcd, [survivor])
        await wait_for(lambda: 300 in ended, 4 * LEASE_TTL_S + 5)
        assert 100 not in ended


async def test_a_listener_that_fails_to_take_jobs_is_given_them_again(etcd_url: str, cluster_name: str) -> None:
    node = Node(etcd_url, cluster_name, "n0", 100, [])
    node.fail_next_gain = True
    async with running([node]):
        # The first hand-over of the jobs failed; the next sync hands them over again
        await wait_for(lambda: node.owned == frozenset(range(SHARDS)), 5)
        assert node.coordinator.owned_jobs() == node.owned


async def test_a_node_ends_a_gone_owners_sessions_before_it_fires_the_shards_it_gained_by_a_re_plan(
    etcd_url: str, etcd: aetcd.Client, cluster_name: str
) -> None:
    ended: list[int] = []
    survivor, victim = Node(etcd_url, cluster_name, "n0", 100, ended), Node(etcd_url, cluster_name, "n1", 200, ended)
    ended_when_gained: list[list[int]] = []
    take = survivor.on_change

    async def on_change(owned: frozenset[int]) -> None:
        if owned & victim_shards:
            ended_when_gained.append(list(ended))
        await take(owned)

    survivor.on_change = on_change  # type: ignore[method-assign]
    victim_shards: frozenset[int] = frozenset()
    async with running([survivor, victim]):
        await wait_for(lambda: partitioned([survivor, victim]), 10)
        victim_shards = victim.owned

        # When the victim freezes and its lease is gone (the leader re-plans its shards onto the
        # survivor's group, which the survivor already holds: nothing is acquired)
        await victim.pause()
        lease_id = victim.coordinator._lease_id
        assert lease_id is not None
        await etcd.revoke_lease(lease_id)
        await wait_for(lambda: victim_shards <= survivor.owned, 10)

        # Then the survivor had ended the victim's sessions before it was handed the victim's shards
        assert ended_when_gained and all(200 in seen for seen in ended_when_gained), ended_when_gained
        assert 100 not in ended


async def test_a_node_that_hands_off_gracefully_keeps_its_sessions_while_it_drains(
    etcd_url: str, cluster_name: str
) -> None:
    ended: list[int] = []
    stays, leaves = Node(etcd_url, cluster_name, "n0", 100, ended), Node(etcd_url, cluster_name, "n1", 200, ended)
    async with running([stays, leaves]):
        await wait_for(lambda: partitioned([stays, leaves]), 10)

        # When one node stops gracefully (its deliveries still drain over its sessions after this)
        await leaves.coordinator.stop()
        await wait_for(lambda: stays.owned == frozenset(range(SHARDS)), 10)

        # Then the node taking its jobs over ended none of its sessions
        await asyncio.sleep(0.5)
        assert ended == []


async def test_a_node_slow_to_stop_keeps_its_sessions_while_the_other_takes_its_jobs(
    etcd_url: str, cluster_name: str
) -> None:
    # In a CI run the first node's stop hung in its DatabaseHealth.stop (fixed since), with its
    # keepalive already cancelled and its sessions still recorded: its lease ran out and the other node,
    # still running, took its groups and ended its sessions ("former owner n0 (its lease is gone)").
    ended: list[int] = []
    stops, stays = Node(etcd_url, cluster_name, "n0", 100, ended), Node(etcd_url, cluster_name, "n1", 200, ended)
    health = stops.coordinator._health
    stop_health = health.stop

    async def slow_stop() -> None:
        await asyncio.sleep(LEASE_TTL_S + 1.5)  # past the lease the stopping node no longer keeps alive
        await stop_health()

    health.stop = slow_stop  # type: ignore[method-assign]
    async with running([stops, stays]):
        await wait_for(lambda: partitioned([stops, stays]), 10)

        # When one node stops gracefully and a step of its stop outlasts its lease
        await stops.coordinator.stop()
        await wait_for(lambda: stays.owned == frozenset(range(SHARDS)), 10)

        # Then the node taking its jobs over ended none of its sessions
        await asyncio.sleep(0.5)
        assert ended == []
