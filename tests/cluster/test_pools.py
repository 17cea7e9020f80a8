"""Executor pools on real processes: two tjobs nodes on etcd (MariaDB, Redis), and executor services
(``examples/executor_service.py``) in two zones, each a process of its own that registers through one of
the nodes, heartbeats (TTL 2 s), and appends every job it runs to a file the test reads.

- ``all`` reaches every executor, ``one_per_zone`` one in each zone, ``one`` exactly one per fire, spread
  evenly by round robin;
- kill -9 of one executor mid-run: ``one`` fails over within the same flow (0 lost), ``all`` stops
  including it once its TTL ran out, ``sharded`` gives its items to the live ones; a sixth executor
  joining takes its share, and no item runs twice for one fire.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testkit.children import REPO
from testkit.cluster_rig import ADMIN_AUTH, Api, ClusterRig, NodeProc, now_ms
from testkit.ports import free_port
from tjobs.clock import iso_ms

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(300)]

EXECUTOR_TTL_S = 2
POOL = "workers"
ZONES = {"e0": "z1", "e1": "z2", "e2": "z1", "e3": "z2", "e4": "z1", "e5": "z2"}


@dataclass
class ExecutorProcs:
    """Executor service processes started by this test (and only those are ever signalled)."""

    work_dir: Path
    api_key: str = ""
    secrets: list[str] = field(default_factory=list)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, executor_id: str, node: NodeProc) -> None:
        command = [
            sys.executable,
            str(REPO / "examples" / "executor_service.py"),
            "--port",
            str(free_port()),
            "--tjobs-url",
            node.base_url,
            "--api-key",
            self.api_key,
            "--signing-secrets",
            ",".join(self.secrets),
            "--pool",
            POOL,
            "--zone",
            ZONES[executor_id],
            "--executor-id",
            executor_id,
            "--ttl-s",
            str(EXECUTOR_TTL_S),
            "--record",
            str(self.work_dir / f"{executor_id}.jsonl"),
        ]
        with (self.work_dir / f"{executor_id}.log").open("ab") as log:
            self.processes[executor_id] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    def kill(self, executor_id: str) -> None:
        process = self.processes[executor_id]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def records(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for path in sorted(self.work_dir.glob("*.jsonl")):
            found.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
        return found


@pytest.fixture
def executors(tmp_path: Path) -> Iterator[ExecutorProcs]:
    procs = ExecutorProcs(tmp_path)
    yield procs
    procs.stop_all()


@pytest.fixture
async def cluster(rig: ClusterRig, api: Api, executors: ExecutorProcs) -> AsyncIterator[ClusterRig]:
    for index in (1, 2):
        rig.start(index)
    for node in rig.live():
        await api.wait_healthy(node)
    await api.wait_stable(2)
    reply = await api.http.post(f"{rig.nodes[1].base_url}/v1/apps", json={"name": "pools"}, headers=ADMIN_AUTH)
    reply.raise_for_status()
    executors.api_key, executors.secrets = reply.json()["api_key"], reply.json()["secrets"]
    api.api_key = executors.api_key
    yield rig


async def live_executors(api: Api, node: NodeProc) -> list[str]:
    reply = await api.http.get(f"{node.base_url}/v1/pools/{POOL}", headers=api._auth())
    return [] if reply.status_code == 404 else [e["id"] for e in reply.json()["executors"]]


async def until(condition: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s} s: {what}", pytrace=False)
        await asyncio.sleep(0.2)


async def start_executors(rig: ClusterRig, api: Api, executors: ExecutorProcs, ids: list[str]) -> None:
    for number, executor_id in enumerate(ids):
        executors.start(executor_id, rig.nodes[1 + number % 2])  # registered through either node

    async def all_live() -> bool:
        views = [set(await live_executors(api, node)) for node in rig.live()]
        return all(set(ids) <= view for view in views)

    await until(all_live, f"{ids} live on every node")


async def pool_tasks(api: Api, rig: ClusterRig, route: dict[str, Any], instants: list[int]) -> dict[int, int]:
    """One ``at`` task per instant whose callback names the pool with ``route``: task id -> instant."""
    created: dict[int, int] = {}
    for at_ms in instants:
        body = {
            "name": f"pool-{route.get('mode', 'one')}",
            "schedule": {"kind": "at", "at": iso_ms(at_ms)},
            "callback": {"pool": {"name": POOL, **route}, "max_age_s": 120},
            "misfire_policy": "fire_now",
        }
        reply = await api.http.post(f"{rig.nodes[1].base_url}/v1/tasks", json=body, headers=api._auth())
        assert reply.status_code == 201, reply.text
        created[int(reply.json()["id"])] = at_ms
    return created


async def delivered(api: Api, rig: ClusterRig, tasks: dict[int, int], timeout_s: float = 60.0) -> dict[int, str]:
    """Wait until every task's one flow is terminal; task id -> flow id (each must be delivered)."""
    flows: dict[int, dict[str, Any]] = {}

    async def terminal() -> bool:
        for task_id in tasks:
            if task_id in flows and flows[task_id]["status"] in ("delivered", "dead"):
                continue
            found = await api.flows(rig.nodes[1], task_id)
            if len(found) == 1:
                flows[task_id] = found[0]
        return len(flows) == len(tasks) and all(f["status"] in ("delivered", "dead") for f in flows.values())

    await until(terminal, "every flow terminal", timeout_s)
    assert {task: f["status"] for task, f in flows.items() if f["status"] != "delivered"} == {}
    return {task: str(f["id"]) for task, f in flows.items()}


