"""The NATS JetStream transport: one JetStream publish per attempt, delivered = the stream's publish ack.

An attempt publishes ``request.body`` to the target's ``subject`` with the request's headers as NATS
headers and ``Nats-Msg-Id`` = the flow id: JetStream drops a second message with the same id inside
the stream's duplicate window (2 minutes by default), so a retry of a publish whose ack was lost is
stored once. With ``stream`` set, the publish also says which stream must store it
(``Nats-Expected-Stream``).

Connections: one per (servers, credentials), opened by the first send that needs it, carrying every
publish at once (each waits for its own ack on the connection's shared reply subscription). The
client does not reconnect by itself: a connection the server dropped is closed, and the next send
connects again, so while the server is down sends fail fast instead of queueing in a reconnect
buffer, and once it is back they deliver again.

What the answers mean:

* a publish ack — :attr:`Outcome.DELIVERED`, a ``duplicate`` ack too (the stream already holds this
  flow id's message: that is what the idempotency key is for);
* no responders (no stream captures the subject), a full stream (``max_msgs``/``max_bytes`` with
  ``discard: new``, error 10077), JetStream unavailable, a timeout, a refused connection, a server
  that goes away before acking — retryable;
* ``Authorization Violation`` (wrong user, password or token) — permanent; so is an ack refused
  because another stream captures the subject than the target's ``stream`` (error 10060): only
  changing the target or the server's streams helps.

Credentials: ``username`` and ``password``, or ``token``; never in ``error``
(:mod:`tjobs.delivery.broker`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from tjobs.clock import Clock
from tjobs.delivery.broker import BrokerBusy, BrokerRefused, BrokerTransport
from tjobs.delivery.transport import CallbackRequest, TargetPolicy
from tjobs.settings import CallbackSettings
from tjobs.targets.model import NatsTarget, Protocol, Target

logger = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"
STREAM_MISMATCH = 10060  # "expected stream does not match"
CONNECT_TIMEOUT_S = 5  # the attempt's own timeout bounds it further
AUTHORIZATION_VIOLATION = "NATS authorization violation: check the target's credentials"

ConnectionKey = tuple[tuple[str, ...], str, str, str]  # servers, user name, password, token


@dataclass
class _Server:
    """One connection to one NATS server set with one set of credentials."""

    key: ConnectionKey
    client: Client | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def connected(self) -> Client:
        client = self.client
        if client is not None and client.is_connected:
            return client
        async with self.lock:  # a burst to a new server set opens one connection
            client = self.client
            if client is not None and client.is_connected:
                return client
            if client is not None:
                await _close_quietly(client)
            self.client = None
            client = self.client = await self._connect()
            return client

    async def _connect(self) -> Client:
        client = Client()
        try:
            await self._open(client)
        except BaseException:
            # nats-py leaves a connection cut short (a timeout, a cancellation, a refusal) open
            await _close_quietly(client)
            raise
        return client

    async def _open(self, client: Client) -> None:
        servers, username, password, token = self.key
        try:
            await client.connect(
                servers=list(servers),
                user=username or None,
                password=password or None,
                token=token or None,
                allow_reconnect=False,
                # connecting tries each server twice at once, then gives up (nats-py's smallest)
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                connect_timeout=CONNECT_TIMEOUT_S,
                error_cb=_on_error,
                disconnected_cb=self._fail_pending,
                closed_cb=self._fail_pending,
                name="tjobs",
            )
        except nats.errors.NoServersError:
            raise ConnectionRefusedError("no NATS server answered") from None
        except (nats.errors.AuthorizationError, nats.errors.InvalidUserCredentialsError):
            raise BrokerRefused(AUTHORIZATION_VIOLATION) from None
        except nats.errors.Error as exc:
            if "authorization" in str(exc).lower():
                raise BrokerRefused(AUTHORIZATION_VIOLATION) from None
            raise

    @property
    def pending(self) -> int:
        return len(self._awaited_replies())

    def _awaited_replies(self) -> dict[str, asyncio.Future[object]]:
        """The publishes waiting for their ack (nats-py's own map: it has no public view of it)."""
        client = self.client
        return getattr(client, "_resp_map", None) or {}

    async def _fail_pending(self) -> None:
        """The connection is gone: its publishes will never be acked, so they fail now, not at their
        timeout (nats-py leaves them waiting)."""
        for future in list(self._awaited_replies().values()):
            if not future.done():
                future.set_exception(ConnectionResetError("the NATS server closed the connection before acking"))

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            await _close_quietly(client)


async def _close_quietly(client: Client) -> None:
    try:
        await client.close()
    except Exception as exc:  # a server already gone: nothing left to release
        logger.debug("closing a NATS connection failed: %s", type(exc).__name__)


async def _on_error(exc: Exception) -> None:
    # connection errors surface as failed sends; nats-py would log them (with server URLs) otherwise
    logger.debug("NATS connection error: %s", type(exc).__name__)


class NatsTransport(BrokerTransport[NatsTarget]):
    """Publishes each attempt to NATS JetStream and waits for its ack (see the module docstring)."""

    protocols = frozenset({Protocol.NATS})

    def __init__(
        self, settings: CallbackSettings, clock: Clock | None = None, policy: TargetPolicy | None = None
    ) -> None:
        super().__init__(settings, clock, policy)
        self._servers: dict[ConnectionKey, _Server] = {}

    @property
    def pending_publishes(self) -> int:
        return sum(server.pending for server in self._servers.values())

    async def close(self) -> None:
        servers, self._servers = self._servers, {}
        await asyncio.gather(*(server.close() for server in servers.values()))

    async def _publish(self, request: CallbackRequest, target: Target, settings: NatsTarget) -> None:
        credentials = target.credentials
        key = (
            settings.servers,
            credentials.get("username", ""),
            credentials.get("password", ""),
            credentials.get("token", ""),
        )
        server = self._servers.get(key)
        if server is None:
            server = self._servers[key] = _Server(key)
        client = await server.connected()
        headers = dict(request.headers)
        headers[MSG_ID] = request.flow_id
        try:
            # the attempt's own deadline (asyncio.timeout around this) is the bound; this one only
            # has to be no shorter
            await client.jetstream().publish(
                settings.subject,
                request.body or b"",
                timeout=request.timeout_ms / 1000 + 1,
                stream=settings.stream,
                headers=headers,
            )
        except nats.js.errors.NoStreamResponseError:
            raise BrokerBusy(f"no JetStream stream captures subject {settings.subject!r} (no responders)") from None
        except nats.js.errors.APIError as refused:
            if refused.err_code == STREAM_MISMATCH:
                raise BrokerRefused(
                    f"subject {settings.subject!r} is not stored by stream {settings.stream!r}"
                ) from None
            raise BrokerBusy(
                f"JetStream refused the publish: {refused.description} (error {refused.err_code})"
            ) from None
