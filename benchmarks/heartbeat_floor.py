"""The floor of a heartbeat: what one costs the serving process, in process, with nothing else around.

    python -m benchmarks heartbeat_floor [--server lean|asgi|bare] [--rate 200] [--connections 64]
        [--duration-s 20] [--executors 1000] [--quiet-s 10]

This process serves on uvloop, on a loopback port: ``lean``, a node on the memory store (its pool
registry in process, rate limits off, as the ``pool_heartbeats`` bench's node) with uvicorn and the lean
heartbeat protocol (:mod:`tjobs.api.lean_heartbeat`); ``asgi``, the same node with every heartbeat sent
with an empty query string, so it goes through the app's ASGI stack; ``bare``, an asyncio protocol that
answers every request with the same 200 (the event loop's and the kernel's part: ``recv``, ``send``,
``epoll``, wake-ups). The heartbeats come from a client in another process (the ``pool_heartbeats``
bench's raw client: ``--rate`` a second over ``--connections`` keep-alive connections, each executor's
in turn), so none of its CPU is counted here. The serving process's CPU is the scheduler's exact run time
per thread (:func:`testkit.node_process.threads_cpu`), measured with nothing sent for ``--quiet-s``
and while the client sends; the per-heartbeat figure is the difference, with the main thread's context
switches per heartbeat (its wake-ups). A high ``--rate`` (thousands a second) shows the cost per request
when the loop serves many per wake-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from testkit.node_process import ThreadsCpu, threads_cpu

POOL = "bench"
_BODY = b'{"id":"x1","ttl_s":15}'
_ANSWER = (
    b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\ncontent-length: %d\r\ncontent-type: application/json\r\n"
    b"x-request-id: 0123456789abcdef0123456789abcdef\r\n\r\n%s" % (len(_BODY), _BODY)
)


class _Bare(asyncio.Protocol):
    """Answers each request head (no body is ever sent) with the same bytes: the floor of a server."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            self.buffer = self.buffer[end + 4 :]
            self.transport.write(_ANSWER)


def _client(argv: Sequence[str]) -> None:
    """The client process: ``URL KEY RATE DURATION CONNECTIONS EXECUTORS SUFFIX``; prints its result."""
    from benchmarks.pool_heartbeats import _heartbeats

    url, key, rate, duration, connections, executors, suffix = argv
    ids = [f"x{i}" for i in range(int(executors))]
    every_s = len(ids) / float(rate)
    beats = asyncio.run(
        _heartbeats(url, key, ids, every_s, float(duration), connections=int(connections), path_suffix=suffix)
    )
    print(json.dumps(beats))


async def _serve(args: argparse.Namespace) -> dict[str, Any]:
    from testkit import run_node
    from tjobs.pools.model import Executor
    from tjobs.settings import load_settings

    if args.server == "bare":
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Bare, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await _drive(args, f"http://127.0.0.1:{port}", "none")
        finally:
            server.close()
    settings = load_settings(None, storage={"urls": ["memory://"], "topology": "1x1x4"}, rate_limits={"enabled": False})
    async with run_node(settings) as running:
        app, key = await running.create_app("floor")
        for index in range(args.executors):
            executor = Executor(f"x{index}", f"http://127.0.0.1:9/{index}", f"z{index % 2}", ttl_s=args.ttl_s)
            await running.node.coordinator.register_executor(app.id, POOL, executor)
        lean = running.api.state.lean_heartbeats
        # one request through the app first: the ASGI stack (and the admission the lean path needs) is
        # built on the first request, as on a node that has served anything
        await _drive_one(running.base_url, key)
        served = lean.served
        result = await _drive(args, running.base_url, key)
        result["served_lean"] = lean.served - served
        return result


async def _drive_one(base_url: str, key: str) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=base_url) as client:
        reply = await client.get("/v1/pools", headers={"authorization": f"Bearer {key}"})
        reply.raise_for_status()


async def _drive(args: argparse.Namespace, base_url: str, key: str) -> dict[str, Any]:
    pid = os.getpid()
    quiet_before = threads_cpu(pid)
    quiet_started = time.monotonic()
    await asyncio.sleep(args.quiet_s)
    quiet_after = threads_cpu(pid)
    quiet_s = time.monotonic() - quiet_started
    suffix = "?" if args.server == "asgi" else ""
    command = [
        sys.executable,
        "-m",
        "benchmarks.heartbeat_floor",
        "--client",
        base_url,
        key,
        str(args.rate),
        str(args.duration_s),
        str(args.connections),
        str(args.executors),
        suffix,
    ]
    busy_before = threads_cpu(pid)
    ticks_before = os.times()
    busy_started = time.monotonic()
    child = await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE)
    out, _ = await child.communicate()
    busy_s = time.monotonic() - busy_started
    busy_after = threads_cpu(pid)
    ticks_after = os.times()
    beats = json.loads(out)
    assert quiet_before and quiet_after and busy_before and busy_after
    quiet = quiet_after.since(quiet_before)
    busy = busy_after.since(busy_before)
    count = int(beats["heartbeats"])
    ticks_s = (ticks_after.user + ticks_after.system) - (ticks_before.user + ticks_before.system)

    def beyond_quiet_us(busy_ns: float, quiet_ns: float) -> float:
        return round((busy_ns - quiet_ns / quiet_s * busy_s) / count / 1000, 1)

    main_switches = _switches(busy, "main") - _switches(quiet, "main") / quiet_s * busy_s
    return {
        "server": args.server,
        "rate_per_s": args.rate,
        "connections": args.connections,
        "heartbeats": count,
        "failures": beats["failures"],
        "latency_ms": beats["latency_ms"],
        "quiet_pct_of_core": round(100 * quiet.total_s / quiet_s, 2),
        "busy_pct_of_core": round(100 * busy.total_s / busy_s, 2),
        "per_heartbeat_us": beyond_quiet_us(busy.total_s * 1e9, quiet.total_s * 1e9),
        "main_thread_per_heartbeat_us": beyond_quiet_us(busy.run_ns.get("main", 0), quiet.run_ns.get("main", 0)),
        "main_switches_per_heartbeat": round(main_switches / count, 2),
        "per_heartbeat_us_by_ticks": round((ticks_s - quiet.total_s / quiet_s * busy_s) / count * 1e6, 1),
        "load_average": os.getloadavg(),
        "pid": os.getpid(),
    }


def _switches(cpu: ThreadsCpu, name: str) -> int:
    vol, inv = cpu.switches.get(name, (0, 0))
    return vol + inv


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--client"]:
        _client(argv[1:])
        return
    parser = argparse.ArgumentParser(description="the serving process's CPU per heartbeat, in process")
    parser.add_argument("--server", choices=("lean", "asgi", "bare"), default="lean")
    parser.add_argument("--rate", type=float, default=200.0, help="heartbeats a second")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--executors", type=int, default=1000)
    parser.add_argument("--ttl-s", type=int, default=60, help="long enough to outlast --quiet-s")
    parser.add_argument("--quiet-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    import uvloop

    print(f"serving process {os.getpid()}", file=sys.stderr)
    print(json.dumps(uvloop.run(_serve(args))))


if __name__ == "__main__":
    main()
