"""``python -m benchmarks protocol_fire --protocol amqp|nats|redis_stream|grpc``: the fire bench over a named target.

The ``fire`` bench (:func:`benchmarks.fire.run_fire_bench`: one-shot tasks registered over HTTP, due
uniformly across the window; first receipts counted; lateness = receipt time − scheduled instant; the
node's CPU) with every task naming one target of the protocol instead of calling the sink over HTTP.
The sink process reads the target's destination with the protocol's own client
(:mod:`testkit.consumers`) and records each message as it records a callback, so receipt is when
the consumer got the message:

* ``amqp`` — a durable queue on RabbitMQ, published to through the default exchange (persistent,
  ``mandatory``, delivered = the publisher confirm); the consumer auto-acknowledges;
* ``nats`` — a JetStream stream (file storage) capturing one subject (delivered = the publish ack);
  an ordered push consumer;
* ``redis_stream`` — a stream key (delivered = the ``XADD`` answer); the consumer ``XREAD``\\ s it;
* ``grpc`` — the sink itself serves ``Receiver.Fire`` (delivered = its ``OK``).

The destination is made fresh for the run and removed afterwards; the broker is ``--broker-url``
(default: the service's ``TJOBS_TEST_*_URL``, else its default port on loopback). A node started for
the run (``--storage``, fresh database prefix; ``--embedded``) gets the broker's address in
``targets.allowed_addresses``; a running node (``--url``) must already allow it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import ClientSession

from benchmarks.bench_node import bench_target, console, target_options
from benchmarks.fire import BenchError, run, run_fire_bench
from benchmarks.report import BenchResult, ProgressFn, render_table, rich_progress, to_json
from testkit.ports import free_port
from testkit.sink import SinkProcess

PROTOCOLS = ("amqp", "nats", "redis_stream", "grpc")
BROKER_URLS = {  # environment variable, default
    "amqp": ("TJOBS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
    "nats": ("TJOBS_TEST_NATS_URL", "nats://127.0.0.1:4222"),
    "redis_stream": ("TJOBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
}
DEFAULT_PORTS = {"amqp": 5672, "nats": 4222, "redis_stream": 6379}
TARGET = "bench-target"


@dataclass
class TargetDestination:
    """A :class:`benchmarks.fire.Destination`: the target's body and the sink's consumer spec."""

    target: dict[str, Any]
    consume: Mapping[str, Any]
    address: str  # host:port the node connects to
    created: list[str] = field(default_factory=list)

    async def callback(
        self, session: ClientSession, base_url: str, api_key: str, sink: SinkProcess
    ) -> Mapping[str, object]:
        headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        body = orjson.dumps({"name": TARGET, **self.target})
        async with session.post(f"{base_url}/v1/targets", data=body, headers=headers) as response:
            if response.status != 201:
                text = (await response.read())[:300].decode(errors="replace")
                raise BenchError(f"POST /v1/targets answered {response.status}: {text}")
        return {"target": TARGET}


def broker_url(protocol: str, given: str | None) -> str:
    """The broker's URL for the run ("" for gRPC, whose consumer is the sink)."""
    if protocol not in BROKER_URLS:
        return ""
    variable, default = BROKER_URLS[protocol]
    return given or os.environ.get(variable) or default


def destination_for(protocol: str, url: str) -> TargetDestination:
    """What to create and how to consume it (the broker's own objects come with :func:`made`)."""
    run_id = uuid.uuid4().hex[:10]
    if protocol == "grpc":
        address = f"127.0.0.1:{free_port()}"
        target = {"protocol": "grpc", "settings": {"address": address}}
        return TargetDestination(target, {"protocol": "grpc", "port": int(address.rsplit(":", 1)[1])}, address)
    parts = urlsplit(url)
    address = f"{parts.hostname}:{parts.port or DEFAULT_PORTS[protocol]}"
    if protocol == "amqp":
        plain = f"amqp://{address}{parts.path or '/'}"
        username, password = parts.username or "guest", parts.password or "guest"
        queue = f"tjbench-{run_id}"
        target = {
            "protocol": "amqp",
            "settings": {"url": plain, "exchange": "", "routing_key": queue},
            "credentials": {"username": username, "password": password},
        }
        consume: dict[str, Any] = {
            "protocol": "amqp",
            "url": plain,
            "queue": queue,
            "username": username,
            "password": password,
        }
        return TargetDestination(target, consume, address)
    if protocol == "nats":
        stream, subject = f"TJBENCH_{run_id.upper()}", f"tjbench.{run_id}"
        target = {"protocol": "nats", "settings": {"servers": [url], "subject": subject, "stream": stream}}
        consume = {"protocol": "nats", "servers": [url], "subject": subject, "stream": stream}
        return TargetDestination(target, consume, address)
    stream = f"tjbench:{run_id}"
    target = {"protocol": "redis_stream", "settings": {"url": url, "stream": stream}}
    return TargetDestination(target, {"protocol": "redis_stream", "url": url, "stream": stream}, address)


