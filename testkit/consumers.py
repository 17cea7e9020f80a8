"""Real consumers of what tjobs delivers to named targets, one per protocol, for end-to-end tests and benches.

Each reads its destination as a team's service would, with the protocol's ordinary client, and hands
every message to a callback as a :class:`Consumed`: when it arrived (epoch µs), its idempotency key as
the protocol carries it, the tjobs headers (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``, ``tjobs-task-id``, ``tjobs-scheduled-at``, ``tjobs-attempt``, ...) and the body
(the bytes the Standard Webhooks signature covers):

=================================  ============================================  ==========================
consumer                           reads                                         ``message_id``
=================================  ============================================  ==========================
:class:`AmqpConsumer`              a queue, ``basic.consume`` (aiormq)           the AMQP ``message_id``
:class:`NatsConsumer`              a JetStream stream, an ordered push consumer  the ``Nats-Msg-Id`` header
:class:`RedisStreamConsumer`       a stream, ``XREAD`` from its first entry      the entry's ``flow_id``
:class:`GrpcConsumer`              ``Receiver.Fire`` calls it serves             ``FireRequest.flow_id``
=================================  ============================================  ==========================

Broker headers that are not tjobs' (``Nats-Msg-Id``, ``Nats-Expected-Stream``) are left out of
``headers``. A consumer records and never refuses: AMQP deliveries are auto-acknowledged, the NATS
consumer acknowledges nothing (``AckPolicy.NONE``), the gRPC one answers ``OK`` (or
``UNAUTHENTICATED`` to a call without its ``authorization``). None of them reconnects after its
broker went away: a test that kills a broker reads with a fresh consumer once it is back.

:func:`consumer_from_spec` builds one from a JSON object (``{"protocol": "amqp", ...}``), which is how
the bench's sink process (:mod:`testkit.sink`) is told what to consume.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tjobs.cancellation import cancel_until_done

OnMessage = Callable[["Consumed"], None]
BROKER_HEADERS = frozenset({"Nats-Msg-Id", "Nats-Expected-Stream"})


@dataclass(frozen=True, slots=True)
class Consumed:
    """One message as a consumer got it."""

    received_us: int  # wall clock, epoch µs
    message_id: str
    headers: dict[str, str]
    body: bytes


def _now_us() -> int:
    return time.time_ns() // 1000


class Consumer(ABC):
    """Reads one destination until stopped, handing each message to ``on_message`` (see the module
    docstring)."""

    @abstractmethod
    async def start(self, on_message: OnMessage) -> None:
        """Connect and start consuming; returns once messages flow to ``on_message``."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop consuming and close the connection (or stop serving)."""

    @property
    def address(self) -> str:
        """Where a target must point for this consumer to get its messages (``host:port``), when the
        consumer serves (gRPC); otherwise an empty string."""
        return ""


class AmqpConsumer(Consumer):
    """``basic.consume`` of ``queue`` on ``url`` (``amqp://host:port/vhost``, no user info)."""

    def __init__(self, url: str, queue: str, *, username: str = "guest", password: str = "guest", prefetch: int = 2000):
        self.url = url
        self.queue = queue
        self._username = username
        self._password = password
        self._prefetch = prefetch
        self._connection: Any = None

    async def start(self, on_message: OnMessage) -> None:
        import aiormq
        from yarl import URL

        self._connection = await aiormq.connect(URL(self.url).with_user(self._username).with_password(self._password))
        channel = await self._connection.channel()
        await channel.basic_qos(prefetch_count=self._prefetch)

        async def deliver(message: aiormq.abc.DeliveredMessage) -> None:
            received_us = _now_us()
            properties = message.header.properties
            headers = {
                str(name): value.decode() if isinstance(value, bytes) else str(value)
                for name, value in (properties.headers or {}).items()
            }
            on_message(Consumed(received_us, str(properties.message_id or ""), headers, message.body))

        await channel.basic_consume(self.queue, deliver, no_ack=True)

    async def stop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # a broker already gone
                await connection.close()


