"""Partitions with real node processes: a TCP proxy (testkit/tcp_proxy.py) between the nodes and one
service cuts ONE node's path to it while one-shot tasks fire across the cut. Nothing is killed or frozen:
the victim runs on and must notice by itself.

* Cut from one MariaDB server: the victim pauses that server's shards and says so in etcd; the leader
  moves them to the node that reaches the server. 0 lost, 0 duplicate flows, and that server's tasks
  are late by at most the failover bound (7 s), not by the cut's length.
* Cut from etcd: the victim stops committing before its lease can end (lease TTL minus the fence
  margin), so the node that takes its group over never fires beside it. 0 lost, 0 duplicate flows.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from testkit.cluster_rig import Api, ClusterRig, Infra, now_ms
from testkit.databases import drop_databases
from testkit.tcp_proxy import TcpProxy, proxy_url
from tests.cluster.workload import Outcome, collect_when_fired, in_shards, schedule
from tests.receiver import Receiver
from tjobs.settings import StorageSettings

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(300)]

FAILOVER_BOUND_MS = 7000
VICTIM = 2  # cut from etcd; node 1 serves the test's API calls there
CUT_SERVER = 1  # the second MariaDB server (the first holds the apps table)


def _port(url: str) -> int:
    port = make_url(url).port
    assert port is not None
    return port


@pytest.fixture(scope="module")
def db_proxy(infra: Infra) -> Iterator[TcpProxy]:
    with TcpProxy(_port(infra.storage_urls[CUT_SERVER])) as proxy:
        yield proxy


def _proxied_urls(infra: Infra, proxy: TcpProxy) -> list[str]:
    urls = list(infra.storage_urls)
    urls[CUT_SERVER] = proxy_url(urls[CUT_SERVER], proxy)
    return urls


@pytest.fixture(scope="module")
def proxied_prefix(infra: Infra, db_proxy: TcpProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A schema of its own: every node reaches the cut server through the proxy, so the server's name
    (``host:port``) in the layout record is the proxy's."""
    prefix = f"tjpt_{secrets.token_hex(3)}"
    storage = {"storage": {"urls": _proxied_urls(infra, db_proxy)}}
    ClusterRig(infra, tmp_path_factory.mktemp("migrate-partitions"), "migrate", prefix, overrides=storage).migrate()
    yield prefix
    drop_databases(StorageSettings(urls=infra.storage_urls, database_prefix=prefix))


@pytest.fixture
async def db_cut_rig(
    infra: Infra, proxied_prefix: str, db_proxy: TcpProxy, tmp_path: Path
) -> AsyncIterator[tuple[ClusterRig, Api]]:
    infra.ensure()
    storage = {"storage": {"urls": _proxied_urls(infra, db_proxy)}}
    rig = ClusterRig(infra, tmp_path, f"p{secrets.token_hex(4)}", proxied_prefix, overrides=storage)
    api = Api(rig)
    try:
        yield rig, api
    finally:
        for index in (1, 2):
            db_proxy.set_mode("pass", f"node{index}")
        db_proxy.clients.clear()
        await api.close()
        rig.stop_all()


async def start_two(rig: ClusterRig, api: Api, proxy: TcpProxy) -> None:
    """Start nodes 1 and 2 (each named by its node id at the proxy), wait until stable, create the app."""
    for index in (1, 2):
        node = rig.start(index)
        proxy.clients[node.pid] = node.node_id
    for node in rig.live():
        await api.wait_healthy(node)
    await api.wait_stable(2)
    await api.create_app(rig.nodes[1])


async def sleep_until(at_ms: int) -> None:
    await asyncio.sleep(max(at_ms - now_ms(), 0) / 1000)


def lateness_ms(outcome: Outcome, tasks: dict[int, int]) -> dict[int, int]:
    return {task: outcome.fired_at(task) - at for task, at in tasks.items()}


async def cut_one_server(rig: ClusterRig, api: Api, proxy: TcpProxy, receiver: Receiver, cut_s: float) -> None:
    await start_two(rig, api, proxy)
    server_shards = set(rig.shards_of_server(CUT_SERVER))
    # The victim: a node holding shards of the cut server; the test's calls go through the other one.
    holding = [node for node in rig.live() if set((await api.view(node))["jobs"]) & server_shards]
    victim = holding[-1]
    other = next(node for node in rig.live() if node is not victim)
    start = now_ms() + 2500
    window_ms = int(cut_s * 1000) + 8000
    tasks = await schedule(api, other, receiver.url(), start, start + window_ms, 50)
    await sleep_until(start + 2000)
    proxy.set_mode("blackhole", victim.node_id)
    try:
        await asyncio.sleep(FAILOVER_BOUND_MS / 1000)
        held = set((await api.view(victim))["jobs"])
        assert not held & server_shards, "the victim still owns shards of the server it cannot reach"
        await asyncio.sleep(max(cut_s - FAILOVER_BOUND_MS / 1000, 0))
    finally:
        proxy.set_mode("pass", victim.node_id)
    outcome = await collect_when_fired(api, other, tasks, 9000)
    assert outcome.lost == [] and outcome.duplicated == []
    late = lateness_ms(outcome, in_shards(tasks, server_shards))
    worst = max(late, key=lambda task: late[task])
    print(f"cut server's tasks: {len(late)}, worst {late[worst]} ms late")
    assert late[worst] <= FAILOVER_BOUND_MS, f"task {worst} of the cut server fired {late[worst]} ms late"
    assert "unreachable" in victim.log.read_text(errors="replace")
    leader_logs = "".join(node.log.read_text(errors="replace") for node in rig.nodes.values())
    assert "re-packed at once" in leader_logs, "the leader moved the shards off the cut-off node at once"


