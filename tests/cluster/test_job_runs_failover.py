"""A pool task's overlap across a kill -9 in a cluster (README "Job runs", docs/pools.md "Overlap"): two
nodes on etcd, MariaDB and Redis; a task firing every second into a pool whose executor (the receiver)
accepts each send as a run. The node owning the task's shard is killed -9 while the run lives: the node
that takes its job group over (etcd lease expiry) learns the run from the store, so it skips every
instant until the run's end is reported to it, then exactly one more run starts."""

from __future__ import annotations

import asyncio
import time

import pytest

from sharding import shard_of_task_id
from testkit.cluster_rig import Api, ClusterRig, NodeProc
from tests.cluster.workload import start_cluster
from tests.receiver import Receiver, Reply

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(240)]

ACCEPTED = Reply(202, headers={"tjobs-run": "accepted"})


async def _until_running(api: Api, node: NodeProc, flow_id: str, auth: dict[str, str]) -> None:
    deadline = time.monotonic() + 10
    while (await api.http.get(f"{node.base_url}/v1/flows/{flow_id}", headers=auth)).json()["status"] != "running":
        assert time.monotonic() < deadline, f"flow {flow_id} not running within 10 s"
        await asyncio.sleep(0.05)


async def test_a_run_live_when_its_owner_is_killed_blocks_the_task_on_the_node_that_takes_over(
    rig: ClusterRig, api: Api
) -> None:
    async with Receiver(ACCEPTED) as receiver:
        await start_cluster(rig, api, 2)
        first = rig.nodes[1]
        auth = {"Authorization": f"Bearer {api.api_key}"}
        executor = {"id": "e0", "address": receiver.url("/"), "zone": "a", "ttl_s": 120}
        joined = await api.http.post(f"{first.base_url}/v1/pools/workers/executors", json=executor, headers=auth)
        assert joined.status_code in (200, 201), joined.text
        pool = {"name": "workers", "path": "/sweep", "overlap": "skip_if_running"}
        task = {
            "name": "sweep",
            "schedule": {"kind": "interval", "every_ms": 1_000},
            "callback": {"pool": pool, "run_timeout_ms": 120_000},
        }
        created = await api.http.post(f"{first.base_url}/v1/tasks", json=task, headers=auth)
        assert created.status_code == 201, created.text
        task_id = int(created.json()["id"])
        [run] = await receiver.wait_for(1, path="/sweep", timeout_s=20)
        await _until_running(api, first, run.flow_id, auth)  # its start written (outcome_flush_ms after its 202)

        # Given the run live, its task's owner is killed -9
        owners = [n.index for n in rig.live() if shard_of_task_id(task_id) in (await api.view(n))["jobs"]]
        assert len(owners) == 1, owners
        rig.kill(owners[0])
        survivor = rig.nodes[2 if owners[0] == 1 else 1]
        killed = time.monotonic()

        # When the other node takes the group over (lease 5 s) and the task fires there for a while
        await api.wait_stable(1, timeout_s=30)
        await asyncio.sleep(4.0)
        during = [r.flow_id for r in receiver.for_path("/sweep")]
        flows = await api.flows(survivor, task_id)
        waited_s = time.monotonic() - killed

        # Then, once the run's end is reported to the survivor, exactly one more run starts
        report = {"status": "succeeded", "attempt": run.attempt}
        ended = await api.http.post(f"{survivor.base_url}/v1/flows/{run.flow_id}/report", json=report, headers=auth)
        await receiver.wait_for(2, path="/sweep", timeout_s=10)
        await asyncio.sleep(2.5)  # further instants while that run lives
        total = [r.flow_id for r in receiver.for_path("/sweep")]

    agents = [r.headers.get("user-agent") for r in receiver.for_path("/sweep")]
    assert during == [run.flow_id], (during, agents, waited_s)  # no second run while the first lived
    skipped = [f for f in flows if f["status"] == "skipped"]
    assert len(skipped) >= 3 and all(run.flow_id in f["last_error"] for f in skipped), flows
    assert ended.status_code == 200 and ended.json()["status"] == "delivered", ended.text
    assert len(total) == 2 and total[0] == run.flow_id, total