class NatsConsumer(Consumer):
    """An ordered push consumer of ``subject`` on the JetStream ``stream``, from its first message."""

    def __init__(
        self, servers: Sequence[str], subject: str, stream: str, *, credentials: Mapping[str, str] | None = None
    ):
        self.servers = list(servers)
        self.subject = subject
        self.stream = stream
        self._credentials = dict(credentials or {})
        self._client: Any = None

    async def start(self, on_message: OnMessage) -> None:
        import nats
        from nats.aio.msg import Msg

        async def ignore(error: Exception) -> None:  # a server that went away: the reader sees it stop
            return None

        self._client = await nats.connect(
            self.servers,
            user=self._credentials.get("username"),
            password=self._credentials.get("password"),
            token=self._credentials.get("token"),
            allow_reconnect=False,
            error_cb=ignore,
        )

        async def deliver(message: Msg) -> None:
            received_us = _now_us()
            all_headers = message.headers or {}
            headers = {name: value for name, value in all_headers.items() if name not in BROKER_HEADERS}
            on_message(Consumed(received_us, all_headers.get("Nats-Msg-Id", ""), headers, message.data))

        await self._client.jetstream().subscribe(self.subject, stream=self.stream, cb=deliver, ordered_consumer=True)

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()


class RedisStreamConsumer(Consumer):
    """``XREAD`` of ``stream`` on ``url`` (``redis://host:port/db``) from its first entry."""

    def __init__(self, url: str, stream: str, *, credentials: Mapping[str, str] | None = None, batch: int = 1000):
        self.url = url
        self.stream = stream
        self._credentials = dict(credentials or {})
        self._batch = batch
        self._reader: asyncio.Task[None] | None = None

    async def start(self, on_message: OnMessage) -> None:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(
            self.url, username=self._credentials.get("username"), password=self._credentials.get("password")
        )
        await client.ping()
        self._reader = asyncio.create_task(self._read(client, on_message))

    async def _read(self, client: Any, on_message: OnMessage) -> None:
        import orjson

        last: bytes | str = "0-0"
        try:
            while True:
                answer = await client.xread({self.stream: last}, count=self._batch, block=1000)
                received_us = _now_us()
                for _stream, entries in answer or ():
                    for entry_id, fields in entries:
                        last = entry_id
                        headers = {str(k): str(v) for k, v in orjson.loads(fields[b"headers"]).items()}
                        on_message(Consumed(received_us, fields[b"flow_id"].decode(), headers, fields[b"body"]))
        finally:
            await client.aclose()

    async def stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await cancel_until_done(reader)  # redis-py's write can swallow one cancellation (gh-86296)


class GrpcConsumer(Consumer):
    """Serves ``Receiver.Fire`` on ``host:port`` (port 0: a free one) and answers ``OK``; with
    ``authorization``, a call without that metadata is answered ``UNAUTHENTICATED`` and not handed on."""

    def __init__(self, port: int = 0, *, authorization: str | None = None, host: str = "127.0.0.1"):
        self.host = host
        self.port = port
        self._authorization = authorization
        self._server: Any = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self, on_message: OnMessage) -> None:
        import grpc
        from grpc import aio

        from tjobs.delivery.grpc_proto import receiver_pb2, receiver_pb2_grpc

        authorization = self._authorization

        class Servicer(receiver_pb2_grpc.ReceiverServicer):
            async def Fire(  # the generated servicer's name
                self,
                request: receiver_pb2.FireRequest,
                context: aio.ServicerContext[receiver_pb2.FireRequest, receiver_pb2.FireReply],
            ) -> receiver_pb2.FireReply:
                received_us = _now_us()
                if authorization is not None:
                    metadata = {str(key): str(value) for key, value in (context.invocation_metadata() or ())}
                    if metadata.get("authorization") != authorization:
                        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad credentials")
                on_message(Consumed(received_us, request.flow_id, dict(request.headers), request.payload))
                return receiver_pb2.FireReply()

        server = aio.server()
        receiver_pb2_grpc.add_ReceiverServicer_to_server(Servicer(), server)
        self.port = server.add_insecure_port(f"{self.host}:{self.port}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(None)


def consumer_from_spec(spec: Mapping[str, Any]) -> Consumer:
    """A consumer from a JSON object: ``{"protocol": "amqp", "url", "queue", "username", "password"}``,
    ``{"protocol": "nats", "servers", "subject", "stream", "credentials"}``, ``{"protocol":
    "redis_stream", "url", "stream", "credentials"}`` or ``{"protocol": "grpc", "port", "authorization"}``."""
    protocol = spec["protocol"]
    if protocol == "amqp":
        return AmqpConsumer(
            spec["url"], spec["queue"], username=spec.get("username", "guest"), password=spec.get("password", "guest")
        )
    if protocol == "nats":
        return NatsConsumer(spec["servers"], spec["subject"], spec["stream"], credentials=spec.get("credentials", {}))
    if protocol == "redis_stream":
        return RedisStreamConsumer(spec["url"], spec["stream"], credentials=spec.get("credentials", {}))
    if protocol == "grpc":
        return GrpcConsumer(int(spec.get("port", 0)), authorization=spec.get("authorization"))
    raise ValueError(f"no consumer for protocol {protocol!r}")