@contextlib.asynccontextmanager
async def made(protocol: str, url: str, destination: TargetDestination) -> AsyncIterator[None]:
    """The destination's queue or stream on the broker for the run, removed afterwards."""
    if protocol == "amqp":
        import aiormq

        connection = await aiormq.connect(url)
        queue = destination.consume["queue"]
        try:
            await (await connection.channel()).queue_declare(queue, durable=True)
            yield
            await (await connection.channel()).queue_delete(queue)
        finally:
            await connection.close()
    elif protocol == "nats":
        import nats
        from nats.js.api import StorageType, StreamConfig

        client = await nats.connect(url)
        stream, subject = destination.consume["stream"], destination.consume["subject"]
        try:
            await client.jetstream().add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE))
            yield
            await client.jetstream().delete_stream(stream)
        finally:
            await client.close()
    elif protocol == "redis_stream":
        import redis.asyncio

        redis_client = redis.asyncio.Redis.from_url(url)
        try:
            yield
            await redis_client.delete(destination.consume["stream"])
        finally:
            await redis_client.aclose()
    else:
        yield


async def bench(
    args: argparse.Namespace,
    destination: TargetDestination,
    node: tuple[str, str, tuple[int, ...]],
    progress: ProgressFn,
) -> BenchResult:
    base_url, admin_key, pids = node
    async with made(args.protocol, broker_url(args.protocol, args.broker_url), destination):
        return await run_fire_bench(
            base_url,
            admin_key,
            tasks=args.tasks,
            window_s=args.window_s,
            lead_s=args.lead_s,
            register_rate=args.register_rate,
            concurrency=args.concurrency,
            progress=progress,
            drain_timeout_s=args.drain_timeout_s,
            verify_every=args.verify_every,
            node_pids=pids,
            destination=destination,
            max_concurrency=args.max_concurrency,
        )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks protocol_fire", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--protocol", choices=PROTOCOLS, required=True)
    p.add_argument("--broker-url", help="the broker (amqp, nats, redis_stream; default: the test service's URL)")
    p.add_argument("--tasks", type=int, default=20_000, help="one-shot tasks to register")
    p.add_argument("--window-s", type=float, default=10.0, help="their instants spread over this window")
    p.add_argument("--lead-s", type=float, help="first instant this far ahead")
    p.add_argument("--register-rate", type=float, help="creates/s (default: max)")
    p.add_argument("--concurrency", type=int, default=64, help="creates in flight")
    p.add_argument("--drain-timeout-s", type=float, default=30.0)
    p.add_argument("--verify-every", type=int, default=0, help="check every n-th signature")
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=100,
        help="the bench app's deliveries in flight (default: the product's 100; a publish holds one until confirmed)",
    )
    target_options(p)
    return p


def main() -> None:
    args = parser().parse_args()
    destination = destination_for(args.protocol, broker_url(args.protocol, args.broker_url))
    settings = {"targets": {"allowed_addresses": [destination.address]}}
    with bench_target(args, settings) as node, rich_progress(console) as progress:
        result = run(bench(args, destination, node, progress))
    summary = {"protocol": args.protocol, **to_json(result)}
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    if args.json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        console.print(f"protocol: {args.protocol}")
        console.print(render_table(summary))


if __name__ == "__main__":
    main()
