"""The AMQP 0-9-1 transport (RabbitMQ): one publish per attempt, delivered = the broker's publisher confirm.

An attempt publishes ``request.body`` to the target's ``exchange`` with its ``routing_key``; the
request's headers (``webhook-id``, ``webhook-signature``, ``tjobs-*``, the task's own) become the
message's AMQP headers table, the flow id its ``message_id`` (the receiver's idempotency key, the same
on every attempt), ``content-type`` its ``content_type``, and the message is persistent
(``delivery_mode`` 2) unless the target says otherwise.

Connections and channels: one connection per (broker URL, user name, password), opened by the first
send that needs it, with one channel per target (app, name) in confirm mode. A channel carries any
number of publishes at once: each waits for its own confirm while the next is written, so a burst
to one target costs a round trip only at its end, not one per message (the broker acknowledges them
in batches, ``multiple``). A connection or channel the broker closed is opened again by the next send
(so sends deliver again once a restarted broker answers); a failed attempt never retries itself.

What the broker's answers mean:

* ``basic.ack`` — :attr:`Outcome.DELIVERED` (for a persistent message to a durable queue RabbitMQ
  acknowledges once it is on disk);
* ``basic.nack`` — retryable: the broker could not take it now (a queue at ``x-max-length`` with
  ``x-overflow: reject-publish``, an internal error);
* ``basic.return`` of a ``mandatory`` message (``312 NO_ROUTE``: no queue is bound to the exchange
  for this routing key) — **retryable**. Unroutable is the broker's topology of the moment, not
  something wrong with the message: a consumer declares and binds its queue when it starts, so a
  consumer being deployed or restarted (auto-delete and exclusive queues vanish with it) makes
  messages unroutable for a while, and the same message routes once the queue is back. Treating it as
  permanent would dead-letter every fire of that window. A routing key that will never match costs
  ``max_attempts`` tries and then dead-letters, with this error on the flow;
* the channel closed with ``404 NOT_FOUND`` (the exchange does not exist), ``403 ACCESS_REFUSED``
  (the user may not write to it) or another channel error — permanent: the target names something
  the broker refuses, and only changing the target (or the broker's definitions) helps;
* the login refused (``ACCESS_REFUSED`` on connecting: wrong user name or password) or the virtual
  host refused (``530 NOT_ALLOWED``) — permanent;
* a refused or reset connection, a broker that goes away before confirming, a timeout — retryable:
  a message the broker did not confirm is never reported delivered (it may still have been taken:
  the retry carries the same ``message_id``).

The broker URL (``amqp://host:port/vhost``) carries no user info: the target's ``username`` and
``password`` credentials are added when connecting, and errors are scrubbed of them
(:mod:`tjobs.delivery.broker`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import cast

import aiormq
import aiormq.abc
from aiormq.exceptions import (
    AMQPChannelError,
    AuthenticationError,
    ConnectionNotAllowed,
    DeliveryError,
    InvalidFrameError,
    ProbableAuthenticationError,
    PublishError,
)
from pamqp import commands as spec
from yarl import URL

from tjobs.clock import Clock
from tjobs.delivery.broker import BrokerBusy, BrokerRefused, BrokerTransport
from tjobs.delivery.transport import CallbackRequest, TargetPolicy
from tjobs.settings import CallbackSettings
from tjobs.targets.model import AmqpTarget, Protocol, Target

logger = logging.getLogger(__name__)

PERSISTENT = 2
TRANSIENT = 1
NO_ROUTE = 312
NACKED = "nacked by the broker (a full queue rejecting publishes, or a broker error)"

ConnectionKey = tuple[str, str, str]  # broker URL, user name, password
ChannelKey = tuple[str, str]  # app id, target name


@dataclass
class _Broker:
    """One connection to one broker as one user, and its channels (one per target)."""

    url: URL
    connection: aiormq.abc.AbstractConnection | None = None
    channels: dict[ChannelKey, aiormq.Channel] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def channel(self, key: ChannelKey) -> aiormq.Channel:
        channel = self.channels.get(key)
        if channel is not None and not channel.is_closed:
            return channel
        async with self.lock:  # a burst to a new target opens one connection and one channel
            channel = self.channels.get(key)
            if channel is not None and not channel.is_closed:
                return channel
            connection = self.connection
            if connection is None or connection.is_closed:
                self.channels.clear()
                connection = self.connection = await _connect(self.url)
            channel = cast(aiormq.Channel, await connection.channel(publisher_confirms=True, on_return_raises=True))
            self.channels[key] = channel
            return channel

    @property
    def pending(self) -> int:
        return sum(len(channel.confirmations) for channel in self.channels.values() if not channel.is_closed)

    async def close(self) -> None:
        connection, self.connection = self.connection, None
        self.channels.clear()
        if connection is not None and not connection.is_closed:
            try:
                await connection.close()
            except Exception as exc:  # a broker already gone: nothing left to release
                logger.debug("closing an AMQP connection failed: %s", type(exc).__name__)


async def _connect(url: URL) -> aiormq.abc.AbstractConnection:
    try:
        return await aiormq.connect(url)
    except (ProbableAuthenticationError, AuthenticationError):
        raise BrokerRefused("AMQP login refused (ACCESS_REFUSED): check the target's username and password") from None
    except ConnectionNotAllowed:
        raise BrokerRefused("AMQP virtual host refused (NOT_ALLOWED) for this user") from None
    except InvalidFrameError as exc:
        if "Connection.Close" not in str(exc):  # a broker speaking out of turn: retryable, as a reset
            raise ConnectionResetError("AMQP handshake failed: unexpected frame") from None
        # the broker closed the connection instead of opening the virtual host
        raise BrokerRefused("AMQP virtual host refused (not found, or not allowed for this user)") from None


class AmqpTransport(BrokerTransport[AmqpTarget]):
    """Publishes each attempt to a RabbitMQ exchange with publisher confirms (see the module docstring)."""

    protocols = frozenset({Protocol.AMQP})

    def __init__(
        self, settings: CallbackSettings, clock: Clock | None = None, policy: TargetPolicy | None = None
    ) -> None:
        super().__init__(settings, clock, policy)
        self._brokers: dict[ConnectionKey, _Broker] = {}

    @property
    def pending_publishes(self) -> int:
        return sum(broker.pending for broker in self._brokers.values())

    async def close(self) -> None:
        brokers, self._brokers = self._brokers, {}
        await asyncio.gather(*(broker.close() for broker in brokers.values()))

    async def _publish(self, request: CallbackRequest, target: Target, settings: AmqpTarget) -> None:
        username = target.credentials.get("username", "")
        password = target.credentials.get("password", "")
        key = (settings.url, username, password)
        broker = self._brokers.get(key)
        if broker is None:
            broker = self._brokers[key] = _Broker(_broker_url(settings.url, username, password))
        channel = await broker.channel((target.app_id, target.name))
        headers = request.headers
        properties = spec.Basic.Properties(
            content_type=headers.get("content-type"),
            headers=dict(headers),
            delivery_mode=PERSISTENT if settings.persistent else TRANSIENT,
            message_id=request.flow_id,
        )
        try:
            confirm = await channel.basic_publish(
                request.body or b"",
                exchange=settings.exchange,
                routing_key=settings.routing_key,
                properties=properties,
                mandatory=settings.mandatory,
            )
        except PublishError as returned:
            frame = returned.frame
            reply = getattr(frame, "reply_text", "") or "returned"
            code = getattr(frame, "reply_code", None)
            what = "unroutable" if code == NO_ROUTE else "returned by the broker"
            raise BrokerBusy(
                f"{what} ({code} {reply}): no queue bound to exchange {settings.exchange!r} "
                f"for routing key {settings.routing_key!r}"
            ) from None
        except DeliveryError:  # aiormq raises for a basic.nack
            raise BrokerBusy(NACKED) from None
        except AMQPChannelError as closed:
            raise BrokerRefused(f"AMQP channel closed by the broker: {_reason(closed)}") from None
        if isinstance(confirm, spec.Basic.Nack):
            raise BrokerBusy(NACKED)


def _broker_url(url: str, username: str, password: str) -> URL:
    parsed = URL(url)
    if parsed.scheme not in ("amqp", "amqps") or not parsed.host:
        raise BrokerRefused("the broker URL must be amqp://host:port/vhost or amqps://…")
    if username:
        parsed = parsed.with_user(username).with_password(password or None)
    return parsed


def _reason(exc: BaseException) -> str:
    """The broker's own words of a channel error (``NOT_FOUND - no exchange 'x' in vhost '/'``)."""
    args = [str(arg) for arg in exc.args if arg]
    return (args[0] if args else type(exc).__name__).strip()
