"""The brokers behind the broker-transport contract: one backend per transport, the twin included.

A backend gives the contract suite what it cannot write once for all: a fresh destination (a queue,
a stream) and its target, a real consumer reading it back, a target nobody answers for, and a broker
instance of the test's own to kill and restart (``tests/brokers.py``; the twin's is a
:class:`MemoryBroker`). The cases themselves are in ``test_broker_transport_contract.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast
from urllib.parse import urlsplit

import aiormq
import nats
import nats.js.errors
import orjson
import redis.asyncio
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from testkit.ports import free_port
from tests.brokers import OwnBroker, OwnNats, OwnRabbitMQ, OwnRedis
from tjobs.delivery.amqp_transport import AmqpTransport
from tjobs.delivery.broker import BrokerTransport
from tjobs.delivery.broker_twin import MemoryBroker, MemoryBrokerTransport
from tjobs.delivery.nats_transport import NatsTransport
from tjobs.delivery.redis_stream_transport import RedisStreamTransport
from tjobs.settings import CallbackSettings
from tjobs.targets.model import AmqpTarget, NatsTarget, RedisStreamTarget, Target

SETTINGS = CallbackSettings(timeout_ms=3000)
SECRET_PASSWORD = "pw-3f9a1c2e-never-shown"
RIGHT_PASSWORD = "right-7c1d5e9b-password"
USER = "tjobs-test-user"
READ_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Received:
    """One message as a consumer read it: its id, headers (tjobs' own, not the broker's) and body."""

    message_id: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Restartable:
    """A broker of the test's own and a durable destination on it."""

    target: Target
    kill: Any  # () -> Awaitable[None]
    restart: Any  # () -> Awaitable[None]


async def give_up_once_written(backend: BrokerBackend, request: Any) -> asyncio.Task[Any]:
    """Send ``request`` on a connected transport, cancel the attempt once its publish is written and
    unanswered, and return the finished attempt."""
    attempt = asyncio.create_task(backend.transport.send(request))
    for _ in range(100):
        if backend.transport.pending_publishes:
            break
        await asyncio.sleep(0)
    assert backend.transport.pending_publishes == 1, "the publish was not written before its answer came"
    attempt.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await attempt
    return attempt


