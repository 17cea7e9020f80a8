"""A node whose clock disagrees with the database's, in a two-node cluster on a real etcd.

Given two coordinators in one process over the memory store (whose clock is the real one) and node
``n0``'s clock shifted: started shifted by ±2 s or ±30 s it never owns a job and ``n1`` owns them all;
stepped by that much while it owns jobs it may fire nothing from that instant, gives its jobs up and
``n1`` takes them, with no moment where both could fire one shard; back on time it takes jobs again.
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
from tjobs.cluster.etcd import EtcdCoordinator, _host_port
from tjobs.settings import ClusterSettings
from tjobs.stores.memory import MemoryTaskStore

pytestmark = [pytest.mark.etcd]

SHARDS = 8
SHIFTS_MS = [2_000, -2_000, 30_000, -30_000]


class ShiftedClock:
    def __init__(self) -> None:
        self.shift_ms = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.shift_ms


class Node:
    def __init__(self, etcd_url: str, cluster: str, node_id: str) -> None:
        self.clock = ShiftedClock()
        self.owned: frozenset[int] = frozenset()
        self.coordinator = EtcdCoordinator(
            ClusterSettings(
                etcd_endpoints=[etcd_url],
                name=cluster,
                lease_ttl_s=2,
                fence_margin_ms=500,
                sync_interval_ms=50,
                clock_skew_max_ms=1000,
            ),
            node_id=node_id,
            address=f"http://{node_id}",
            shard_count=SHARDS,
            cycle_s=300,
            store=MemoryTaskStore(Topology(1, 1, SHARDS)),
            clock=self.clock,
        )

    async def on_change(self, owned: frozenset[int]) -> None:
        self.owned = owned

    def may_fire(self) -> frozenset[int]:
        """The shards this node could commit a fire for now."""
        return self.owned if self.coordinator.may_fire(self.clock.now_ms()) else frozenset()


@pytest.fixture
async def pair(etcd_url: str) -> AsyncIterator[tuple[Node, Node, Callable[[], None]]]:
    name = f"test-{secrets.token_hex(4)}"
    nodes = (Node(etcd_url, name, "n0"), Node(etcd_url, name, "n1"))
    overlaps: list[frozenset[int]] = []
    sampling = True

    async def sample() -> None:  # no moment where both nodes could fire one shard
        while sampling:
            both = nodes[0].may_fire() & nodes[1].may_fire()
            if both:
                overlaps.append(both)
            await asyncio.sleep(0.005)

    def no_overlap() -> None:
        assert not overlaps, overlaps[:3]

    sampler = asyncio.create_task(sample())
    yield nodes[0], nodes[1], no_overlap
    sampling = False
    await sampler
    for node in nodes:
        with contextlib.suppress(Exception):
            await node.coordinator.stop()
    host, port = _host_port(etcd_url)
    async with aetcd.Client(host=host, port=port) as client:
        await client.delete_prefix(f"/tjobs/{name}/".encode())


async def wait_for(condition: Callable[[], bool], timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if condition():
            return time.monotonic() - started
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached within {timeout_s} s")


ALL = frozenset(range(SHARDS))


@pytest.mark.parametrize("shift_ms", SHIFTS_MS)
async def test_a_node_started_with_a_shifted_clock_never_owns_a_job(
    pair: tuple[Node, Node, Callable[[], None]], shift_ms: int
) -> None:
    skewed, good, no_overlap = pair
    skewed.clock.shift_ms = shift_ms
    await skewed.coordinator.start(skewed.on_change)
    await good.coordinator.start(good.on_change)
    await wait_for(lambda: good.owned == ALL, 10)
    await asyncio.sleep(1.0)  # several syncs: still nothing for the skewed node
    assert skewed.owned == frozenset() and not skewed.coordinator.may_fire(skewed.clock.now_ms())
    view = good.coordinator.describe()
    offsets = {n["id"]: n["clock_offset_ms"] for n in view["nodes"]}  # type: ignore[attr-defined]
    assert abs(offsets["n0"] + shift_ms) <= 20 and abs(offsets["n1"]) <= 20
    mine = skewed.coordinator.describe()
    assert mine["clock_offset_exceeded"] is True and mine["fenced"] == "clock"
    assert abs(int(mine["clock_offset_ms"]) + shift_ms) <= 20  # type: ignore[call-overload]

    skewed.clock.shift_ms = 0  # corrected: the node takes a share again
    await wait_for(lambda: bool(skewed.owned) and skewed.owned | good.owned == ALL, 10)
    assert not skewed.owned & good.owned
    no_overlap()


@pytest.mark.parametrize("step_ms", SHIFTS_MS)
async def test_a_node_whose_clock_steps_gives_its_jobs_up_at_once_and_the_other_takes_them(
    pair: tuple[Node, Node, Callable[[], None]], step_ms: int
) -> None:
    skewed, good, no_overlap = pair
    await skewed.coordinator.start(skewed.on_change)
    await good.coordinator.start(good.on_change)
    await wait_for(lambda: bool(skewed.owned) and bool(good.owned) and skewed.owned | good.owned == ALL, 10)

    skewed.clock.shift_ms = step_ms
    assert not skewed.coordinator.may_fire(skewed.clock.now_ms())  # at once: no read, no sync needed
    took = await wait_for(lambda: good.owned == ALL and not skewed.owned, 10)
    assert took < 3.0, took

    skewed.clock.shift_ms = 0
    await wait_for(lambda: bool(skewed.owned) and skewed.owned | good.owned == ALL, 10)
    no_overlap()
