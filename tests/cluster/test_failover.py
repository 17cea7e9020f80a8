"""Failover with real node processes, etcd, 2 MariaDB servers and Redis (TTL 5 s, 16 shards, 10 s cycles).

Every test registers one-shot tasks over a window through node 1, breaks something mid-window, and
then proves from the flows that every task fired exactly once (0 lost, 0 duplicate flows).
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from testkit.cluster_rig import Api, ClusterRig, now_ms
from tests.cluster.workload import collect_when_fired, in_shards, schedule, start_cluster
from tests.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(240)]

TAKEOVER_LIMIT_MS = 7000


async def kill_primary_and_check(rig: ClusterRig, api: Api, receiver: Receiver) -> int:
    """Kill -9 the primary of node 2's group while tasks fire; returns kill-to-first-fire in ms."""
    await start_cluster(rig, api, 3)
    victim = rig.nodes[2]
    victim_jobs = set((await api.view(victim))["jobs"])
    start = now_ms() + 2500
    tasks = await schedule(api, rig.nodes[1], receiver.url(), start, start + 14_000, 50)
    await asyncio.sleep(max(start + 3000 - now_ms(), 0) / 1000)
    rig.kill(2)
    killed_ms = now_ms()
    outcome = await collect_when_fired(api, rig.nodes[1], tasks, 9000)
    assert outcome.lost == [] and outcome.duplicated == []
    orphaned = {t: at for t, at in in_shards(tasks, victim_jobs).items() if at >= killed_ms}
    assert orphaned, "the victim's shards had tasks due after the kill"
    first_fire_ms = min(outcome.fired_at(t) for t in orphaned)
    gap_ms = first_fire_ms - killed_ms
    assert gap_ms <= TAKEOVER_LIMIT_MS, f"backup fired {gap_ms} ms after the kill"
    return gap_ms


async def test_kill_9_primary_backup_fires_within_7s_nothing_lost_or_doubled(
    rig: ClusterRig, api: Api, receiver: Receiver
) -> None:
    await kill_primary_and_check(rig, api, receiver)


@pytest.mark.chaos
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("repetition", range(10))
async def test_kill_9_primary_repeatedly(rig: ClusterRig, api: Api, receiver: Receiver, repetition: int) -> None:
    await kill_primary_and_check(rig, api, receiver)


# The victim's commits are judged by instant, not by its commit counter: a fire whose COMMIT the server
# took just before the SIGSTOP is counted only after SIGCONT (two clean-clone runs failed so, 15 against 14
# and 14 against 13). What fencing forbids is a commit of an instant that came due while the victim was
# stopped: it could begin that fire only after SIGCONT, when its lease had passed to a backup.
@pytest.mark.timing
async def test_stopped_primary_commits_nothing_after_takeover_and_steps_down(
    rig: ClusterRig, api: Api, receiver: Receiver
) -> None:
    await start_cluster(rig, api, 3)
    start = now_ms() + 2500
    tasks = await schedule(api, rig.nodes[1], receiver.url(), start, start + 20_000, 50)
    await asyncio.sleep(max(start + 2000 - now_ms(), 0) / 1000)
    victim = rig.nodes[2]
    before = await api.view(victim)
    assert before["fires_committed"] > 0, "the victim fired nothing before the stop"
    rig.signal(2, signal.SIGSTOP)
    stopped_ms = now_ms()
    await asyncio.sleep(10)  # 2 x TTL: the backups take over meanwhile
    rig.signal(2, signal.SIGCONT)
    first_answer = await api.view(victim)
    newest = first_answer["newest_committed_instant_ms"]
    assert newest <= stopped_ms, f"a fenced node committed an instant due {newest - stopped_ms} ms after its stop"
    assert first_answer["owned_jobs"] == 0 or first_answer["fenced"] is None
    outcome = await collect_when_fired(api, rig.nodes[1], tasks, 9000)
    assert outcome.lost == [] and outcome.duplicated == []
    log = victim.log.read_text(errors="replace")
    assert "lease lost" in log


async def test_killed_dispatcher_leader_is_replaced_and_firing_continues(
    rig: ClusterRig, api: Api, receiver: Receiver
) -> None:
    view = await start_cluster(rig, api, 3)
    leader = str(view["leader"])
    index = int(leader.removeprefix("node"))
    via = next(node for node in rig.live() if node.index != index)
    start = now_ms() + 2000
    tasks = await schedule(api, via, receiver.url(), start, start + 12_000, 50)
    await asyncio.sleep(3)
    rig.kill(index)
    outcome = await collect_when_fired(api, via, tasks, 9000)
    after = await api.view(via)
    while after["leader"] in (None, leader) and now_ms() < max(tasks.values()) + 9000:  # the same bound
        await asyncio.sleep(0.2)
        after = await api.view(via)
    assert after["leader"] not in (None, leader)
    assert outcome.lost == [] and outcome.duplicated == []


async def test_scale_3_to_4_to_2_rebalances_without_loss(rig: ClusterRig, api: Api, receiver: Receiver) -> None:
    await start_cluster(rig, api, 3)
    start = now_ms() + 2000
    tasks = await schedule(api, rig.nodes[1], receiver.url(), start, start + 24_000, 60)
    await asyncio.sleep(2)
    rig.start(4)
    await api.wait_healthy(rig.nodes[4])
    view = await api.wait_stable(4, timeout_s=30)
    assert len(view["groups"]) == 4
    rig.stop(4)  # graceful
    rig.kill(3)  # and a crash
    view = await api.wait_stable(2, timeout_s=30)
    assert {g["primary"] for g in view["groups"]} == {"node1", "node2"}
    outcome = await collect_when_fired(api, rig.nodes[1], tasks, 9000)
    assert outcome.lost == [] and outcome.duplicated == []
