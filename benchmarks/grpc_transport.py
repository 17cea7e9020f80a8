"""Calls/s and client CPU per call of the gRPC transport: bursts of concurrent ``Fire`` calls.

    .venv/bin/python -m benchmarks grpc_transport [--burst 1000] [--rounds 5] [--no-lean]

:class:`GrpcTransport` sends ``--burst`` signed attempts at once (one task each, as a deliverer's burst
of due flows) to :mod:`testkit.grpc_receiver` in its own process on 127.0.0.1 (answering OK),
on uvloop as the node runs; every attempt goes over the one pooled channel. Unless ``--no-lean``, the
lean HTTP transport sends the same bursts to the HTTP sink of :mod:`benchmarks.transport_cpu` (raw
asyncio + llhttp answering ``204``), rounds alternating, for comparison. After a warm-up burst each,
the figures are this process's CPU time (user + system, ``getrusage``, gRPC's own threads included)
per call and the calls per second of wall time, the median over rounds, printed as one JSON line with
the load average. The request is the one ``transport_cpu`` sends (~300-byte body, 8 headers).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ipaddress
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import orjson

from benchmarks.transport_cpu import callback_request
from testkit.children import checkout_env
from testkit.grpc_receiver import GrpcReceiverProcess
from tjobs.delivery.grpc_transport import GrpcTransport
from tjobs.delivery.lean_http import LeanHttpTransport
from tjobs.delivery.signing import generate_secret
from tjobs.delivery.transport import CallbackRequest, Outcome, Route, Transport
from tjobs.settings import CallbackSettings
from tjobs.targets.model import GrpcTarget, Target
from tjobs.targets.urls import parse_callback_url


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _burst(transport: Transport, requests: list[CallbackRequest]) -> int:
    """Send every request at once; the number delivered."""
    results = await asyncio.gather(*(transport.send(request) for request in requests))
    return sum(result.outcome is Outcome.DELIVERED for result in results)


async def _measure(
    name: str, transport: Transport, requests: list[CallbackRequest], cpu_us: list[float], calls_per_s: list[float]
) -> None:
    cpu_start, wall_start = _cpu_s(), time.perf_counter()
    delivered = await _burst(transport, requests)
    cpu, wall = _cpu_s() - cpu_start, time.perf_counter() - wall_start
    if delivered != len(requests):
        raise RuntimeError(f"{name}: {delivered} of {len(requests)} delivered")
    cpu_us.append(cpu / len(requests) * 1e6)
    calls_per_s.append(len(requests) / wall)


async def _run(burst: int, rounds: int, lean_port: int | None) -> dict[str, Any]:
    secret = generate_secret()
    settings = CallbackSettings()
    cpu_us: dict[str, list[float]] = {"grpc": []}
    calls_per_s: dict[str, list[float]] = {"grpc": []}
    async with GrpcReceiverProcess() as receiver:
        target = Target("bench", "bench-rpc", GrpcTarget(receiver.address))
        grpc_requests = [
            dataclasses.replace(callback_request("target:bench-rpc", i, secret), target=target) for i in range(burst)
        ]
        grpc_transport = GrpcTransport(settings)
        lean: LeanHttpTransport | None = None
        http_requests: list[CallbackRequest] = []
        if lean_port is not None:
            url = f"http://sink.bench:{lean_port}/cb"
            route = Route(parse_callback_url(url), (ipaddress.ip_address("127.0.0.1"),))

            async def policy(request: CallbackRequest) -> Route:
                return route

            lean = LeanHttpTransport(settings, policy=policy)
            http_requests = [callback_request(url, i, secret) for i in range(burst)]
            cpu_us["lean_http"], calls_per_s["lean_http"] = [], []
        try:
            await _burst(grpc_transport, grpc_requests)  # warm-up: the channel, its connection, caches
            if lean is not None:
                await _burst(lean, http_requests)
            for _ in range(rounds):
                await _measure("grpc", grpc_transport, grpc_requests, cpu_us["grpc"], calls_per_s["grpc"])
                if lean is not None:
                    await _measure("lean_http", lean, http_requests, cpu_us["lean_http"], calls_per_s["lean_http"])
            channels = grpc_transport.open_channels
        finally:
            await grpc_transport.close()
            if lean is not None:
                await lean.close()
    return {
        "burst": burst,
        "rounds": rounds,
        "body_bytes": len(grpc_requests[0].body or b""),
        "headers": len(grpc_requests[0].headers),
        "grpc_channels": channels,
        "cpu_us_per_call": {name: round(statistics.median(v), 1) for name, v in cpu_us.items()},
        "cpu_us_per_call_rounds": {name: [round(x, 1) for x in v] for name, v in cpu_us.items()},
        "calls_per_s": {name: round(statistics.median(v)) for name, v in calls_per_s.items()},
        "receiver": receiver.summary,
        "loadavg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=1000, help="concurrent Fire calls per burst")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-lean", action="store_true", help="skip the lean HTTP comparison")
    args = parser.parse_args(argv)
    import uvloop

    sink: subprocess.Popen[bytes] | None = None
    lean_port: int | None = None
    if not args.no_lean:
        sink = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.transport_cpu", "--sink"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=checkout_env(),
        )
    try:
        if sink is not None:
            assert sink.stdout is not None
            lean_port = int(sink.stdout.readline())
        report = uvloop.run(_run(args.burst, args.rounds, lean_port))
        print(orjson.dumps(report).decode())
    finally:
        if sink is not None:
            assert sink.stdin is not None
            sink.stdin.close()
            sink.wait(10)


if __name__ == "__main__":
    main()
