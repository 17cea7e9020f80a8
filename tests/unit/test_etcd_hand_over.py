"""The etcd coordinator hands ownership to its listener one hand-over at a time: the keepalive loop
(a lost lease hands over the empty set) and the sync loop (a re-plan) can both call it."""

from __future__ import annotations

import asyncio

from sharding import Topology
from tjobs.clock import SystemClock
from tjobs.cluster.etcd import EtcdCoordinator
from tjobs.settings import ClusterSettings
from tjobs.stores.memory import MemoryTaskStore


async def test_a_hand_over_waits_for_the_one_in_progress_and_the_last_set_wins() -> None:
    coordinator = EtcdCoordinator(
        ClusterSettings(etcd_endpoints=["http://127.0.0.1:1"], name="hand-over"),
        node_id="n0",
        address="http://n0",
        shard_count=8,
        cycle_s=300,
        store=MemoryTaskStore(Topology(1, 1, 8)),
        clock=SystemClock(),
    )
    running = 0
    overlapped = False
    handed: list[frozenset[int]] = []
    release = asyncio.Event()

    async def listener(owned: frozenset[int]) -> None:
        nonlocal running, overlapped
        running += 1
        overlapped = overlapped or running > 1
        if not handed:
            await release.wait()  # a slow load of the gained jobs
        handed.append(owned)
        running -= 1

    coordinator._on_change = listener
    gain = asyncio.create_task(coordinator._set_owned(frozenset({1, 2})))
    await asyncio.sleep(0.01)
    lost = asyncio.create_task(coordinator._set_owned(frozenset()))  # the lease ended meanwhile
    await asyncio.sleep(0.01)
    release.set()
    await asyncio.gather(gain, lost)

    assert not overlapped
    assert handed == [frozenset({1, 2}), frozenset()]
    assert coordinator.owned_jobs() == frozenset()
