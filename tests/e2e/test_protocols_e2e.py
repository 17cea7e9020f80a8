"""Every protocol end to end: a real node process fires one-shot tasks naming a target, a real consumer reads them.

Given ``tjobs serve`` (SQLite) with the broker or gRPC address allowed, an app and a target of each
protocol (AMQP on RabbitMQ, NATS JetStream, Redis Streams, gRPC, HTTP),
when N one-shot tasks naming the target fall due within a few seconds,
then the protocol's own client (aiormq, nats-py, redis, a grpc.aio server, an aiohttp server) receives
N distinct flow ids, 0 lost, each message with the tjobs headers and a Standard Webhooks signature that
verifies with the app's secret, and every flow reads ``delivered`` through the API.

And when the broker (a RabbitMQ, NATS or Redis instance of the test's own, or a gRPC receiver process)
is killed with SIGKILL mid-run and started again on the same port: 0 lost, every flow eventually
``delivered``, duplicates only as repeats of a flow id already received (another attempt of it),
counted and printed.

The default run fires 1,000 per protocol; the ``chaos`` runs (``make chaos``) fire the issue's 10,000.
Run with ``-s`` to see the counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiormq
import nats
import pytest
import redis.asyncio
from nats.js.api import StorageType, StreamConfig

from testkit.consumers import AmqpConsumer, Consumed, Consumer, GrpcConsumer, NatsConsumer, RedisStreamConsumer
from testkit.grpc_receiver import GrpcReceiverProcess
from testkit.ports import free_port
from tests.brokers import OwnBroker, OwnNats, OwnRabbitMQ, OwnRedis
from tests.e2e.protocol_rig import (
    AppClient,
    Tally,
    attempts_histogram,
    flow_statuses,
    judge,
    protocol_node,
    tally,
    wait_for_flows,
)
from tests.receiver import Receiver

pytestmark = pytest.mark.slow

TARGET = "destination"
SIZES = [
    pytest.param(1_000, id="1k"),
    pytest.param(10_000, id="10k", marks=[pytest.mark.chaos, pytest.mark.timeout(1200)]),
]


def window_ms(fires: int) -> int:
    return 5_000 if fires <= 2_000 else 10_000


def lead_ms(fires: int) -> int:
    """Time to register ``fires`` tasks by batch on SQLite, with room for a loaded machine."""
    return 3_000 + fires


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def report(title: str, fires: int, counts: Tally, settled: dict[str, dict[str, Any]], **more: Any) -> None:
    extra = "".join(f", {key} {value}" for key, value in more.items())
    print(
        f"\n[{title}] fires {fires}: messages {counts.messages}, distinct flow ids {counts.flows}, "
        f"lost {counts.lost}, duplicates {counts.duplicates} (flows {counts.flows_duplicated}), "
        f"messages of attempt > 1 {counts.retried_messages}, flows {dict(flow_statuses(settled))}, "
        f"attempts per flow {attempts_histogram(settled)}{extra}"
    )


# ---- destinations on the shared brokers --------------------------------------------------------------


@dataclass
class Destination:
    """A target body (without its name), the address the node must allow, and the consumer reading it."""

    target: dict[str, Any]
    allowed: list[str]
    start_consumer: Callable[[], Awaitable[Inbox]]
    stop_consumer: Callable[[], Awaitable[None]]


Inbox = Callable[[], list[Consumed]]
"""What the consumer got so far."""


def _inbox_of(consumer: Consumer) -> tuple[Callable[[], Awaitable[Inbox]], Callable[[], Awaitable[None]]]:
    inbox: list[Consumed] = []

    async def start() -> Inbox:
        await consumer.start(inbox.append)
        return lambda: inbox

    return start, consumer.stop


def _host_port(url: str, default_port: int) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or default_port}"


@contextlib.asynccontextmanager
async def amqp_destination(amqp_url: str, durable: bool = False) -> AsyncIterator[Destination]:
    parts = urlsplit(amqp_url)
    username, password = parts.username or "guest", parts.password or "guest"
    url = f"amqp://{parts.hostname}:{parts.port or 5672}{parts.path or '/'}"
    queue = f"tjobs-e2e-{uuid.uuid4().hex[:12]}"
    connection = await aiormq.connect(amqp_url)
    try:
        channel = await connection.channel()
        arguments: dict[str, Any] = {} if durable else {"x-expires": 600_000}
        await channel.queue_declare(queue, durable=durable, arguments=arguments)
        consumer = AmqpConsumer(url, queue, username=username, password=password)
        start, stop = _inbox_of(consumer)
        target = {
            "protocol": "amqp",
            "settings": {"url": url, "exchange": "", "routing_key": queue},
            "credentials": {"username": username, "password": password},
        }
        yield Destination(target, [_host_port(url, 5672)], start, stop)
        await stop()
        with contextlib.suppress(Exception):
            await channel.queue_delete(queue)
    finally:
        with contextlib.suppress(Exception):
            await connection.close()


@contextlib.asynccontextmanager
async def nats_destination(nats_url: str) -> AsyncIterator[Destination]:
    stream = f"TJOBS_E2E_{uuid.uuid4().hex[:12].upper()}"
    subject = f"tjobs.e2e.{stream.lower()}"
    client = await nats.connect(nats_url)
    try:
        await client.jetstream().add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE))
        start, stop = _inbox_of(NatsConsumer([nats_url], subject, stream))
        target = {"protocol": "nats", "settings": {"servers": [nats_url], "subject": subject, "stream": stream}}
        yield Destination(target, [_host_port(nats_url, 4222)], start, stop)
        await stop()
        with contextlib.suppress(Exception):
            await client.jetstream().delete_stream(stream)
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def redis_stream_destination(redis_url: str) -> AsyncIterator[Destination]:
    stream = f"tjobs-e2e:{uuid.uuid4().hex[:12]}"
    start, stop = _inbox_of(RedisStreamConsumer(redis_url, stream))
    target = {"protocol": "redis_stream", "settings": {"url": redis_url, "stream": stream}}
    try:
        yield Destination(target, [_host_port(redis_url, 6379)], start, stop)
        await stop()
    finally:
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.delete(stream)
        await client.aclose()


@contextlib.asynccontextmanager
async def grpc_destination() -> AsyncIterator[Destination]:
    consumer = GrpcConsumer(free_port())
    start, stop = _inbox_of(consumer)
    target = {"protocol": "grpc", "settings": {"address": consumer.address, "deadline_ms": 2000}}
    try:
        yield Destination(target, [consumer.address], start, stop)
    finally:
        await stop()


@contextlib.asynccontextmanager
async def http_destination() -> AsyncIterator[Destination]:
    async with Receiver() as receiver:

        async def start() -> Inbox:
            def messages() -> list[Consumed]:
                return [Consumed(r.received_at_ns // 1000, r.flow_id, r.headers, r.body) for r in receiver.requests]

            return messages

        async def stop() -> None:
            return None

        target = {"protocol": "http", "settings": {"url": receiver.url("/due")}}
        yield Destination(target, [], start, stop)


PROTOCOLS = [
    pytest.param("amqp", marks=pytest.mark.rabbitmq),
    pytest.param("nats", marks=pytest.mark.nats),
    pytest.param("redis_stream", marks=pytest.mark.redis),
    "grpc",
    "http",
]


def destination_for(
    protocol: str, request: pytest.FixtureRequest
) -> contextlib.AbstractAsyncContextManager[Destination]:
    if protocol == "amqp":
        return amqp_destination(request.getfixturevalue("amqp_url"))
    if protocol == "nats":
        return nats_destination(request.getfixturevalue("nats_url"))
    if protocol == "redis_stream":
        return redis_stream_destination(request.getfixturevalue("redis_url"))
    if protocol == "grpc":
        return grpc_destination()
    return http_destination()


@pytest.mark.parametrize("fires", SIZES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_every_fire_reaches_a_real_consumer_once_with_headers_and_a_valid_signature(
    protocol: str, fires: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with destination_for(protocol, request) as destination:
        with protocol_node(tmp_path / "node", destination.allowed) as node:
            async with AppClient.create(node) as app:
                await app.create_target({"name": TARGET, **destination.target})
                inbox = await destination.start_consumer()
                registered = await app.register(TARGET, fires, now_ms() + lead_ms(fires), window_ms(fires))
                await wait_for_flows(inbox, fires, timeout_s=(lead_ms(fires) + window_ms(fires)) / 1000 + 120)
                settled = await app.await_settled(registered, timeout_s=120)
                await asyncio.sleep(0.5)  # a late duplicate would arrive now
                counts = judge(registered, inbox(), app.secret)
    report(protocol, fires, counts, settled, reads_resent=app.reads_resent)
    assert counts.problems == []
    assert (counts.flows, counts.lost) == (fires, 0)
    assert flow_statuses(settled) == {"delivered": fires}
    assert {flow["id"] for flow in settled.values()} == {f"{task}-{at}" for task, at in registered.items()}
    assert counts.retried_messages is not None
    assert counts.duplicates <= counts.retried_messages  # a repeat is only ever another attempt


# ---- a broker of the test's own, killed and restarted mid-run ---------------------------------------

KILLED_FOR_S = 1.0
RETRY = {"max_attempts": 50, "max_age_s": 600, "backoff_base_ms": 200, "backoff_max_ms": 2000}


@dataclass
class OwnDestination:
    """A destination on a broker of the test's own: kill it, start it again, then read it all."""

    target: dict[str, Any]
    allowed: list[str]
    kill: Callable[[], Awaitable[None]]
    restart: Callable[[], Awaitable[None]]
    read_all: Callable[[dict[str, int], str], Awaitable[Tally]]  # registered, app secret → the tally
    cleanup: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