def runs_by_flow(records: list[dict[str, Any]], path: str) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record["path"] == path:
            grouped[record["flow_id"]].append(record)
    return grouped


async def test_all_reaches_five_one_per_zone_two_and_one_exactly_one_spread_evenly(
    cluster: ClusterRig, api: Api, executors: ExecutorProcs
) -> None:
    ids = ["e0", "e1", "e2", "e3", "e4"]
    await start_executors(cluster, api, executors, ids)
    start = now_ms() + 3000
    every = [start + 250 * i for i in range(10)]
    broadcast = await pool_tasks(api, cluster, {"mode": "all", "path": "/all"}, every)
    zoned = await pool_tasks(api, cluster, {"mode": "one_per_zone", "path": "/zone"}, every)
    single = await pool_tasks(api, cluster, {"path": "/one"}, [start + 100 * i for i in range(20)])
    flows = {
        "/all": await delivered(api, cluster, broadcast),
        "/zone": await delivered(api, cluster, zoned),
        "/one": await delivered(api, cluster, single),
    }
    records = executors.records()
    for path, expected in (("/all", 5), ("/zone", 2), ("/one", 1)):
        runs = runs_by_flow(records, path)
        assert set(runs) == set(flows[path].values())  # every fire ran somewhere, nothing else did
        for flow_id, ran in runs.items():
            assert len(ran) == expected, (path, flow_id, ran)
            assert len({r["executor"] for r in ran}) == expected
            if path == "/zone":
                assert sorted(r["zone"] for r in ran) == ["z1", "z2"]
    spread = Counter(r["executor"] for r in records if r["path"] == "/one")
    assert set(spread) == set(ids)
    assert max(spread.values()) - min(spread.values()) <= len(cluster.live())  # round robin per node


async def test_a_killed_executor_fails_over_drops_out_after_its_ttl_and_its_items_move(
    cluster: ClusterRig, api: Api, executors: ExecutorProcs
) -> None:
    ids = ["e0", "e1", "e2", "e3", "e4"]
    await start_executors(cluster, api, executors, ids)
    start = now_ms() + 8000  # registering the tasks takes a few seconds on a loaded machine
    instants = [start + 1000 * i for i in range(12)]
    # A burst of `one` fires lands between the kill (start + 2.2 s) and the next broadcast (start + 3 s):
    # ten fires over two nodes' round robins of five reach e0 on at least one node before a broadcast
    # or sharded send to e0 opens its breaker there (after which `one` skips e0 and never fails over).
    burst = [start + 2400 + 25 * i for i in range(10)]
    single = await pool_tasks(api, cluster, {"path": "/one"}, [start + 250 * i for i in range(48)] + burst)
    broadcast = await pool_tasks(api, cluster, {"mode": "all", "path": "/all"}, instants)
    sharded = await pool_tasks(api, cluster, {"mode": "sharded", "shard_total": 10, "path": "/shard"}, instants)
    assert now_ms() < start, "the tasks were not all registered before the first fire"
    await asyncio.sleep(max(start + 2200 - now_ms(), 0) / 1000)
    executors.kill("e0")
    killed_ms = now_ms()

    one_flows = await delivered(api, cluster, single)  # 0 lost: every flow delivered, by failover if need be
    all_flows = await delivered(api, cluster, broadcast)
    shard_flows = await delivered(api, cluster, sharded)
    records = executors.records()
    runs = runs_by_flow(records, "/one")
    assert set(runs) == set(one_flows.values())
    failed_over = [ran for ran in runs.values() if ran[-1]["attempt"] > 1]
    after_kill = sorted(
        (r["at_ns"] // 1_000_000 - killed_ms, r["executor"], r["attempt"]) for r in records if r["path"] == "/one"
    )
    assert failed_over, f"no flow was refused by e0 and delivered by another executor: {after_kill}"
    assert all(ran[-1]["executor"] != "e0" for ran in failed_over)

    gone_after_ms = killed_ms + 2 * EXECUTOR_TTL_S * 1000 + 1000  # its TTL twice, plus a pool sync
    all_runs = runs_by_flow(records, "/all")
    for task_id, flow_id in all_flows.items():
        reached = {r["executor"] for r in all_runs[flow_id]}
        if broadcast[task_id] >= gone_after_ms:
            assert reached == set(ids) - {"e0"}, (iso_ms(broadcast[task_id]), reached)
        else:
            assert reached >= set(ids) - {"e0"}

    shard_runs = runs_by_flow(records, "/shard")
    for task_id, flow_id in shard_flows.items():
        items = Counter(r["shard_index"] for r in shard_runs[flow_id])
        assert set(items) == set(range(10)), items  # every item ran
        if sharded[task_id] >= gone_after_ms:
            assert max(items.values()) == 1  # and once
            holders = Counter(r["executor"] for r in shard_runs[flow_id])
            assert "e0" not in holders and sorted(holders.values()) == [2, 2, 3, 3], holders

    # A sixth executor joins: the items re-spread over five, one run per item per fire.
    await start_executors(cluster, api, executors, ["e5"])
    later = now_ms() + 2000
    rebalanced = await pool_tasks(
        api, cluster, {"mode": "sharded", "shard_total": 10, "path": "/shard"}, [later + 500 * i for i in range(4)]
    )
    rebalanced_flows = await delivered(api, cluster, rebalanced)
    shard_runs = runs_by_flow(executors.records(), "/shard")
    for flow_id in rebalanced_flows.values():
        ran = shard_runs[flow_id]
        assert sorted(r["shard_index"] for r in ran) == list(range(10))
        assert sorted(Counter(r["executor"] for r in ran).values()) == [2, 2, 2, 2, 2]
