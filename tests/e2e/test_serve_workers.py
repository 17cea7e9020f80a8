"""``tjobs serve --workers 2`` on real processes, MariaDB and etcd: one deployment, two cluster members.

Given a supervisor running two workers behind one API port, when tasks are registered through that
port, then both workers are members holding job groups and each task fires once; when one worker is
killed with SIGKILL, the supervisor starts it again and no task is lost or fires twice (one flow per
task); when the supervisor gets SIGTERM, every worker hands off and exits cleanly (exit code 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aetcd
import httpx
import pytest

from testkit.databases import drop_databases
from testkit.node_process import to_toml
from testkit.ports import free_port, free_port_range
from tests.receiver import Receiver
from tjobs.cluster.etcd import _host_port
from tjobs.settings import load_settings
from tjobs.stores.migrate import migrate

pytestmark = pytest.mark.slow

WORKERS = 2
NODE_ID = "box"
ADMIN_KEY = "tja_workers_" + secrets.token_urlsafe(18)


@dataclass(frozen=True)
class Deployment:
    base_url: str
    metrics_ports: list[int]
    process: subprocess.Popen[bytes]
    log_path: Path

    def actions(self, action: str) -> list[dict[str, Any]]:
        """The supervisor's and workers' JSON log records with this ``action``, oldest first."""
        records = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("action") == action:
                    records.append(record)
        return records

    def worker_pid(self, index: int) -> int:
        pid: int = [r for r in self.actions("worker_started") if r["worker"] == index][-1]["pid"]
        return pid

    async def view(self) -> dict[str, Any]:
        """``GET /v1/cluster`` on a new connection: from whichever worker accepts it."""
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10) as admin:
            response = await admin.get(f"{self.base_url}/v1/cluster")
            assert response.status_code == 200, response.text
            view: dict[str, Any] = response.json()
            return view


@pytest.fixture
async def deployment(mysql_url: str, etcd_url: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    prefix, cluster = f"tjwork_{secrets.token_hex(3)}", f"workers-{secrets.token_hex(3)}"
    port, metrics_port = free_port(), free_port_range(WORKERS)
    settings: dict[str, Any] = {
        "node_id": NODE_ID,
        "allow_loopback_callbacks": True,
        "storage": {"urls": [mysql_url], "topology": "2x2x4", "database_prefix": prefix},
        "api": {"host": "127.0.0.1", "port": port, "admin_key": ADMIN_KEY},
        "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
        "cluster": {"etcd_endpoints": [etcd_url], "name": cluster, "lease_ttl_s": 3, "sync_interval_ms": 100},
        "scheduler": {"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3},
        "compensator": {"interval_s": 0.5, "grace_s": 2.0},
        "callbacks": {"backoff_base_ms": 200, "backoff_max_ms": 1000},
    }
    config = tmp_path / "tjobs.toml"
    config.write_text(to_toml(settings))
    log_path = tmp_path / "serve.log"
    try:
        await migrate(load_settings(config).storage)
        process = _start_supervisor(config, log_path)
        try:
            yield Deployment(
                f"http://127.0.0.1:{port}", list(range(metrics_port, metrics_port + WORKERS)), process, log_path
            )
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    finally:
        drop_databases(load_settings(config).storage)
        host, etcd_port = _host_port(etcd_url)
        async with aetcd.Client(host=host, port=etcd_port) as etcd:
            for root in ("tjobs", "tjobs-figures", "tjobs-pools"):
                await etcd.delete_prefix(f"/{root}/{cluster}/".encode())


def _start_supervisor(config: Path, log_path: Path) -> subprocess.Popen[bytes]:
    command = ["serve", "--config", str(config), "--workers", str(WORKERS), "--json-logs"]
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tjobs.cli.main", *command], stdout=log, stderr=subprocess.STDOUT
        )


async def _eventually(
    check: Callable[[], Awaitable[bool]], what: str, deployment: Deployment, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if deployment.process.poll() is not None:
            raise AssertionError(f"the supervisor exited ({deployment.process.returncode}) waiting for {what}")
        if time.monotonic() > deadline:
            tail = "\n".join(deployment.log_path.read_text(errors="replace").splitlines()[-40:])
            raise AssertionError(f"not within {timeout_s} s: {what}\n{tail}")
        await asyncio.sleep(0.2)


async def _both_workers_hold_groups(deployment: Deployment) -> bool:
    try:
        view = await deployment.view()
    except httpx.TransportError:
        return False  # not listening yet
    members = {node["id"] for node in view.get("nodes", [])}
    holders = {group["holder"] for group in view.get("groups", [])}
    primaries_hold = all(group["holder"] == group["primary"] for group in view.get("groups", []))
    return members == holders == {f"{NODE_ID}-w{i}" for i in range(WORKERS)} and primaries_hold


async def _register(client: httpx.AsyncClient, url: str, first_ms: int, count: int, span_ms: int) -> list[str]:
    bodies = [
        {
            "name": f"w-{i}",
            "schedule": {"kind": "at", "at_ms": first_ms + i * span_ms // count},
            "callback": {"url": url},
        }
        for i in range(count)
    ]
    response = await client.post("/v1/tasks/batch", json={"tasks": bodies})
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def _flows_by_task(client: httpx.AsyncClient) -> dict[str, list[dict[str, Any]]]:
    response = await client.get("/v1/flows", params={"limit": 1000})
    assert response.status_code == 200, response.text
    by_task: dict[str, list[dict[str, Any]]] = {}
    for flow in response.json()["items"]:
        by_task.setdefault(flow["task_id"], []).append(flow)
    return by_task


async def test_two_workers_share_one_port_survive_a_kill_and_stop_cleanly(deployment: Deployment) -> None:
    # Given a supervisor of two workers: both members of the cluster, each holding job groups as primary
    await _eventually(lambda: _both_workers_hold_groups(deployment), "both workers holding groups", deployment, 120)
    async with httpx.AsyncClient() as scraper:
        for port in deployment.metrics_ports:  # each worker's metrics on its own port
            assert (await scraper.get(f"http://127.0.0.1:{port}/metrics")).status_code == 200

    async with Receiver() as receiver, httpx.AsyncClient(base_url=deployment.base_url, timeout=30) as client:
        admin = {"authorization": f"Bearer {ADMIN_KEY}"}
        created = await client.post(
            "/v1/apps", json={"name": "workers", "allowed_callback_hosts": ["127.0.0.1"]}, headers=admin
        )
        assert created.status_code == 201, created.text
        client.headers["authorization"] = f"Bearer {created.json()['api_key']}"

        # When tasks are registered through the shared port, then each fires once
        before_kill = await _register(client, receiver.url("/hook"), _now_ms() + 2000, 20, 1000)
        # and when more are due over the next seconds and one worker is killed with SIGKILL meanwhile
        around_kill = await _register(client, receiver.url("/hook"), _now_ms() + 1500, 40, 5000)
        killed = deployment.worker_pid(1)
        os.kill(killed, signal.SIGKILL)

        # then the supervisor starts it again, and it rejoins and holds groups again
        async def restarted() -> bool:
            # Ready again by the supervisor's log: until the killed worker's lease ends, the cluster view
            # still shows it holding its groups, and a stop sent while the new one loads finds no handler.
            ready_again = [r for r in deployment.actions("worker_ready") if r["worker"] == 1][1:]
            return (
                deployment.worker_pid(1) != killed and bool(ready_again) and await _both_workers_hold_groups(deployment)
            )

        await _eventually(restarted, "worker 1 started again and holding groups", deployment, 120)
        assert [r["exit_code"] for r in deployment.actions("worker_exited")] == [-signal.SIGKILL]
        # and every task fired once: one flow each, delivered, its callbacks (a re-drive included) that flow's
        tasks = before_kill + around_kill

        async def all_delivered() -> bool:
            flows = await _flows_by_task(client)
            return all(flow["status"] == "delivered" for task in tasks for flow in flows.get(task, [{"status": "-"}]))

        await _eventually(all_delivered, "every task delivered", deployment, 90)
        flows = await _flows_by_task(client)
        assert sorted(flows) == sorted(tasks)
        assert [task for task in tasks if len(flows[task]) != 1] == []
        received = {(r.headers.get("tjobs-task-id"), r.flow_id) for r in receiver.requests}
        assert received == {(task, flows[task][0]["id"]) for task in tasks}

    # When the supervisor gets SIGTERM, then every worker hands off and exits cleanly, and so does it
    workers = [deployment.worker_pid(index) for index in range(WORKERS)]
    deployment.process.send_signal(signal.SIGTERM)
    assert deployment.process.wait(timeout=90) == 0, deployment.log_path.read_text()[-4000:]
    clean = [r for r in deployment.actions("worker_exited") if r["exit_code"] == 0]
    assert sorted(r["worker"] for r in clean) == list(range(WORKERS))
    assert len(deployment.actions("node_stopped")) == WORKERS  # the killed one never got to say it
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