async def _read_with(consumer: Consumer, registered: dict[str, int], secret: str) -> Tally:
    inbox: list[Consumed] = []
    await consumer.start(inbox.append)
    try:
        await wait_for_flows(lambda: inbox, len(registered), timeout_s=60)
        await asyncio.sleep(1.0)  # the rest: duplicates come after their flow's first message
    finally:
        await consumer.stop()
    return judge(registered, inbox, secret)


async def _assert_queue_exists(url: str, queue: str) -> None:
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        await channel.queue_declare(queue, passive=True)  # raises NOT_FOUND if the queue is missing
    finally:
        await connection.close()


def _killer(broker: OwnBroker) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    async def kill() -> None:
        broker.kill()

    async def restart() -> None:
        await asyncio.to_thread(broker.start)

    return kill, restart


@contextlib.asynccontextmanager
async def own_destination(protocol: str) -> AsyncIterator[OwnDestination]:
    if protocol == "grpc":
        receiver = GrpcReceiverProcess(port=free_port(), print_answered=True)
        await receiver.start()

        async def restart_receiver() -> None:
            await receiver.start()  # the same port again

        async def read_answered(registered: dict[str, int], secret: str) -> Tally:
            await wait_for_flows_answered(receiver, len(registered))
            return tally(registered, list(receiver.answered), None, [])

        target = {"protocol": "grpc", "settings": {"address": receiver.address, "deadline_ms": 2000}}
        try:
            yield OwnDestination(target, [receiver.address], receiver.kill, restart_receiver, read_answered)
        finally:
            await receiver.stop()
        return
    broker: OwnBroker = {"amqp": OwnRabbitMQ, "nats": OwnNats, "redis_stream": OwnRedis}[protocol]()
    await asyncio.to_thread(broker.start)
    try:
        kill, restart = _killer(broker)
        address = f"127.0.0.1:{broker.port}"
        if protocol == "amqp":
            async with amqp_destination(f"amqp://guest:guest@{address}/", durable=True) as destination:
                queue = destination.target["settings"]["routing_key"]
                # RabbitMQ 3.10 answers declare-ok before the durable queue is on disk: a kill -9 seconds
                # later can lose it (and with it what was confirmed into it). A clean restart writes it.
                await asyncio.to_thread(broker.restart_cleanly)
                await _assert_queue_exists(broker.url, queue)

                async def read_queue(registered: dict[str, int], secret: str) -> Tally:
                    return await _read_with(AmqpConsumer(broker.url, queue), registered, secret)

                yield OwnDestination(destination.target, [address], kill, restart, read_queue)
        elif protocol == "nats":
            async with nats_destination(broker.url) as destination:
                settings = destination.target["settings"]

                async def read_stream(registered: dict[str, int], secret: str) -> Tally:
                    consumer = NatsConsumer([broker.url], settings["subject"], settings["stream"])
                    return await _read_with(consumer, registered, secret)

                yield OwnDestination(destination.target, [address], kill, restart, read_stream)
        else:
            target = {"protocol": "redis_stream", "settings": {"url": broker.url, "stream": "durable"}}

            async def read_redis(registered: dict[str, int], secret: str) -> Tally:
                return await _read_with(RedisStreamConsumer(broker.url, "durable"), registered, secret)

            yield OwnDestination(target, [address], kill, restart, read_redis)
    finally:
        await asyncio.to_thread(broker.stop)


