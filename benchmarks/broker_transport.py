"""Publishes/s and client CPU per publish of the broker transports: bursts of concurrent attempts.

    .venv/bin/python -m benchmarks broker_transport [--protocols amqp,nats,redis_stream] [--burst 1000] [--rounds 5]

Each transport (:mod:`tjobs.delivery.amqp_transport`, :mod:`tjobs.delivery.nats_transport`,
:mod:`tjobs.delivery.redis_stream_transport`) sends ``--burst`` signed attempts at once (as a
deliverer's burst of due flows) to the test services' broker (``TJOBS_TEST_AMQP_URL``,
``TJOBS_TEST_NATS_URL``, ``TJOBS_TEST_REDIS_URL``): a durable queue, a file-stored JetStream stream, a
stream key, made for the run and removed afterwards; every attempt is delivered only on the broker's
answer (confirm, publish ack, ``XADD`` reply), as in the node. On uvloop as the node runs. After a
warm-up burst each, rounds alternate the protocols; the figures are this process's CPU time (user +
system, ``getrusage``) per publish and the publishes per second of wall time, the median over rounds,
printed as one JSON line with the load average. The request is the one ``transport_cpu`` sends
(~300-byte body, 8 headers). Nothing consumes during the run; the broker's own CPU is not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
from collections.abc import AsyncIterator
from typing import Any

import orjson

from benchmarks.grpc_transport import _measure
from benchmarks.protocol_fire import TARGET, broker_url, destination_for, made
from benchmarks.transport_cpu import callback_request
from tjobs.delivery.amqp_transport import AmqpTransport
from tjobs.delivery.broker import BrokerTransport
from tjobs.delivery.nats_transport import NatsTransport
from tjobs.delivery.redis_stream_transport import RedisStreamTransport
from tjobs.delivery.signing import generate_secret
from tjobs.delivery.transport import CallbackRequest
from tjobs.settings import CallbackSettings
from tjobs.targets.codec import credentials_from_json, settings_from_json
from tjobs.targets.model import Protocol, Target

PROTOCOLS = ("amqp", "nats", "redis_stream")
TRANSPORTS: dict[str, type[BrokerTransport[Any]]] = {
    "amqp": AmqpTransport,
    "nats": NatsTransport,
    "redis_stream": RedisStreamTransport,
}


@contextlib.asynccontextmanager
async def _destination(protocol: str, burst: int, secret: str) -> AsyncIterator[list[CallbackRequest]]:
    """The run's queue or stream, and ``burst`` requests naming a target on it."""
    destination = destination_for(protocol, broker_url(protocol, None))
    body = destination.target
    target = Target(
        "bench",
        TARGET,
        settings_from_json(Protocol(body["protocol"]), body["settings"]),
        credentials=credentials_from_json(body.get("credentials", {})),
    )
    requests = [
        dataclasses.replace(callback_request(f"target:{TARGET}", i, secret), target=target) for i in range(burst)
    ]
    async with made(protocol, broker_url(protocol, None), destination):
        yield requests


async def _run(protocols: list[str], burst: int, rounds: int) -> dict[str, Any]:
    secret = generate_secret()
    settings = CallbackSettings()
    cpu_us: dict[str, list[float]] = {protocol: [] for protocol in protocols}
    calls_per_s: dict[str, list[float]] = {protocol: [] for protocol in protocols}
    async with contextlib.AsyncExitStack() as stack:
        runs = []
        for protocol in protocols:
            requests = await stack.enter_async_context(_destination(protocol, burst, secret))
            transport = TRANSPORTS[protocol](settings)
            stack.push_async_callback(transport.close)
            runs.append((protocol, transport, requests))
        for protocol, transport, requests in runs:  # warm-up: connections, channels, caches
            await _measure(protocol, transport, requests, [], [])
        for _ in range(rounds):
            for protocol, transport, requests in runs:
                await _measure(protocol, transport, requests, cpu_us[protocol], calls_per_s[protocol])
    return {
        "burst": burst,
        "rounds": rounds,
        "cpu_us_per_publish": {name: round(statistics.median(v), 1) for name, v in cpu_us.items()},
        "cpu_us_per_publish_rounds": {name: [round(x, 1) for x in v] for name, v in cpu_us.items()},
        "publishes_per_s": {name: round(statistics.median(v)) for name, v in calls_per_s.items()},
        "loadavg": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma-separated: amqp, nats, redis_stream")
    parser.add_argument("--burst", type=int, default=1000, help="concurrent publishes per burst")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    protocols = [name.strip() for name in args.protocols.split(",") if name.strip()]
    unknown = sorted(set(protocols) - set(PROTOCOLS))
    if unknown:
        parser.error(f"--protocols: unknown {', '.join(unknown)} (known: {', '.join(PROTOCOLS)})")
    import uvloop

    print(orjson.dumps(uvloop.run(_run(protocols, args.burst, args.rounds))).decode())


if __name__ == "__main__":
    main()
