"""CPU per callback of each HTTP transport: the client process alone, against a sink in another process.

    .venv/bin/python -m benchmarks.transport_cpu [--requests 20000] [--in-flight 100] [--rounds 3]
    .venv/bin/python -m benchmarks.transport_cpu --sinks [--requests 20000] [--rounds 3]

Every transport in ``callbacks.transport`` sends the same signed POST (a ~300-byte JSON body, 8
headers as the deliverer writes them) to a keep-alive HTTP/1.1 sink on 127.0.0.1 in its own process
(:class:`testkit.sink.SinkProcess`, its lean llhttp server recording each and answering
``204``), ``--in-flight`` attempts at a time, on uvloop as the node runs. The policy hands a fixed
:class:`Route` (what the SSRF guard returns from its cache), so only the transport is measured. Rounds
alternate the transports (aiohttp, lean, aiohttp, lean, ...) after a warm-up each; the figure is this
process's CPU time (user + system, ``getrusage``) per request, the median over rounds, printed as one
JSON line with the load average. ``--sinks`` measures the other side: the sink process's CPU per
recorded callback for each of its servers (lean, aiohttp), the lean transport sending.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import ipaddress
import os
import resource
import statistics
import time
from typing import Any

import orjson

from testkit.sink import SINK_SERVERS, SinkConfig, SinkProcess
from tjobs.delivery.signing import generate_secret, signature_header
from tjobs.delivery.transport import CallbackRequest, Outcome, Route, Transport
from tjobs.delivery.wiring import build_transport
from tjobs.settings import CallbackSettings
from tjobs.targets.urls import parse_callback_url

TRANSPORTS = ("aiohttp", "lean")


# ---- the client ------------------------------------------------------------------------------------


def callback_request(url: str, index: int, secret: str) -> CallbackRequest:
    """A signed callback as the deliverer builds it: ~300-byte body, 8 headers."""
    flow_id = f"{251368273885549553 + index}-1795620475887"
    body = orjson.dumps(
        {
            "flow_id": flow_id,
            "task_id": str(171798691840 + index),
            "app_id": "bench",
            "scheduled_at_ms": 1795620475887,
            "fired_at_ms": 1795620475889,
            "attempt": 1,
            "payload": {"order": index, "customer": "c-" + hashlib.sha1(str(index).encode()).hexdigest()[:24]},
            "name": "transport-bench",
            "tags": ["nightly", "invoice", "eu-west"],
        }
    )
    timestamp_s = int(time.time())
    headers = {
        "content-type": "application/json",
        "webhook-id": flow_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature_header([secret], flow_id, timestamp_s, body),
        "tjobs-task-id": str(171798691840 + index),
        "tjobs-scheduled-at": "1795620475887",
        "tjobs-attempt": "1",
        "x-tenant": "bench",
    }
    return CallbackRequest("bench", flow_id, url, "POST", headers, body, 5000, 1)


async def _drive(transport: Transport, requests: list[CallbackRequest], in_flight: int) -> int:
    """Send every request, ``in_flight`` at a time; the number delivered."""
    delivered = 0
    position = 0

    async def worker() -> None:
        nonlocal delivered, position
        while position < len(requests):
            request = requests[position]
            position += 1
            result = await transport.send(request)
            if result.outcome is Outcome.DELIVERED:
                delivered += 1

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return delivered


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(count: int, in_flight: int, rounds: int, only: tuple[str, ...]) -> dict[str, Any]:
    async with SinkProcess(SinkConfig(server="lean")) as sink:
        port = int(sink.base_url.rsplit(":", 1)[1])
        return await _measure_against(port, count, in_flight, rounds, only)


async def _measure_against(port: int, count: int, in_flight: int, rounds: int, only: tuple[str, ...]) -> dict[str, Any]:
    url = f"http://sink.bench:{port}/cb"
    route = Route(parse_callback_url(url), (ipaddress.ip_address("127.0.0.1"),))

    async def policy(request: CallbackRequest) -> Route:
        return route

    secret = generate_secret()
    requests = [callback_request(url, i, secret) for i in range(count)]
    settings = {name: CallbackSettings(transport=name) for name in only}
    per_request_us: dict[str, list[float]] = {name: [] for name in only}
    wall_rps: dict[str, list[float]] = {name: [] for name in only}
    for _ in range(rounds):
        for name in only:
            transport = build_transport(settings[name], policy=policy)
            try:
                await _drive(transport, requests[: min(count, 2000)], in_flight)  # warm-up: connections, caches
                cpu_start, wall_start = _cpu_s(), time.perf_counter()
                delivered = await _drive(transport, requests, in_flight)
                cpu, wall = _cpu_s() - cpu_start, time.perf_counter() - wall_start
            finally:
                await transport.close()
            if delivered != count:
                raise RuntimeError(f"{name}: {delivered} of {count} delivered")
            per_request_us[name].append(cpu / count * 1e6)
            wall_rps[name].append(count / wall)
    body_bytes = len(requests[0].body or b"")
    return {
        "requests_per_round": count,
        "in_flight": in_flight,
        "rounds": rounds,
        "body_bytes": body_bytes,
        "headers": len(requests[0].headers),
        "cpu_us_per_request": {name: round(statistics.median(v), 1) for name, v in per_request_us.items()},
        "cpu_us_per_request_rounds": {name: [round(x, 1) for x in v] for name, v in per_request_us.items()},
        "requests_per_s": {name: round(statistics.median(v)) for name, v in wall_rps.items()},
        "loadavg": os.getloadavg(),
    }


async def _measure_sinks(count: int, in_flight: int, rounds: int) -> dict[str, Any]:
    """The other side: the bench sink's CPU per recorded callback for each of its HTTP servers, the lean
    transport sending; rounds alternate the servers, a fresh sink process each."""
    per_callback_us: dict[str, list[float]] = {name: [] for name in SINK_SERVERS}
    for _ in range(rounds):
        for name in SINK_SERVERS:
            async with SinkProcess(SinkConfig(server=name)) as sink:
                port = int(sink.base_url.rsplit(":", 1)[1])
                url = f"http://sink.bench:{port}/cb"
                route = Route(parse_callback_url(url), (ipaddress.ip_address("127.0.0.1"),))

                async def policy(request: CallbackRequest, route: Route = route) -> Route:
                    return route

                secret = generate_secret()
                requests = [callback_request(url, i, secret) for i in range(count)]
                transport = build_transport(CallbackSettings(transport="lean"), policy=policy)
                try:
                    await _drive(transport, requests[: min(count, 2000)], in_flight)
                    before = await sink.stats()
                    delivered = await _drive(transport, requests, in_flight)
                    after = await sink.stats()
                finally:
                    await transport.close()
            if delivered != count or after.received - before.received != count:
                raise RuntimeError(f"sink {name}: {after.received - before.received} of {count} recorded")
            per_callback_us[name].append((after.cpu_ms - before.cpu_ms) * 1000 / count)
    return {
        "requests_per_round": count,
        "in_flight": in_flight,
        "rounds": rounds,
        "sink_cpu_us_per_callback": {name: round(statistics.median(v), 1) for name, v in per_callback_us.items()},
        "sink_cpu_us_per_callback_rounds": {name: [round(x, 1) for x in v] for name, v in per_callback_us.items()},
        "loadavg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=TRANSPORTS, action="append", help="measure only this transport")
    parser.add_argument("--sinks", action="store_true", help="measure the bench sink's servers instead (sink CPU)")
    args = parser.parse_args(argv)
    import uvloop

    if args.sinks:
        print(orjson.dumps(uvloop.run(_measure_sinks(args.requests, args.in_flight, args.rounds))).decode())
        return
    only = tuple(args.only) if args.only else TRANSPORTS
    report = uvloop.run(_measure(args.requests, args.in_flight, args.rounds, only))
    print(orjson.dumps(report).decode())


if __name__ == "__main__":
    main()
