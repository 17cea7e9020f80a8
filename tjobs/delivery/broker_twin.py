"""The in-memory twin of the message-broker transports: brokers in a dict, publishes kept in memory.

:class:`MemoryBrokerTransport` keeps the same contract as :class:`tjobs.delivery.amqp_transport.AmqpTransport`,
:class:`tjobs.delivery.nats_transport.NatsTransport` and
:class:`tjobs.delivery.redis_stream_transport.RedisStreamTransport` (it takes targets of all three
protocols) and answers as they do, so the deliverer, a node or an application's tests can run
against brokers that are down, full, slow or refusing, without one::

    broker = MemoryBroker(credentials={"username": "svc", "password": "…"})
    broker.declare("orders", max_messages=1000)               # a queue / stream / subject
    transport = MemoryBrokerTransport(brokers={"amqp://mq:5672/": broker})
    ... deliver ...
    broker.consume("orders")   # what a consumer reads: message id, headers, body, in order
    broker.stop(); broker.start()                              # a broker going away and coming back

Where a target publishes: its broker is ``brokers[address]`` (AMQP and Redis: the target's ``url``;
NATS: its first server); no broker there, or a stopped one, is a refused connection. The destination
is the AMQP ``routing_key`` (as the default exchange routes), the NATS ``subject`` or the Redis
``stream``. As the real brokers: an AMQP destination not declared is unroutable (retryable) when the
target is ``mandatory`` and silently dropped otherwise, a NATS one has no responders (retryable), a
Redis one is created by the publish; a full destination (``max_messages``) refuses the publish
(retryable) and keeps nothing of it; credentials other than the broker's are refused (permanent); a
message taken is kept across ``stop``/``start`` (durable) and a publish still in flight when the
broker stops is lost and fails (retryable), never reported delivered.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from tjobs.clock import Clock
from tjobs.delivery.broker import BrokerBusy, BrokerRefused, BrokerTransport
from tjobs.delivery.transport import CallbackRequest, TargetPolicy
from tjobs.settings import CallbackSettings
from tjobs.targets.model import AmqpTarget, NatsTarget, Protocol, RedisStreamTarget, Target

BrokerSettings = AmqpTarget | NatsTarget | RedisStreamTarget


@dataclass(frozen=True, slots=True)
class BrokerMessage:
    """One message a broker took: its id (the flow id), headers and body, as sent."""

    destination: str
    message_id: str
    headers: Mapping[str, str]
    body: bytes


class MemoryBroker:
    """One broker in memory: destinations with an optional capacity, up or stopped, its credentials."""

    def __init__(self, credentials: Mapping[str, str] | None = None, latency_s: float = 0.0) -> None:
        self.credentials = dict(credentials) if credentials is not None else None
        """``None``: anyone may publish; else exactly these credentials."""
        self.latency_s = latency_s
        """How long the broker takes to store one publish; it stores one at a time (a stop meanwhile
        loses the publishes in flight)."""
        self.hold: asyncio.Event | None = None
        """While set to an unset event, publishes wait for it (within their timeout): a stalled broker."""
        self.up = True
        self._messages: dict[str, deque[BrokerMessage]] = {}
        self._capacity: dict[str, int | None] = {}
        self._generation = 0  # moves on every stop: a publish in flight across it is lost
        self._storing = asyncio.Lock()

    def declare(self, destination: str, max_messages: int | None = None) -> None:
        """Create ``destination`` (a queue, a stream, a subject captured by a stream)."""
        self._messages.setdefault(destination, deque())
        self._capacity[destination] = max_messages

    def consume(self, destination: str) -> list[BrokerMessage]:
        """Take every message waiting in ``destination``, oldest first."""
        messages = self._messages.get(destination)
        if not messages:
            return []
        taken = list(messages)
        messages.clear()
        return taken

    def depth(self, destination: str) -> int:
        return len(self._messages.get(destination, ()))

    def stop(self) -> None:
        """The broker goes away: connections are refused, publishes in flight are lost."""
        self.up = False
        self._generation += 1

    def start(self) -> None:
        self.up = True

    async def publish(
        self, protocol: Protocol, settings: BrokerSettings, credentials: Mapping[str, str], message: BrokerMessage
    ) -> None:
        """Take ``message`` or raise what the real broker's failure means."""
        if not self.up:
            raise ConnectionRefusedError(111, "Connection refused")
        if self.credentials is not None and dict(credentials) != self.credentials:
            raise BrokerRefused("authorization refused: check the target's credentials")
        generation = self._generation
        if self.hold is not None:
            await self.hold.wait()
        if self.latency_s:
            async with self._storing:
                if generation == self._generation:
                    await asyncio.sleep(self.latency_s)
        if generation != self._generation or not self.up:
            raise ConnectionResetError(104, "the broker went away before acknowledging")
        destination = message.destination
        messages = self._messages.get(destination)
        if messages is None:
            if isinstance(settings, AmqpTarget):
                if not settings.mandatory:
                    return  # RabbitMQ confirms an unroutable message that is not mandatory, and drops it
                raise BrokerBusy(f"unroutable (312 NO_ROUTE): no queue bound for routing key {destination!r}")
            if isinstance(settings, NatsTarget):
                raise BrokerBusy(f"no JetStream stream captures subject {destination!r} (no responders)")
            self.declare(destination)  # XADD creates the stream
            messages = self._messages[destination]
        capacity = self._capacity.get(destination)
        if capacity is not None and len(messages) >= capacity:
            raise BrokerBusy(f"{destination!r} is full ({capacity} messages)")
        messages.append(message)


def address_of(settings: BrokerSettings) -> str:
    """Which broker a target publishes to (the key of ``brokers``)."""
    if isinstance(settings, NatsTarget):
        return settings.servers[0] if settings.servers else ""
    return settings.url


def destination_of(settings: BrokerSettings) -> str:
    """Where on its broker a target publishes: the routing key, the subject or the stream."""
    if isinstance(settings, AmqpTarget):
        return settings.routing_key
    if isinstance(settings, NatsTarget):
        return settings.subject
    return settings.stream


class MemoryBrokerTransport(BrokerTransport[BrokerSettings]):
    """Publishes to :class:`MemoryBroker` instances by address (see the module docstring)."""

    protocols = frozenset({Protocol.AMQP, Protocol.NATS, Protocol.REDIS_STREAM})

    def __init__(
        self,
        settings: CallbackSettings | None = None,
        clock: Clock | None = None,
        policy: TargetPolicy | None = None,
        brokers: MutableMapping[str, MemoryBroker] | None = None,
    ) -> None:
        super().__init__(settings or CallbackSettings(), clock, policy)
        self.brokers: MutableMapping[str, MemoryBroker] = brokers if brokers is not None else {}
        self.closed = 0
        self._in_flight = 0

    @property
    def pending_publishes(self) -> int:
        return self._in_flight

    async def close(self) -> None:
        self.closed += 1

    async def _publish(self, request: CallbackRequest, target: Target, settings: BrokerSettings) -> None:
        broker = self.brokers.get(address_of(settings))
        if broker is None:
            raise ConnectionRefusedError(111, "Connection refused")
        message = BrokerMessage(destination_of(settings), request.flow_id, dict(request.headers), request.body or b"")
        self._in_flight += 1
        try:
            await broker.publish(target.protocol, settings, target.credentials, message)
        finally:
            self._in_flight -= 1