async def wait_for_flows_answered(receiver: GrpcReceiverProcess, count: int) -> None:
    deadline = time.monotonic() + 60
    while len(set(receiver.answered)) < count and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)


RESTARTABLE = [
    pytest.param("amqp", marks=pytest.mark.rabbitmq),
    pytest.param("nats", marks=pytest.mark.nats),
    pytest.param("redis_stream", marks=pytest.mark.redis),
    "grpc",
]


@pytest.mark.parametrize("fires", SIZES)
@pytest.mark.parametrize("protocol", RESTARTABLE)
async def test_a_broker_killed_and_restarted_mid_run_loses_nothing_and_repeats_only_flow_ids(
    protocol: str, fires: int, tmp_path: Path
) -> None:
    async with own_destination(protocol) as destination:
        with protocol_node(tmp_path / "node", destination.allowed) as node:
            async with AppClient.create(node) as app:
                await app.create_target({"name": TARGET, **destination.target, "retry": RETRY})
                start_ms = now_ms() + lead_ms(fires)
                registered = await app.register(TARGET, fires, start_ms, window_ms(fires))
                kill_at_ms = start_ms + window_ms(fires) * 2 // 5
                await asyncio.sleep(max(0.0, (kill_at_ms - now_ms()) / 1000))
                await destination.kill()
                killed_ms = now_ms()
                await asyncio.sleep(KILLED_FOR_S)
                await destination.restart()
                back_after_s = (now_ms() - killed_ms) / 1000
                settled = await app.await_settled(registered, timeout_s=180)
                counts = await destination.read_all(registered, app.secret)
    due_before_kill = sum(1 for at in registered.values() if at < killed_ms)
    retried_flows = sum(1 for flow in settled.values() if flow["attempts"] > 1)
    report(
        f"{protocol} killed and restarted",
        fires,
        counts,
        settled,
        due_before_kill=due_before_kill,
        retried_flows=retried_flows,
        down_s=round(back_after_s, 1),
        reads_resent=app.reads_resent,
    )
    assert 0 < due_before_kill < fires
    assert retried_flows > 0, "no attempt failed: the kill missed the run"
    assert counts.problems == []
    assert (counts.flows, counts.lost) == (fires, 0)
    assert flow_statuses(settled) == {"delivered": fires}
    if counts.retried_messages is not None:
        assert counts.duplicates <= counts.retried_messages  # a repeat is only ever another attempt
