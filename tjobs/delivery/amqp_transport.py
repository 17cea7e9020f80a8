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
in batches, ``multiple``). The publishes of one event-loop turn go out together: each is encoded to
its frames (:mod:`tjobs.delivery.amqp_frames`) and given its delivery tag and confirm at once, and
the turn's frames are handed to the connection's writer as one write (one system call for a burst,
not one per message and a writer wake-up each). A connection or channel the broker closed is opened
again by the next send (so sends deliver again once a restarted broker answers); a failed attempt
never retries itself.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import aiormq
import aiormq.abc
from aiormq.abc import ChannelFrame
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

from tjobs.delivery.amqp_frames import publish_frames
from tjobs.delivery.broker import BrokerBusy, BrokerRefused, ConnectedBrokerTransport
from tjobs.delivery.transport import CallbackRequest
from tjobs.targets.model import AmqpTarget, Protocol, Target

logger = logging.getLogger(__name__)

PERSISTENT = 2
TRANSIENT = 1
NO_ROUTE = 312
NACKED = "nacked by the broker (a full queue rejecting publishes, or a broker error)"

FramesFor = Callable[[int, int], bytes]  # (channel number, largest body frame) -> the publish's frames
ConnectionKey = tuple[str, str, str]  # broker URL, user name, password
ChannelKey = tuple[str, str]  # app id, target name
WRITE_RETRY_S = 0.001  # the connection's write queue was full: hand the frames over again this soon


class _Publisher:
    """Publishes on one confirm-mode channel: tags and confirms at once, frames of a loop turn in one write.

    It does what ``Channel.basic_publish`` does for a publish (the next delivery tag, a confirm future
    the channel settles on ``basic.ack``/``basic.nack``/``basic.return`` and rejects when it closes,
    the message id noted for a return) without its per-message lock, frame objects and writer
    round trip. Frames reach the broker in tag order: every publish goes through :attr:`_pending`,
    which is handed to the writer whole, in order. Only this publisher publishes on its channel."""

    def __init__(self, channel: aiormq.Channel) -> None:
        self.channel = channel
        self._pending: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None

    def publish(self, frames_for: FramesFor, message_id: str) -> asyncio.Future[object]:
        channel = self.channel
        frames = frames_for(channel.number, channel.max_content_size)  # may raise: nothing was tagged
        channel.delivery_tag += 1
        tag = channel.delivery_tag
        confirmation: asyncio.Future[object] = channel.create_future()
        channel.confirmations[tag] = confirmation
        channel.message_id_delivery_tag[message_id] = tag

        def forget_message_id(_: asyncio.Future[object]) -> None:
            if channel.message_id_delivery_tag.get(message_id) == tag:
                del channel.message_id_delivery_tag[message_id]

        confirmation.add_done_callback(forget_message_id)
        self._pending.append(frames)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        return confirmation

    def _flush(self) -> None:
        self._flush_handle = None
        if not self._pending:
            return
        if self.channel.is_closed:  # its confirms were rejected on closing; frames on it would be an error
            self._pending.clear()
            return
        try:
            self.channel.connection.write_queue.put_nowait(ChannelFrame(b"".join(self._pending), should_close=False))
        except asyncio.QueueFull:  # the writer is behind: keep them (in order) and try again shortly
            self._flush_handle = asyncio.get_running_loop().call_later(WRITE_RETRY_S, self._flush)
            return
        self._pending.clear()


@dataclass
class _Broker:
    """One connection to one broker as one user, and its channels (one per target)."""

    url: URL
    connection: aiormq.abc.AbstractConnection | None = None
    channels: dict[ChannelKey, _Publisher] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def publisher(self, key: ChannelKey) -> _Publisher:
        publisher = self.channels.get(key)
        if publisher is not None and not publisher.channel.is_closed:
            return publisher
        async with self.lock:  # a burst to a new target opens one connection and one channel
            publisher = self.channels.get(key)
            if publisher is not None and not publisher.channel.is_closed:
                return publisher
            connection = self.connection
            if connection is None or connection.is_closed:
                self.channels.clear()
                connection = self.connection = await _connect(self.url)
            channel = cast(aiormq.Channel, await connection.channel(publisher_confirms=True, on_return_raises=True))
            publisher = self.channels[key] = _Publisher(channel)
            return publisher

    @property
    def pending(self) -> int:
        return sum(
            len(publisher.channel.confirmations)
            for publisher in self.channels.values()
            if not publisher.channel.is_closed
        )

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


class AmqpTransport(ConnectedBrokerTransport[AmqpTarget, ConnectionKey, _Broker]):
    """Publishes each attempt to a RabbitMQ exchange with publisher confirms (see the module docstring)."""

    protocols = frozenset({Protocol.AMQP})

    async def _publish(self, request: CallbackRequest, target: Target, settings: AmqpTarget) -> None:
        username = target.credentials.get("username", "")
        password = target.credentials.get("password", "")
        broker = self._connection(
            (settings.url, username, password), lambda: _Broker(_broker_url(settings.url, username, password))
        )
        publisher = await broker.publisher((target.app_id, target.name))
        headers = request.headers

        def frames_for(channel: int, max_body_frame: int) -> bytes:
            return publish_frames(
                channel,
                exchange=settings.exchange,
                routing_key=settings.routing_key,
                mandatory=settings.mandatory,
                body=request.body or b"",
                headers=headers,
                content_type=headers.get("content-type"),
                delivery_mode=PERSISTENT if settings.persistent else TRANSIENT,
                message_id=request.flow_id,
                max_body_frame=max_body_frame,
            )

        try:
            confirm = await publisher.publish(frames_for, request.flow_id)
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
