"""The etcd coordinator against a real etcd, three coordinators in one process over the memory store.

Given three nodes, every shard is owned by exactly one node; when one dies without resigning its
groups move to backups after the lease TTL; when one resigns they move at once; a node that stops
keeping its lease alive fences itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator

import pytest

from sharding import Topology
from tjobs.clock import SystemClock
from tjobs.cluster.etcd import EtcdCoordinator
from tjobs.settings import ClusterSettings
from tjobs.stores.memory import MemoryTaskStore

pytestmark = [pytest.mark.etcd]

SHARDS = 16


class Node:
    def __init__(self, etcd_url: str, cluster: str, node_id: str, zone: str) -> None:
        settings = ClusterSettings(
            etcd_endpoints=[etcd_url],
            name=cluster,
            lease_ttl_s=2,
            fence_margin_ms=500,
            zone=zone,
            sync_interval_ms=50,
        )
        self.owned: frozenset[int] = frozenset()
        self.changes = 0
        self.coordinator = EtcdCoordinator(
            settings,
            node_id=node_id,
            address=f"http://{node_id}",
            shard_count=SHARDS,
            cycle_s=300,
            store=MemoryTaskStore(Topology(1, 1, SHARDS)),
            clock=SystemClock(),
        )

    async def on_change(self, owned: frozenset[int]) -> None:
        self.owned = owned
        self.changes += 1

    async def crash(self) -> None:
        """Die without resigning: tasks stop, the lease is left to expire."""
        coordinator = self.coordinator
        coordinator._running = False
        for task in coordinator._tasks:
            task.cancel()
        await asyncio.gather(*coordinator._tasks, return_exceptions=True)
        coordinator._tasks.clear()
        self.owned = frozenset()


@pytest.fixture
async def cluster(etcd_url: str) -> AsyncIterator[list[Node]]:
    name = f"test-{secrets.token_hex(4)}"
    nodes = [Node(etcd_url, name, f"n{i}", zone) for i, zone in enumerate("abc")]
    for node in nodes:
        await node.coordinator.start(node.on_change)
    yield nodes
    for node in nodes:
        with contextlib.suppress(Exception):
            await node.coordinator.stop()
    import aetcd

    from tjobs.cluster.etcd import _host_port

    host, port = _host_port(etcd_url)
    async with aetcd.Client(host=host, port=port) as client:
        await client.delete_prefix(f"/tjobs/{name}/".encode())


async def wait_for(condition: object, timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if condition():  # type: ignore[operator]
            return time.monotonic() - started
        await asyncio.sleep(0.02)
    raise AssertionError(f"not reached within {timeout_s} s")


def partition_ok(nodes: list[Node]) -> bool:
    owned = [s for node in nodes for s in node.owned]
    return sorted(owned) == list(range(SHARDS)) and all(node.owned for node in nodes)


async def test_three_nodes_partition_every_shard_exactly_once(cluster: list[Node]) -> None:
    await wait_for(lambda: partition_ok(cluster), 10)
    view = cluster[0].coordinator.describe()
    assert view["plan_version"] is not None
    assert len(view["nodes"]) == 3  # type: ignore[arg-type]
    leaders = [n for n in cluster if n.coordinator.is_leader]
    assert len(leaders) == 1
    assert all(n.coordinator.may_fire(0) for n in cluster)


async def test_crashed_node_groups_move_to_backups_after_the_ttl(cluster: list[Node]) -> None:
    await wait_for(lambda: partition_ok(cluster), 10)
    victim, survivors = cluster[1], [cluster[0], cluster[2]]
    lost = victim.owned
    await victim.crash()
    took = await wait_for(lambda: lost <= frozenset(s for n in survivors for s in n.owned), 8)
    assert took < 4.5  # TTL 2 s + keepalive period + sync
    await wait_for(lambda: partition_ok(survivors), 5)


async def test_resigning_node_hands_off_at_once(cluster: list[Node]) -> None:
    await wait_for(lambda: partition_ok(cluster), 10)
    victim, survivors = cluster[2], cluster[:2]
    lost = victim.owned
    await victim.coordinator.stop()
    took = await wait_for(lambda: lost <= frozenset(s for n in survivors for s in n.owned), 5)
    assert took < 1.0


async def test_node_without_keepalive_fences_itself(cluster: list[Node]) -> None:
    await wait_for(lambda: partition_ok(cluster), 10)
    node = cluster[0]
    keepalive = node.coordinator._tasks[0]
    keepalive.cancel()
    await asyncio.gather(keepalive, return_exceptions=True)
    await wait_for(lambda: not node.coordinator.may_fire(0), 3)
    await wait_for(lambda: not node.owned, 3)