class BrokerBackend(ABC):
    name: str
    transport: BrokerTransport[Any]

    @abstractmethod
    async def destination(self, max_messages: int | None = None) -> Target:
        """A fresh destination and a target publishing to it; with ``max_messages``, one that refuses
        new messages once it holds that many."""

    @abstractmethod
    async def received(self, target: Target, count: int, drain: bool = False) -> list[Received]:
        """Read (and take) ``count`` messages of the target's destination, waiting for them; with
        ``drain``, then every further message there is."""

    @abstractmethod
    def nobody_at(self, port: int) -> Target:
        """A target at ``127.0.0.1:port``, where nothing of this protocol answers."""

    @abstractmethod
    def unroutable(self) -> Target:
        """A target the broker cannot route (no queue bound, no stream capturing the subject)."""

    @abstractmethod
    def refusing_credentials(self) -> contextlib.AbstractAsyncContextManager[Target]:
        """A target on a broker that requires credentials, with the wrong password
        (:data:`SECRET_PASSWORD`)."""

    @abstractmethod
    def restartable(self) -> contextlib.AbstractAsyncContextManager[Restartable]:
        """A broker instance of the test's own with a durable destination, to kill and restart."""

    @abstractmethod
    def full(self) -> contextlib.AbstractAsyncContextManager[Target]:
        """A destination that takes a few messages and then refuses more (back-pressure)."""

    @contextlib.asynccontextmanager
    async def silent(self) -> AsyncIterator[Target]:
        """A target whose broker accepts connections and never says a word."""
        held: list[asyncio.BaseTransport] = []

        class Silent(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                held.append(transport)

        server = await asyncio.get_running_loop().create_server(Silent, "127.0.0.1", 0)
        try:
            yield self.nobody_at(server.sockets[0].getsockname()[1])
        finally:
            server.close()
            for transport in held:
                transport.close()
            await server.wait_closed()

    async def aclose(self) -> None:
        await self.transport.close()


def _target(name: str, settings: Any, credentials: Mapping[str, str] | None = None) -> Target:
    return Target("app", name, settings, credentials=dict(credentials or {}))


async def _in_thread(action: Any) -> None:
    await asyncio.to_thread(action)


def _now(action: Any) -> Any:
    """``action`` run at once on the event loop (a SIGKILL must land while the burst is in flight)."""

    async def run() -> None:
        action()

    return run


# ---- AMQP (RabbitMQ) ----------------------------------------------------------------------------------


class AmqpBackend(BrokerBackend):
    name = "amqp"

    def __init__(self, amqp_url: str) -> None:
        parts = urlsplit(amqp_url)
        self.credentials = {"username": parts.username or "guest", "password": parts.password or "guest"}
        self.url = f"amqp://{parts.hostname}:{parts.port or 5672}{parts.path or '/'}"
        self.transport = AmqpTransport(SETTINGS)
        self._connections: dict[str, aiormq.abc.AbstractConnection] = {}

    async def _channel(self, url: str) -> aiormq.abc.AbstractChannel:
        connection = self._connections.get(url)
        if connection is None or connection.is_closed:
            login = f"{self.credentials['username']}:{self.credentials['password']}@"
            connection = await aiormq.connect(url.replace("amqp://", f"amqp://{login}"))
            self._connections[url] = connection
        return await connection.channel()

    async def _queue(self, url: str, max_messages: int | None, durable: bool = False) -> str:
        queue = f"tjobs-test-{uuid.uuid4().hex[:12]}"
        arguments: dict[str, Any] = {} if durable else {"x-expires": 120_000}
        if max_messages is not None:
            arguments |= {"x-max-length": max_messages, "x-overflow": "reject-publish"}
        channel = await self._channel(url)
        await channel.queue_declare(queue, durable=durable, arguments=arguments)
        await channel.close()
        return queue

    async def destination(self, max_messages: int | None = None) -> Target:
        queue = await self._queue(self.url, max_messages)
        return _target(queue, AmqpTarget(self.url, "", queue), self.credentials)

    async def received(self, target: Target, count: int, drain: bool = False) -> list[Received]:
        settings = target.settings
        assert isinstance(settings, AmqpTarget)
        channel = await self._channel(settings.url)
        messages: list[Received] = []
        async with asyncio.timeout(READ_TIMEOUT_S):
            while drain or len(messages) < count:
                got = await channel.basic_get(settings.routing_key, no_ack=True)
                if got.delivery_tag is None:  # Basic.GetEmpty
                    if len(messages) >= count:
                        break
                    await asyncio.sleep(0.02)
                    continue
                properties = got.header.properties
                headers = {
                    k: v.decode() if isinstance(v, bytes) else str(v) for k, v in (properties.headers or {}).items()
                }
                assert properties.delivery_mode == 2  # persistent
                messages.append(Received(str(properties.message_id), headers, got.body))
        await channel.close()
        return messages

    def nobody_at(self, port: int) -> Target:
        return _target("nobody", AmqpTarget(f"amqp://127.0.0.1:{port}/", "", "q"), self.credentials)

    def unroutable(self) -> Target:
        return _target("unroutable", AmqpTarget(self.url, "", f"no-queue-{uuid.uuid4().hex[:8]}", mandatory=True))

    @contextlib.asynccontextmanager
    async def refusing_credentials(self) -> AsyncIterator[Target]:
        queue = await self._queue(self.url, None)
        credentials = {"username": self.credentials["username"], "password": SECRET_PASSWORD}
        yield _target(queue, AmqpTarget(self.url, "", queue), credentials)

    @contextlib.asynccontextmanager
    async def restartable(self) -> AsyncIterator[Restartable]:
        broker = OwnRabbitMQ()
        await _in_thread(broker.start)
        try:
            queue = await self._queue(broker.url, None, durable=True)
            # RabbitMQ 3.10 answers declare-ok before the durable queue is on disk: a kill -9 seconds
            # later can lose it (tests/brokers.py, OwnBroker.restart_cleanly). A clean restart writes it.
            await _in_thread(broker.restart_cleanly)
            target = _target(queue, AmqpTarget(broker.url, "", queue), {"username": "guest", "password": "guest"})
            yield Restartable(target, _now(broker.kill), lambda: _in_thread(broker.restart))
        finally:
            await self._forget(broker.url)
            await _in_thread(broker.stop)

    @contextlib.asynccontextmanager
    async def full(self) -> AsyncIterator[Target]:
        yield await self.destination(max_messages=5)

    async def _forget(self, url: str) -> None:
        connection = self._connections.pop(url, None)
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    async def aclose(self) -> None:
        await super().aclose()
        for url in list(self._connections):
            await self._forget(url)


# ---- NATS JetStream -----------------------------------------------------------------------------------


async def _ignore(error: Exception) -> None:
    """The consumer's connection to a killed server ends: the test knows."""


class NatsBackend(BrokerBackend):
    name = "nats"

    def __init__(self, nats_url: str) -> None:
        self.url = nats_url
        self.transport = NatsTransport(SETTINGS)
        self._clients: dict[str, Any] = {}
        self._streams: list[tuple[str, str]] = []

    async def _js(self, url: str) -> Any:
        client = self._clients.get(url)
        if client is None or not client.is_connected:
            client = await nats.connect(url, allow_reconnect=False, error_cb=_ignore)
            self._clients[url] = client
        return client.jetstream()

    async def _stream(self, url: str, max_messages: int | None) -> tuple[str, str]:
        stream = f"TJOBS_TEST_{uuid.uuid4().hex[:12].upper()}"
        subject = f"tjobs.test.{stream.lower()}"
        config = StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE)
        if max_messages is not None:
            config.max_msgs = max_messages
            config.discard = DiscardPolicy.NEW
        await (await self._js(url)).add_stream(config)
        self._streams.append((url, stream))
        return stream, subject

    async def destination(self, max_messages: int | None = None) -> Target:
        stream, subject = await self._stream(self.url, max_messages)
        return _target(stream, NatsTarget((self.url,), subject, stream=stream))

    async def received(self, target: Target, count: int, drain: bool = False) -> list[Received]:
        """Read the stream's messages by sequence (what a consumer would be handed), then purge it."""
        settings = target.settings
        assert isinstance(settings, NatsTarget) and settings.stream is not None
        js = await self._js(settings.servers[0])
        async with asyncio.timeout(READ_TIMEOUT_S):
            while (state := (await js.stream_info(settings.stream)).state).messages < count:  # noqa: ASYNC110 - polling a remote stream
                await asyncio.sleep(0.05)
        messages: list[Received] = []
        for sequence in range(state.first_seq, state.last_seq + 1) if state.messages else ():
            with contextlib.suppress(nats.js.errors.NotFoundError):
                message = await js.get_msg(settings.stream, sequence)
                headers = dict(message.headers or {})
                message_id = headers.pop("Nats-Msg-Id", "")
                headers.pop("Nats-Expected-Stream", None)
                messages.append(Received(message_id, headers, message.data or b""))
        await js.purge_stream(settings.stream)
        return messages

    def nobody_at(self, port: int) -> Target:
        return _target("nobody", NatsTarget((f"nats://127.0.0.1:{port}",), "s"))

    def unroutable(self) -> Target:
        return _target("unroutable", NatsTarget((self.url,), f"tjobs.nobody.{uuid.uuid4().hex[:8]}"))

    @contextlib.asynccontextmanager
    async def refusing_credentials(self) -> AsyncIterator[Target]:
        with OwnNats(USER, RIGHT_PASSWORD) as broker:
            credentials = {"username": USER, "password": SECRET_PASSWORD}
            yield _target("locked", NatsTarget((broker.url,), "tjobs.locked"), credentials)

    @contextlib.asynccontextmanager
    async def restartable(self) -> AsyncIterator[Restartable]:
        broker = OwnNats()
        await _in_thread(broker.start)
        try:
            stream, subject = await self._stream(broker.url, None)
            target = _target(stream, NatsTarget((broker.url,), subject, stream=stream))
            yield Restartable(target, _now(broker.kill), lambda: _in_thread(broker.restart))
        finally:
            await self._forget(broker.url)
            await _in_thread(broker.stop)

    @contextlib.asynccontextmanager
    async def full(self) -> AsyncIterator[Target]:
        yield await self.destination(max_messages=5)

    async def _forget(self, url: str) -> None:
        self._streams = [(u, s) for u, s in self._streams if u != url]
        client = self._clients.pop(url, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    async def aclose(self) -> None:
        await super().aclose()
        for url, stream in self._streams:
            with contextlib.suppress(Exception):
                await (await self._js(url)).delete_stream(stream)
        for url in list(self._clients):
            await self._forget(url)


# ---- Redis Streams ------------------------------------------------------------------------------------


class RedisStreamBackend(BrokerBackend):
    name = "redis_stream"

    def __init__(self, redis_url: str) -> None:
        self.url = redis_url
        self.transport = RedisStreamTransport(SETTINGS)
        self._clients: dict[str, redis.asyncio.Redis] = {}
        self._passwords: dict[str, str] = {}
        self._keys: list[str] = []

    def _client(self, url: str) -> redis.asyncio.Redis:
        client = self._clients.get(url)
        if client is None:
            client = redis.asyncio.Redis.from_url(url, password=self._passwords.get(url))
            self._clients[url] = client
        return client

    async def destination(self, max_messages: int | None = None) -> Target:
        assert max_messages is None, "a Redis stream refuses nothing: its back-pressure is maxmemory (see full())"
        stream = f"tjobs-test:{uuid.uuid4().hex[:12]}"
        self._keys.append(stream)
        return _target(stream.replace(":", "-"), RedisStreamTarget(self.url, stream))

    async def received(self, target: Target, count: int, drain: bool = False) -> list[Received]:
        settings = target.settings
        assert isinstance(settings, RedisStreamTarget)
        client = self._client(settings.url)
        messages: list[Received] = []
        last: bytes | str = "0-0"
        async with asyncio.timeout(READ_TIMEOUT_S):
            while drain or len(messages) < count:
                answer = cast(
                    list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]],
                    await client.xread({settings.stream: last}, count=1000, block=200),
                )
                if not answer and len(messages) >= count:
                    break
                for _stream, entries in answer:
                    for entry_id, fields in entries:
                        last = entry_id
                        headers = orjson.loads(fields[b"headers"])
                        messages.append(Received(fields[b"flow_id"].decode(), headers, fields[b"body"]))
        await client.delete(settings.stream)
        return messages

    def nobody_at(self, port: int) -> Target:
        return _target("nobody", RedisStreamTarget(f"redis://127.0.0.1:{port}/0", "s"))

    def unroutable(self) -> Target:
        raise AssertionError("XADD creates the stream: nothing is unroutable on Redis")

    @contextlib.asynccontextmanager
    async def refusing_credentials(self) -> AsyncIterator[Target]:
        with OwnRedis(password=RIGHT_PASSWORD) as broker:
            yield _target("locked", RedisStreamTarget(broker.url, "locked"), {"password": SECRET_PASSWORD})

    @contextlib.asynccontextmanager
    async def restartable(self) -> AsyncIterator[Restartable]:
        broker = OwnRedis()
        await _in_thread(broker.start)
        try:
            target = _target("durable", RedisStreamTarget(broker.url, "durable"))
            yield Restartable(target, _now(broker.kill), lambda: _in_thread(broker.restart))
        finally:
            await self._forget(broker.url)
            await _in_thread(broker.stop)

    @contextlib.asynccontextmanager
    async def full(self) -> AsyncIterator[Target]:
        # a server whose maxmemory sits just above what it uses empty: XADD meets OOM after a few entries
        broker: OwnBroker = OwnRedis()
        with broker:
            used = int((await self._client(broker.url).info("memory"))["used_memory"])
            await self._forget(broker.url)
        broker = OwnRedis(maxmemory_bytes=used + 192 * 1024)
        with broker:
            yield _target("capped", RedisStreamTarget(broker.url, "capped"))
            await self._forget(broker.url)

    async def _forget(self, url: str) -> None:
        client = self._clients.pop(url, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def aclose(self) -> None:
        await super().aclose()
        if self._keys:
            with contextlib.suppress(Exception):
                await self._client(self.url).delete(*self._keys)
        for url in list(self._clients):
            await self._forget(url)


# ---- the twin -----------------------------------------------------------------------------------------


class TwinBackend(BrokerBackend):
    """:class:`MemoryBrokerTransport` publishing AMQP targets to :class:`MemoryBroker` instances."""

    name = "twin"
    URL = "amqp://twin:5672/"

    def __init__(self) -> None:
        self.broker = MemoryBroker()
        self.brokers = {self.URL: self.broker}
        self.transport = MemoryBrokerTransport(SETTINGS, brokers=self.brokers)

    async def destination(self, max_messages: int | None = None) -> Target:
        queue = f"q-{uuid.uuid4().hex[:8]}"
        self.broker.declare(queue, max_messages)
        return _target(queue, AmqpTarget(self.URL, "", queue))

    async def received(self, target: Target, count: int, drain: bool = False) -> list[Received]:
        settings = target.settings
        assert isinstance(settings, AmqpTarget)
        broker = self.brokers[settings.url]
        messages: list[Received] = []
        async with asyncio.timeout(READ_TIMEOUT_S):
            while drain or len(messages) < count:
                taken = broker.consume(settings.routing_key)
                messages += [Received(m.message_id, dict(m.headers), m.body) for m in taken]
                if not taken:
                    if len(messages) >= count:
                        break
                    await asyncio.sleep(0.01)
        return messages

    @contextlib.asynccontextmanager
    async def silent(self) -> AsyncIterator[Target]:
        self.broker.hold = asyncio.Event()
        try:
            yield await self.destination()
        finally:
            self.broker.hold.set()
            self.broker.hold = None

    def nobody_at(self, port: int) -> Target:
        return _target("nobody", AmqpTarget(f"amqp://127.0.0.1:{port}/", "", "q"))

    def unroutable(self) -> Target:
        return _target("unroutable", AmqpTarget(self.URL, "", "never-declared", mandatory=True))

    @contextlib.asynccontextmanager
    async def refusing_credentials(self) -> AsyncIterator[Target]:
        url = "amqp://locked:5672/"
        self.brokers[url] = MemoryBroker(credentials={"username": USER, "password": RIGHT_PASSWORD})
        self.brokers[url].declare("q")
        yield _target("locked", AmqpTarget(url, "", "q"), {"username": USER, "password": SECRET_PASSWORD})

    @contextlib.asynccontextmanager
    async def restartable(self) -> AsyncIterator[Restartable]:
        url = "amqp://own:5672/"
        broker = self.brokers[url] = MemoryBroker(latency_s=0.002)
        broker.declare("durable")

        async def kill() -> None:
            broker.stop()

        async def restart() -> None:
            broker.start()

        yield Restartable(_target("durable", AmqpTarget(url, "", "durable")), kill, restart)

    @contextlib.asynccontextmanager
    async def full(self) -> AsyncIterator[Target]:
        yield await self.destination(max_messages=5)


def with_credentials(target: Target, credentials: Mapping[str, str]) -> Target:
    return replace(target, credentials=dict(credentials))


def refused_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()