@pytest.mark.timing
async def test_a_node_cut_off_from_one_server_hands_its_shards_over_within_the_failover_bound(
    db_cut_rig: tuple[ClusterRig, Api], db_proxy: TcpProxy, receiver: Receiver
) -> None:
    rig, api = db_cut_rig
    await cut_one_server(rig, api, db_proxy, receiver, cut_s=12)


@pytest.mark.chaos
@pytest.mark.timing
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("repetition", range(5))
async def test_a_long_cut_from_one_server_repeatedly(
    db_cut_rig: tuple[ClusterRig, Api], db_proxy: TcpProxy, receiver: Receiver, repetition: int
) -> None:
    rig, api = db_cut_rig
    await cut_one_server(rig, api, db_proxy, receiver, cut_s=40)


# ---- cut from etcd ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def etcd_proxy(infra: Infra) -> Iterator[TcpProxy]:
    with TcpProxy(_port(infra.etcd_url)) as proxy:
        yield proxy


@pytest.fixture
def etcd_cut_rig(rig: ClusterRig, infra: Infra, etcd_proxy: TcpProxy) -> Iterator[ClusterRig]:
    rig.overrides = {"cluster": {"etcd_endpoints": [proxy_url(infra.etcd_url, etcd_proxy)]}}
    try:
        yield rig
    finally:
        etcd_proxy.set_mode("pass", f"node{VICTIM}")
        etcd_proxy.clients.clear()


def committers(receiver: Receiver) -> dict[str, str]:
    """Task id -> the node that sent its first attempt (the node that committed its fire)."""
    found: dict[str, str] = {}
    for request in receiver.requests:
        if request.attempt == 1:
            found.setdefault(request.headers.get("tjobs-task-id", ""), request.headers.get("user-agent", ""))
    return found


def overlap_report(
    outcome: Outcome,
    mine: dict[int, int],
    by: dict[str, str],
    victim_agent: str,
    last_ms: int,
    first_ms: int,
    cut_ms: int,
) -> str:
    """The flows between the other node's first take-over and the victim's last commit (times from the cut):
    instant, created_at, sender of the first attempt, attempts, status."""
    lines = []
    for task, at in sorted(mine.items(), key=lambda item: outcome.fired_at(item[0])):
        created = outcome.fired_at(task)
        if first_ms <= created <= last_ms:
            flow = outcome.flows[task][0]
            sender = "victim" if by.get(str(task)) == victim_agent else by.get(str(task))
            lines.append(
                f"task {task} at +{at - cut_ms} created +{created - cut_ms} by {sender} "
                f"attempts {flow.get('attempts')} {flow.get('status')}"
            )
    return "; ".join(lines[:40])


async def cut_from_etcd(rig: ClusterRig, api: Api, proxy: TcpProxy, receiver: Receiver, cut_s: float) -> None:
    await start_two(rig, api, proxy)
    victim = rig.nodes[VICTIM]
    victim_shards = set((await api.view(victim))["jobs"])
    assert victim_shards
    start = now_ms() + 2500
    tasks = await schedule(api, rig.nodes[1], receiver.url(), start, start + int(cut_s * 1000) + 8000, 50)
    await sleep_until(start + 2000)
    proxy.set_mode("blackhole", victim.node_id)
    cut_ms = now_ms()
    try:
        await asyncio.sleep(cut_s)
    finally:
        proxy.set_mode("pass", victim.node_id)
    healed_ms = now_ms()  # from here the victim may rejoin and take its own group back
    outcome = await collect_when_fired(api, rig.nodes[1], tasks, 9000)
    assert outcome.lost == [] and outcome.duplicated == []
    by = committers(receiver)
    mine = in_shards(tasks, victim_shards)
    victim_agent = f"tjobs-rig/{victim.node_id}"
    victim_fired = [outcome.fired_at(t) for t in mine if by.get(str(t)) == victim_agent]
    taken_over = [outcome.fired_at(t) for t in mine if by.get(str(t)) not in (None, victim_agent)]
    assert victim_fired and taken_over, "the victim fired before the cut and another node after it"
    fired_while_cut = [at for at in victim_fired if at < healed_ms]
    assert max(fired_while_cut) < min(taken_over), (
        "the victim committed after its group was taken over: "
        + overlap_report(outcome, mine, by, victim_agent, max(fired_while_cut), min(taken_over), cut_ms)
    )
    due_after_cut = {t: at for t, at in mine.items() if at >= cut_ms}
    late = lateness_ms(outcome, due_after_cut)
    print(f"victim's tasks due after the cut: {len(late)}, worst {max(late.values())} ms late")
    assert max(late.values()) <= FAILOVER_BOUND_MS, f"the victim's shards fired {max(late.values())} ms late"
    log = victim.log.read_text(errors="replace")
    assert "keepalive failed" in log or "lease lost" in log


@pytest.mark.timing
async def test_a_node_cut_off_from_etcd_stops_firing_before_its_lease_can_be_taken_over(
    etcd_cut_rig: ClusterRig, api: Api, etcd_proxy: TcpProxy, receiver: Receiver
) -> None:
    await cut_from_etcd(etcd_cut_rig, api, etcd_proxy, receiver, cut_s=10)


@pytest.mark.chaos
@pytest.mark.timing
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("repetition", range(5))
async def test_a_long_cut_from_etcd_repeatedly(
    etcd_cut_rig: ClusterRig, api: Api, etcd_proxy: TcpProxy, receiver: Receiver, repetition: int
) -> None:
    await cut_from_etcd(etcd_cut_rig, api, etcd_proxy, receiver, cut_s=30)
