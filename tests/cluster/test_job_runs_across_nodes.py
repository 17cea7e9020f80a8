"""A pool task's overlap judged across nodes (README "Job runs", docs/pools.md "Overlap"): two nodes on etcd,
MariaDB and Redis; a task firing every second into a pool whose executor (the receiver) accepts each send as a
run. A manual trigger taken by the node that does not own the task's shard is delivered there: it is skipped
while the owner's run lives; and a run it started holds the owner's scheduled fires until its end."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sharding import shard_of_task_id
from testkit.cluster_rig import Api, ClusterRig, NodeProc
from tests.cluster.workload import start_cluster
from tests.receiver import Receiver, Reply

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(240)]

ACCEPTED = Reply(202, headers={"tjobs-run": "accepted"})


async def _flow_until(api: Api, node: NodeProc, flow_id: str, status: str, auth: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        flow: dict[str, Any] = (await api.http.get(f"{node.base_url}/v1/flows/{flow_id}", headers=auth)).json()
        if flow["status"] == status:
            return flow
        assert time.monotonic() < deadline, flow
        await asyncio.sleep(0.05)


async def test_a_manual_run_on_another_node_and_the_owners_runs_never_overlap(rig: ClusterRig, api: Api) -> None:
    async with Receiver(ACCEPTED) as receiver:
        await start_cluster(rig, api, 2)
        auth = {"Authorization": f"Bearer {api.api_key}"}
        executor = {"id": "e0", "address": receiver.url("/"), "zone": "a", "ttl_s": 120}
        via = rig.nodes[1]
        joined = await api.http.post(f"{via.base_url}/v1/pools/workers/executors", json=executor, headers=auth)
        assert joined.status_code in (200, 201), joined.text
        pool = {"name": "workers", "path": "/sweep", "overlap": "skip_if_running"}
        task = {
            "name": "sweep",
            "schedule": {"kind": "interval", "every_ms": 1_000},
            "callback": {"pool": pool, "run_timeout_ms": 120_000},
        }
        created = await api.http.post(f"{via.base_url}/v1/tasks", json=task, headers=auth)
        assert created.status_code == 201, created.text
        task_id = int(created.json()["id"])
        owners = [n for n in rig.live() if shard_of_task_id(task_id) in (await api.view(n))["jobs"]]
        assert len(owners) == 1, owners
        owner = owners[0]
        other = rig.nodes[2 if owner.index == 1 else 1]
        [run] = await receiver.wait_for(1, path="/sweep", timeout_s=20)
        await _flow_until(api, owner, run.flow_id, "running", auth)

        # Given the owner's run live, a manual trigger taken by the other node
        triggered = await api.http.post(f"{other.base_url}/v1/tasks/{task_id}/trigger", headers=auth)
        assert triggered.status_code in (200, 201, 202), triggered.text
        manual = triggered.json()["id"]
        # Then it is skipped, naming the owner's run
        skipped = await _flow_until(api, other, manual, "skipped", auth)

        # Given the task paused and its run ended, a manual run started by the other node
        paused = await api.http.post(f"{owner.base_url}/v1/tasks/{task_id}/pause", headers=auth)
        assert paused.status_code == 200, paused.text
        report = {"status": "succeeded", "attempt": run.attempt}
        ended = await api.http.post(f"{other.base_url}/v1/flows/{run.flow_id}/report", json=report, headers=auth)
        assert ended.status_code == 200, ended.text
        await asyncio.sleep(1.5)  # the owner's watch sees the end
        again = await api.http.post(f"{other.base_url}/v1/tasks/{task_id}/trigger", headers=auth)
        assert again.status_code in (200, 201, 202), again.text
        second = again.json()["id"]
        await _flow_until(api, other, second, "running", auth)

        # When the task is resumed and fires on its owner for a while
        resumed = await api.http.post(f"{owner.base_url}/v1/tasks/{task_id}/resume", headers=auth)
        assert resumed.status_code == 200, resumed.text
        await asyncio.sleep(4.0)
        during = [r.flow_id for r in receiver.for_path("/sweep")]
        flows = await api.flows(owner, task_id)

    agents = [r.headers.get("user-agent") for r in receiver.for_path("/sweep")]
    assert skipped["last_error"] == f"skipped: flow {run.flow_id} of the task is still running", skipped
    # Then the owner's fires are skipped, naming the other node's run; nothing else was sent
    assert during == [run.flow_id, second], (during, agents)
    later = [f for f in flows if f["status"] == "skipped" and f["id"] not in (manual,)]
    assert len(later) >= 2 and all(second in f["last_error"] for f in later), flows
