"""The AMQP, NATS JetStream and Redis Streams consumers of docs/targets.md run as written against the real
brokers, fed by tjobs' own transports.

Given the documented consumer (its Python block executed as is, then given a queue, stream or group of
the test's own and the app's secret) consuming from the shared broker,
when tjobs' transport fires a signed message, a retry of it (the same flow id), a forged one, one
signed ten minutes ago (a backlog) and another one,
then the consumer does the work once for each genuine flow id, refuses the forged one without stopping,
and leaves nothing unacknowledged behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiormq
import nats
import orjson
import pytest
import redis.asyncio
from redis.typing import EncodableT, FieldT

from tjobs.delivery.amqp_transport import AmqpTransport
from tjobs.delivery.broker import BrokerTransport
from tjobs.delivery.nats_transport import NatsTransport
from tjobs.delivery.redis_stream_transport import RedisStreamTransport
from tjobs.delivery.signing import generate_secret, signature_header
from tjobs.delivery.transport import CallbackRequest, Outcome
from tjobs.settings import CallbackSettings
from tjobs.targets.model import AmqpTarget, NatsTarget, RedisStreamTarget, Target

DOC = Path(__file__).resolve().parents[2] / "docs" / "targets.md"
SETTINGS = CallbackSettings(timeout_ms=3000)
SECRET = generate_secret()
SETTLE_TIMEOUT_S = 20.0
BACKLOG_AGE_S = 600  # older than Standard Webhooks' 5-minute tolerance


def documented_consumer(heading: str) -> str:
    """The Python block of the ``### {heading}`` section of docs/targets.md."""
    section = DOC.read_text().split(f"### {heading}\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def load_consumer(heading: str, monkeypatch: pytest.MonkeyPatch, **names: str) -> dict[str, Any]:
    """The example executed as a module (its ``main`` not started), then pointed at ``names``."""
    monkeypatch.setenv("TJOBS_WEBHOOK_SECRET", SECRET)
    example: dict[str, Any] = {"__name__": "targets_doc_consumer"}
    exec(compile(documented_consumer(heading), str(DOC), "exec"), example)
    for name, value in names.items():
        assert name in example, f"the {heading} consumer no longer has {name}"
        example[name] = value
    return example


def signed_request(target: Target, *, sent_at_s: int | None = None) -> CallbackRequest:
    flow_id = f"{uuid.uuid4().int % 10**9}-1800000000000"
    body = b'{"flow_id":"%s","payload":{"order":1}}' % flow_id.encode()
    timestamp_s = int(time.time()) if sent_at_s is None else sent_at_s
    headers = {
        "content-type": "application/json",
        "webhook-id": flow_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature_header([SECRET], flow_id, timestamp_s, body),
        "tjobs-task-id": "42",
        "tjobs-attempt": "1",
    }
    return CallbackRequest("app", flow_id, f"target:{target.name}", "POST", headers, body, 3000, 1, target=target)


@dataclass
class Fired:
    handled: list[CallbackRequest]  # what the consumer must do the work for, once each
    messages: int  # how many messages the broker got


async def fire_the_sequence(
    transport: BrokerTransport[Any], target: Target, repeat: Callable[[CallbackRequest], Awaitable[None]]
) -> Fired:
    """A fire, a retry of it, a forged one, one from a backlog and another fire."""
    first = signed_request(target)
    forged = replace(signed_request(target), body=b'{"payload":{"order":"forged"}}')
    backlog = signed_request(target, sent_at_s=int(time.time()) - BACKLOG_AGE_S)
    last = signed_request(target)
    assert (await transport.send(first)).outcome is Outcome.DELIVERED
    await repeat(first)
    for request in (forged, backlog, last):
        result = await transport.send(request)
        assert result.outcome is Outcome.DELIVERED, result.error
    return Fired([first, backlog, last], messages=5)


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not await condition():
        assert time.monotonic() < deadline, f"not within {SETTLE_TIMEOUT_S} s: {what}"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(example: dict[str, Any]) -> AsyncIterator[asyncio.Task[None]]:
    consumer = asyncio.create_task(example["main"]())
    try:
        yield consumer
    finally:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer


def assert_handled_once(example: dict[str, Any], fired: Fired, printed: str) -> None:
    flow_ids = [request.flow_id for request in fired.handled]
    seen = {flow_id.decode() if isinstance(flow_id, bytes) else flow_id for flow_id in example["seen"]}
    assert seen == set(flow_ids)
    work = [line.split()[1] for line in printed.splitlines() if line.startswith("fire ")]
    assert sorted(work) == sorted(flow_ids)  # the retry and the forged message did no work


# ---- AMQP (RabbitMQ) ----------------------------------------------------------------------------------


@pytest.mark.rabbitmq
async def test_the_documented_amqp_consumer_handles_each_flow_once_and_refuses_a_forged_message(
    amqp_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"tjobs-doc-{uuid.uuid4().hex[:12]}"
    example = load_consumer(
        "AMQP (RabbitMQ)", monkeypatch, AMQP_URL=amqp_url, EXCHANGE=name, ROUTING_KEY="order.close", QUEUE=name
    )
    settled: list[str] = []  # delivery tags the consumer's callback finished with (acked or rejected)
    documented_on_message = example["on_message"]

    async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
        await documented_on_message(message)
        assert isinstance(message.delivery, aiormq.spec.Basic.Deliver)
        settled.append(str(message.delivery.delivery_tag))

    example["on_message"] = on_message
    parts = urlsplit(amqp_url)
    target = Target(
        "app",
        "orders-mq",
        AmqpTarget(f"amqp://{parts.hostname}:{parts.port or 5672}{parts.path or '/'}", name, "order.close"),
        credentials={"username": parts.username or "guest", "password": parts.password or "guest"},
    )
    transport = AmqpTransport(SETTINGS)
    observer = await aiormq.connect(amqp_url)
    try:

        async def consuming() -> bool:
            channel = await observer.channel()  # a passive declare of a missing queue closes its channel
            with contextlib.suppress(aiormq.exceptions.ChannelNotFoundEntity):
                return (await channel.queue_declare(name, passive=True)).consumer_count == 1
            return False

        async with running(example) as consumer:
            await until(consuming, "the consumer declared its queue and consumes")
            fired = await fire_the_sequence(transport, target, lambda request: _sent(transport, request))

            async def all_settled() -> bool:
                return len(settled) == fired.messages

            await until(all_settled, "every message acknowledged or rejected")
            assert not consumer.done()  # the forged message did not stop it
        assert_handled_once(example, fired, capsys.readouterr().out)
        channel = await observer.channel()
        queue = await channel.queue_declare(name, passive=True)
        assert queue.message_count == 0  # nothing requeued: acknowledged, or rejected for good
        await channel.queue_delete(name)
        await channel.exchange_delete(name)
    finally:
        await transport.close()
        await observer.close()


async def _sent(transport: BrokerTransport[Any], request: CallbackRequest) -> None:
    assert (await transport.send(request)).outcome is Outcome.DELIVERED


# ---- NATS JetStream -----------------------------------------------------------------------------------


@pytest.mark.nats
async def test_the_documented_nats_consumer_handles_each_flow_once_and_refuses_a_forged_message(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = f"TJOBS_DOC_{uuid.uuid4().hex[:12].upper()}"
    subject = f"tjobs.doc.{stream.lower()}"
    example = load_consumer(
        "NATS JetStream", monkeypatch, NATS_URL=nats_url, STREAM=stream, SUBJECT=subject, DURABLE="orders-worker"
    )
    target = Target("app", "orders-nats", NatsTarget((nats_url,), subject, stream=stream))
    transport = NatsTransport(SETTINGS)
    observer = await nats.connect(nats_url)
    js = observer.jetstream()
    try:

        async def consuming() -> bool:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.consumer_info(stream, "orders-worker")
                return True
            return False

        async def retry_after_the_duplicate_window(request: CallbackRequest) -> None:
            # within the window the stream drops a repeated Nats-Msg-Id itself; after it, it keeps it again
            await js.publish(subject, request.body or b"", headers=dict(request.headers))

        async with running(example) as consumer:
            await until(consuming, "the consumer created its stream and durable consumer")
            fired = await fire_the_sequence(transport, target, retry_after_the_duplicate_window)

            async def all_settled() -> bool:
                info = await js.consumer_info(stream, "orders-worker")
                return (info.num_pending, info.num_ack_pending, info.delivered.stream_seq) == (0, 0, fired.messages)

            await until(all_settled, "every message acknowledged or terminated")
            assert not consumer.done()  # the forged message did not stop it
        assert_handled_once(example, fired, capsys.readouterr().out)
        assert (await js.consumer_info(stream, "orders-worker")).num_redelivered == 0
    finally:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(stream)
        await transport.close()
        await observer.close()


# ---- Redis Streams ------------------------------------------------------------------------------------


@pytest.mark.redis
async def test_the_documented_redis_stream_consumer_handles_each_flow_once_and_refuses_a_forged_message(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = f"tjobs-doc:{uuid.uuid4().hex[:12]}"
    example = load_consumer(
        "Redis Streams", monkeypatch, REDIS_URL=redis_url, STREAM=stream, GROUP="workers", CONSUMER="worker-1"
    )
    target = Target("app", "orders-stream", RedisStreamTarget(redis_url, stream))
    transport = RedisStreamTransport(SETTINGS)
    observer = redis.asyncio.Redis.from_url(redis_url)
    try:

        async def consuming() -> bool:
            return bool(await observer.exists(stream)) and len(await observer.xinfo_groups(stream)) == 1

        async def retry_whose_answer_was_lost(request: CallbackRequest) -> None:
            # Redis before 8.6 cannot tell: the retry is a second entry with the same flow_id
            fields: dict[FieldT, EncodableT] = {
                "flow_id": request.flow_id,
                "headers": orjson.dumps(dict(request.headers)),
                "body": request.body or b"",
            }
            await observer.xadd(stream, fields)

        async with running(example) as consumer:
            await until(consuming, "the consumer created its group")
            fired = await fire_the_sequence(transport, target, retry_whose_answer_was_lost)

            async def all_settled() -> bool:
                [group] = await observer.xinfo_groups(stream)
                last_id = (await observer.xinfo_stream(stream))["last-generated-id"]
                return (group["pending"], group["last-delivered-id"]) == (0, last_id)

            await until(all_settled, "every entry read and acknowledged")
            assert await observer.xlen(stream) == fired.messages
            assert not consumer.done()  # the forged entry did not stop it
        assert_handled_once(example, fired, capsys.readouterr().out)
    finally:
        await observer.delete(stream)
        await observer.aclose()
        await transport.close()
