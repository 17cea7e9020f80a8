"""What executor heartbeats cost a node: N executors registered in one pool, each renewing its lease
every ``--every-s`` through the node's API, and the node's CPU meanwhile.

    python -m benchmarks pool_heartbeats --storage mysql+asyncmy://root@127.0.0.1:3306 \\
        --etcd http://127.0.0.1:2379 [--executors 1000] [--every-s 5] [--duration-s 30]
    python -m benchmarks pool_heartbeats --embedded [...]

A node process is started for the run: in cluster mode on ``--etcd`` (the registry is etcd leases;
a heartbeat is one ``LeaseKeepAlive``) with its shards on ``--storage``, or ``--embedded`` (SQLite,
in-process registry). The bench measures the node's idle CPU over ``--duration-s`` (no executor
yet), registers ``--executors`` executors (addresses only: nothing listens there, no task names the
pool; the node then also re-reads them every ``cluster.pool_sync_interval_ms``), then sends each
executor's heartbeat (``PUT /v1/pools/{pool}/executors/{id}/heartbeat``) every ``--every-s``, spread
evenly over the period, for ``--duration-s`` more, and reports the node's CPU (``/proc/<pid>/stat``)
as a share of one core in both phases, the difference per heartbeat, the heartbeat latency
percentiles as this client saw them, and any heartbeat that did not answer 200. The client runs in
this process, on the same machine: its own CPU is reported too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import time
from collections.abc import Sequence
from typing import Any

import httpx

from tjobs.testing.node_process import node_process, process_cpu_s

POOL = "bench"


async def _register(client: httpx.AsyncClient, count: int, ttl_s: int) -> list[str]:
    slots = asyncio.Semaphore(32)

    async def one(index: int) -> str:
        body = {"id": f"x{index}", "address": f"http://127.0.0.1:9/{index}", "zone": f"z{index % 2}", "ttl_s": ttl_s}
        async with slots:
            reply = await client.post(f"/v1/pools/{POOL}/executors", json=body)
        reply.raise_for_status()
        return str(reply.json()["id"])

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def _heartbeats(
    client: httpx.AsyncClient, ids: Sequence[str], every_s: float, duration_s: float
) -> dict[str, Any]:
    """Each id's heartbeat every ``every_s``, the ids spread evenly over the period, for ``duration_s``."""
    latencies_ms: list[float] = []
    failures: dict[str, int] = {}
    tasks: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()
    started = loop.time()
    gap_s = every_s / len(ids)

    async def beat(executor_id: str) -> None:
        sent = time.perf_counter()
        try:
            reply = await client.put(f"/v1/pools/{POOL}/executors/{executor_id}/heartbeat")
            status = str(reply.status_code)
        except httpx.HTTPError as error:
            status = type(error).__name__
        latencies_ms.append((time.perf_counter() - sent) * 1000)
        if status != "200":
            failures[status] = failures.get(status, 0) + 1

    sent_count = 0
    while True:
        due = started + sent_count * gap_s
        if due - started >= duration_s:
            break
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(beat(ids[sent_count % len(ids)]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent_count += 1
    await asyncio.gather(*tasks)
    latencies_ms.sort()
    return {
        "heartbeats": sent_count,
        "failures": failures,
        "latency_ms": {
            "p50": round(statistics.median(latencies_ms), 2),
            "p99": round(latencies_ms[int(len(latencies_ms) * 0.99) - 1], 2),
            "max": round(latencies_ms[-1], 2),
        },
    }


async def _measure(base_url: str, admin_key: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as admin:
        reply = await admin.post(
            "/v1/apps", json={"name": "pool-bench"}, headers={"authorization": f"Bearer {admin_key}"}
        )
        reply.raise_for_status()
        api_key = reply.json()["api_key"]
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    headers = {"authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0, headers=headers, limits=limits) as client:
        idle_cpu = process_cpu_s(pid) or 0.0
        idle_started = time.monotonic()
        await asyncio.sleep(args.duration_s)
        idle_cpu = (process_cpu_s(pid) or 0.0) - idle_cpu
        idle_s = time.monotonic() - idle_started
        ids = await _register(client, args.executors, args.ttl_s)
        node_cpu = process_cpu_s(pid) or 0.0
        client_cpu = time.process_time()
        beat_started = time.monotonic()
        beats = await _heartbeats(client, ids, args.every_s, args.duration_s)
        beat_s = time.monotonic() - beat_started
        node_cpu = (process_cpu_s(pid) or 0.0) - node_cpu
        client_cpu = time.process_time() - client_cpu
        listed = (await client.get(f"/v1/pools/{POOL}")).json()
    idle_share = idle_cpu / idle_s
    beat_share = node_cpu / beat_s
    return {
        "executors": args.executors,
        "every_s": args.every_s,
        "heartbeats_per_s": round(beats["heartbeats"] / beat_s, 1),
        "node_cpu_idle_pct_of_core": round(100 * idle_share, 2),
        "node_cpu_heartbeats_pct_of_core": round(100 * beat_share, 2),
        "node_cpu_per_heartbeat_us": round((node_cpu - idle_share * beat_s) / beats["heartbeats"] * 1e6, 1),
        "client_cpu_pct_of_core": round(100 * client_cpu / beat_s, 2),
        "live_executors_after": len(listed.get("executors", [])),
        "load_average": os.getloadavg(),
        **beats,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="node CPU of executor heartbeats")
    parser.add_argument("--embedded", action="store_true", help="an embedded node (SQLite, in-process registry)")
    parser.add_argument("--storage", action="append", help="MariaDB/MySQL URL(s) of a cluster-mode node")
    parser.add_argument("--etcd", help="etcd endpoint of a cluster-mode node (with --storage)")
    parser.add_argument("--executors", type=int, default=1000)
    parser.add_argument("--every-s", type=float, default=5.0)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--ttl-s", type=int, default=15)
    args = parser.parse_args(argv)
    settings: dict[str, Any] = {"rate_limits": {"enabled": False}}
    storage = None
    if not args.embedded:
        if not (args.storage and args.etcd):
            raise SystemExit("give --embedded, or --storage and --etcd for a cluster-mode node")
        storage = args.storage
        prefix = f"tjbench_{secrets.token_hex(3)}"
        settings["storage"] = {"database_prefix": prefix}
        settings["cluster"] = {"etcd_endpoints": [args.etcd], "name": f"bench-{secrets.token_hex(3)}"}
    try:
        with node_process(storage_urls=storage, topology="1x2x4", settings=settings) as node:
            result = asyncio.run(_measure(node.base_url, node.admin_key, node.pid, args))
    finally:
        if storage:
            from tjobs.settings import StorageSettings
            from tjobs.testing.databases import drop_databases

            drop_databases(StorageSettings(urls=storage, database_prefix=settings["storage"]["database_prefix"]))
    result["mode"] = "embedded" if args.embedded else "cluster (etcd)"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
