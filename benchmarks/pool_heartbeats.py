"""What executor heartbeats cost a node: N executors registered in one pool, each renewing its lease
every ``--every-s`` through the node's API, and the node's CPU meanwhile.

    python -m benchmarks pool_heartbeats --storage mysql+asyncmy://root@127.0.0.1:3306 \\
        --etcd http://127.0.0.1:2379 [--executors 1000] [--every-s 5] [--duration-s 30]
    python -m benchmarks pool_heartbeats --embedded [...]

A node process is started for the run: in cluster mode on ``--etcd`` (the registry is etcd leases;
a heartbeat is one ``LeaseKeepAlive``) with its shards on ``--storage``, or ``--embedded`` (SQLite,
in-process registry). The bench measures the node's idle CPU over ``--duration-s`` (no executor
yet), registers ``--executors`` executors (addresses only: nothing listens there, no task names the
pool; the node then also re-reads them every ``cluster.pool_sync_interval_ms``), measures the node
with them registered and quiet for ``--quiet-s`` (at most half their TTL; what being registered costs:
the pool sync, anything kept per executor), registers them again (their leases renewed), then sends
each executor's heartbeat (``PUT /v1/pools/{pool}/executors/{id}/heartbeat``) every ``--every-s``,
spread evenly over the period, for ``--duration-s`` more. It reports the node's CPU as a share of one
core in each phase, the heartbeats' CPU per heartbeat (beyond idle, the earlier runs' figure, and
beyond registered-quiet), both from ``/proc/<pid>/stat``'s ticks and from the scheduler's exact run
time per thread with context switches (:func:`testkit.node_process.threads_cpu`), the heartbeat
latency percentiles as this client saw them, and any heartbeat that did not answer 200. The client
runs in this process, on the same machine: its own CPU is reported too. Registration goes through
httpx; the heartbeats through a lean asyncio client (:func:`_heartbeats`; httpx's pool collapsed under
load).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, cast

import httpx

from testkit.node_process import ThreadsCpu, node_process, process_cpu_s, threads_cpu

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


class _Connection(asyncio.Protocol):
    """One keep-alive connection of the heartbeat client: requests go out one at a time, answers are
    read by ``Content-Length`` (the node always sends one)."""

    def __init__(self, answered: Callable[[_Connection, str], None]) -> None:
        self.answered = answered
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self.answered(self, "ConnectionLost")

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.answered(self, head[9:12].decode("latin-1"))


async def _heartbeats(
    base_url: str,
    api_key: str,
    ids: Sequence[str],
    every_s: float,
    duration_s: float,
    connections: int = 64,
    path_suffix: str = "",
) -> dict[str, Any]:
    """Each id's heartbeat every ``every_s``, the ids spread evenly over the period, for ``duration_s``,
    over ``connections`` keep-alive connections (a request waits for a free one, first come first
    served). The requests are the bytes httpx sends; an asyncio protocol sends them and reads the
    answers, so the client costs tens of microseconds a heartbeat: with httpx's pool (whose request
    assignment walks every queued request) a client that fell behind on a loaded machine spent its core
    on the queue and never caught up, and leases ran out under it."""
    latencies_ms: list[float] = []
    failures: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    idle: deque[_Connection] = deque()
    queued: deque[tuple[bytes, float]] = deque()
    sent_at: dict[_Connection, float] = {}
    outstanding = 0
    settled = loop.create_future()
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    headers = (
        f"Host: {host}:{port}\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n"
        f"User-Agent: python-httpx/{httpx.__version__}\r\nAuthorization: Bearer {api_key}\r\n"
        "Content-Length: 0\r\n\r\n"
    )
    requests = [
        f"PUT /v1/pools/{POOL}/executors/{i}/heartbeat{path_suffix} HTTP/1.1\r\n{headers}".encode() for i in ids
    ]

    def send(connection: _Connection, request: bytes, queued_at: float) -> None:
        assert connection.transport is not None
        sent_at[connection] = queued_at
        connection.transport.write(request)

    def answered(connection: _Connection, status: str) -> None:
        nonlocal outstanding
        started = sent_at.pop(connection, None)
        if started is None:
            return  # a connection lost between requests
        outstanding -= 1
        latencies_ms.append((time.perf_counter() - started) * 1000)
        if status != "200":
            failures[status] = failures.get(status, 0) + 1
        if not connection.lost.done():
            if queued:
                send(connection, *queued.popleft())
            else:
                idle.append(connection)
        if outstanding == 0 and sending_done and not settled.done():
            settled.set_result(None)

    sending_done = False
    made = [await loop.create_connection(lambda: _Connection(answered), host, int(port)) for _ in range(connections)]
    idle.extend(protocol for _, protocol in made)
    started = loop.time()
    gap_s = every_s / len(ids)
    sent_count = 0
    while True:
        due = started + sent_count * gap_s
        if due - started >= duration_s:
            break
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        outstanding += 1
        request = requests[sent_count % len(ids)]
        if idle:
            send(idle.popleft(), request, time.perf_counter())
        else:
            queued.append((request, time.perf_counter()))
        sent_count += 1
    sending_done = True
    if outstanding:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(settled, 30)
    for transport, _ in made:
        transport.close()
    if outstanding:
        failures["unanswered"] = outstanding
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


def _mark(what: str) -> None:
    """A phase's start on stderr (a profiler attached by hand waits for ``heartbeats``)."""
    print(f"[pool_heartbeats {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


class _Phase:
    """The node's CPU over one phase of the run: ``/proc/<pid>/stat``'s ticks (the figure the earlier runs
    gave) and the scheduler's exact run time per thread (:func:`threads_cpu`), with context switches."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ticks_s = process_cpu_s(pid) or 0.0
        self.exact = threads_cpu(pid)
        self.started = time.monotonic()

    def end(self) -> dict[str, Any]:
        ticks_s = (process_cpu_s(self.pid) or 0.0) - self.ticks_s
        exact = threads_cpu(self.pid)
        wall_s = time.monotonic() - self.started
        phase: dict[str, Any] = {"wall_s": wall_s, "ticks_s": ticks_s, "exact_s": None}
        if exact is not None and self.exact is not None:
            used = exact.since(self.exact)
            phase["exact_s"] = used.total_s
            phase["threads"] = used
        return phase


def _share(phase: dict[str, Any], key: str) -> float | None:
    return None if phase[key] is None else phase[key] / phase["wall_s"]


def _per_beat_us(busy: dict[str, Any], base: dict[str, Any], key: str, beats: int) -> float | None:
    busy_share, base_share = _share(busy, key), _share(base, key)
    if busy_share is None or base_share is None or not beats:
        return None
    return round((busy_share - base_share) * float(busy["wall_s"]) / beats * 1e6, 1)


def _threads_per_beat(busy: dict[str, Any], base: dict[str, Any], beats: int) -> dict[str, Any]:
    """Each node thread's CPU per heartbeat beyond the registered-quiet phase, and its context switches."""
    if "threads" not in busy or "threads" not in base or not beats:
        return {}
    now: ThreadsCpu = busy["threads"]
    quiet: ThreadsCpu = base["threads"]
    found: dict[str, Any] = {}
    for name, ns in sorted(now.run_ns.items(), key=lambda item: -item[1]):
        quiet_rate = quiet.run_ns.get(name, 0) / base["wall_s"]
        us = (ns - quiet_rate * busy["wall_s"]) / beats / 1000
        vol, inv = now.switches.get(name, (0, 0))
        quiet_vol, quiet_inv = quiet.switches.get(name, (0, 0))
        scale = busy["wall_s"] / base["wall_s"]
        found[name] = {
            "us_per_heartbeat": round(us, 1),
            "pct_of_core": round(100 * ns / 1e9 / busy["wall_s"], 2),
            "switches_per_heartbeat": round((vol + inv - (quiet_vol + quiet_inv) * scale) / beats, 2),
        }
    return found


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
        _mark(f"node {pid}: idle")
        idle = _Phase(pid)
        await asyncio.sleep(args.duration_s)
        idle_phase = idle.end()
        ids = await _register(client, args.executors, args.ttl_s)
        # registered, nobody heartbeating: what the executors cost a node by being there (the pool sync,
        # anything per executor), for less than half their TTL; then every lease is renewed by
        # registering again (idempotent), so the heartbeats find them all
        await asyncio.sleep(1.0)
        _mark(f"node {pid}: registered, quiet")
        quiet = _Phase(pid)
        await asyncio.sleep(args.quiet_s if args.quiet_s is not None else min(args.duration_s, args.ttl_s / 2))
        quiet_phase = quiet.end()
        await _register(client, args.executors, args.ttl_s)
        client_cpu = time.process_time()
        _mark(f"node {pid}: heartbeats")
        busy = _Phase(pid)
        beats = await _heartbeats(base_url, api_key, ids, args.every_s, args.duration_s)
        busy_phase = busy.end()
        _mark(f"node {pid}: done")
        client_cpu = time.process_time() - client_cpu
        listed = (await client.get(f"/v1/pools/{POOL}")).json()
    count = beats["heartbeats"]
    busy_s = busy_phase["wall_s"]

    def pct(phase: dict[str, Any], key: str) -> float | None:
        share = _share(phase, key)
        return None if share is None else round(100 * share, 2)

    return {
        "executors": args.executors,
        "every_s": args.every_s,
        "heartbeats_per_s": round(count / busy_s, 1),
        # the figures of the earlier runs: /proc/<pid>/stat ticks, beyond the idle node (no executor)
        "node_cpu_idle_pct_of_core": pct(idle_phase, "ticks_s"),
        "node_cpu_heartbeats_pct_of_core": pct(busy_phase, "ticks_s"),
        "node_cpu_per_heartbeat_us": _per_beat_us(busy_phase, idle_phase, "ticks_s", count),
        # the scheduler's exact run time; beyond the idle node, and beyond the node with the executors
        # registered but quiet
        "exact": {
            "idle_pct_of_core": pct(idle_phase, "exact_s"),
            "registered_quiet_pct_of_core": pct(quiet_phase, "exact_s"),
            "quiet_s": round(quiet_phase["wall_s"], 1),
            "heartbeats_pct_of_core": pct(busy_phase, "exact_s"),
            "per_heartbeat_beyond_idle_us": _per_beat_us(busy_phase, idle_phase, "exact_s", count),
            "per_heartbeat_beyond_registered_us": _per_beat_us(busy_phase, quiet_phase, "exact_s", count),
            "threads": _threads_per_beat(busy_phase, quiet_phase, count),
        },
        "client_cpu_pct_of_core": round(100 * client_cpu / busy_s, 2),
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
    parser.add_argument(
        "--quiet-s", type=float, help="the registered-but-quiet phase (default: --duration-s, at most half the TTL)"
    )
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
            from testkit.databases import drop_databases
            from tjobs.settings import StorageSettings

            drop_databases(StorageSettings(urls=storage, database_prefix=settings["storage"]["database_prefix"]))
    result["mode"] = "embedded" if args.embedded else "cluster (etcd)"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
