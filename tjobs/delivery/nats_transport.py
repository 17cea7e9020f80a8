"""The NATS JetStream transport: one JetStream publish per attempt, delivered = the stream's publish ack.

An attempt publishes ``request.body`` to the target's ``subject`` with the request's headers as NATS
headers and ``Nats-Msg-Id`` = the flow id: JetStream drops a second message with the same id inside
the stream's duplicate window (2 minutes by default), so a retry of a publish whose ack was lost is
stored once. A publish that starts a job run (``tjobs-run: report``: the task's ``run_on_publish``) is
identified by the flow id and its attempt (``<flow id>.<attempt>``): a run's next attempt, after a
failure or a timeout, is new work the stream must not drop. With ``stream`` set, the publish also says
which stream must store it (``Nats-Expected-Stream``).

Connections: one per (servers, credentials), opened by the first send that needs it, carrying every
publish at once (each waits for its own ack on the connection's shared reply subscription). The
client does not reconnect by itself: a connection the server dropped is closed, and the next send
connects again, so while the server is down sends fail fast instead of queueing in a reconnect
buffer, and once it is back they deliver again. nats-py connects within ``asyncio.wait_for``, which
on Python 3.11 loses a cancellation that comes as the connection opens (CPython gh-86296); an
attempt cancelled (or past its deadline) then raises before it publishes, since nothing but its
deadline bounds the wait for the ack (:func:`tjobs.cancellation.cancellable`).

The publish itself is written here, below nats-py's ``JetStreamContext.publish``: nats-py connects,
reads, parses and routes each ack to its reply inbox, but the ``HPUB`` command is built in one step
(the target's subject and ``Nats-Expected-Stream`` header encoded once per target, the header names
checked once per name), the ack's future waits under the attempt's own deadline alone (nats-py
wraps it in a second timer, ``asyncio.wait_for``), the reply token is a counter on the
connection's unique inbox, and the ack is read with orjson (not a ``PubAck``). It uses the client's
reply subscription and its write buffer (``_init_request_sub``, ``_resp_sub_prefix``, ``_resp_map``,
``_send_command``, ``_flush_pending``), which nats-py does not publish: the broker contract suite and
``tests/integration/test_nats_transport.py`` run it against a real server.

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
import functools
import itertools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import nats
import nats.errors
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg

from tjobs.cancellation import cancellable
from tjobs.delivery.broker import BrokerBusy, BrokerRefused, ConnectedBrokerTransport
from tjobs.delivery.run_start import RUN_HEADER, RUN_REPORT
from tjobs.delivery.transport import CallbackRequest
from tjobs.targets.model import NatsTarget, Protocol, Target

logger = logging.getLogger(__name__)

MSG_ID = "Nats-Msg-Id"
STREAM_MISMATCH = 10060  # "expected stream does not match"
CONNECT_TIMEOUT_S = 5  # the attempt's own timeout bounds it further
AUTHORIZATION_VIOLATION = "NATS authorization violation: check the target's credentials"

ConnectionKey = tuple[tuple[str, ...], str, str, str]  # servers, user name, password, token
NO_RESPONDERS = "503"  # the status the server answers a publish no stream captures with
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # what a NATS header name may hold
_NO_SPACE = re.compile(r"\S+")  # a subject or a stream name in the protocol line: no whitespace, no CR/LF
_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " "})
EXPECTED_STREAM = "Nats-Expected-Stream"
_OWN_HEADERS = frozenset({MSG_ID, EXPECTED_STREAM})  # set by the transport, never taken from a request


@dataclass(frozen=True, slots=True)
class Command:
    """One attempt's ``HPUB`` but for its reply subject and payload: the subject line's start and the
    header block (the request's headers, ``Nats-Msg-Id``, ``Nats-Expected-Stream``)."""

    start: bytes  # b"HPUB <subject> "
    header_block: bytes

    @classmethod
    def of(cls, subject: str, stream: str | None, headers: Mapping[str, str], flow_id: str) -> Command:
        start, fixed = _line_start(subject, stream)
        return cls(start, fixed + _header_lines(headers, flow_id))

    def encode(self, reply: str, payload: bytes) -> bytes:
        block = self.header_block
        return b"%b%b %d %d\r\n%b%b\r\n" % (
            self.start,
            reply.encode(),
            len(block),
            len(block) + len(payload),
            block,
            payload,
        )


@dataclass
class _Server:
    """One connection to one NATS server set with one set of credentials."""

    key: ConnectionKey
    client: Client | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    reply_prefix: str = ""  # the connection's reply inbox, ``_INBOX.<unique>.``; a token follows
    _tokens: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

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
            await client._init_request_sub()  # the reply inbox every publish's ack comes back on
            assert client._resp_sub_prefix is not None  # set by _init_request_sub
            self.reply_prefix = client._resp_sub_prefix.decode()
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

    async def publish(self, client: Client, command: Command, payload: bytes) -> bytes:
        """Write one ``HPUB`` with a reply token of its own and return the answer's data once read.

        The answer's future is in the client's reply map from before the write until this returns,
        raises or is cancelled (the attempt's deadline)."""
        if len(payload) > client.max_payload:
            raise nats.errors.MaxPayloadError
        if not client.is_connected:
            raise ConnectionResetError("the NATS connection is gone")
        token = str(next(self._tokens))
        replies: dict[str, asyncio.Future[Msg]] = client._resp_map
        answer: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        replies[token] = answer
        try:
            await client._send_command(command.encode(self.reply_prefix + token, payload))
            flushes = client._flush_queue
            if flushes is not None and flushes.empty():
                await client._flush_pending()
            message = await answer
        finally:
            replies.pop(token, None)
        if message.headers and message.headers.get("Status") == NO_RESPONDERS:
            raise _NoResponders
        return message.data

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


class NatsTransport(ConnectedBrokerTransport[NatsTarget, ConnectionKey, _Server]):
    """Publishes each attempt to NATS JetStream and waits for its ack (see the module docstring)."""

    protocols = frozenset({Protocol.NATS})

    async def _publish(self, request: CallbackRequest, target: Target, settings: NatsTarget) -> None:
        credentials = target.credentials
        key = (
            settings.servers,
            credentials.get("username", ""),
            credentials.get("password", ""),
            credentials.get("token", ""),
        )
        server = self._connection(key, functools.partial(_Server, key))
        command = Command.of(settings.subject, settings.stream, request.headers, request.flow_id)
        client = await cancellable(server.connected())  # nats-py connects within wait_for (gh-86296)
        try:
            data = await server.publish(client, command, request.body or b"")
        except _NoResponders:
            raise BrokerBusy(f"no JetStream stream captures subject {settings.subject!r} (no responders)") from None
        ack = orjson.loads(data)
        refused = ack.get("error") if isinstance(ack, dict) else None
        if refused is None:
            return  # stored (or a duplicate of a message the stream holds: the same flow id)
        if refused.get("err_code") == STREAM_MISMATCH:
            raise BrokerRefused(f"subject {settings.subject!r} is not stored by stream {settings.stream!r}")
        raise BrokerBusy(
            f"JetStream refused the publish: {refused.get('description')} (error {refused.get('err_code')})"
        )


class _NoResponders(Exception):
    """No stream captures the subject: the server answered the publish itself (status 503)."""


@functools.lru_cache(maxsize=1024)
def _line_start(subject: str, stream: str | None) -> tuple[bytes, bytes]:
    """``HPUB <subject> `` and the header block's fixed part, checked and encoded once per target."""
    if not _NO_SPACE.fullmatch(subject):
        raise BrokerRefused(f"subject {subject!r} cannot be sent: it holds whitespace")
    fixed = b"NATS/1.0\r\n"
    if stream is not None:
        if not _NO_SPACE.fullmatch(stream):
            raise BrokerRefused(f"stream {stream!r} cannot be named: it holds whitespace")
        fixed += f"{EXPECTED_STREAM}: {stream}\r\n".encode()
    return f"HPUB {subject} ".encode(), fixed


@functools.lru_cache(maxsize=1024)
def _header_name_ok(name: str) -> bool:
    return _HEADER_NAME.fullmatch(name) is not None


def _header_lines(headers: Mapping[str, str], flow_id: str) -> bytes:
    """The request's headers and ``Nats-Msg-Id`` as header lines; a value's CR/LF become spaces (as
    nats-py does), so no value can start a header or end the block."""
    lines = []
    for name, value in headers.items():
        if name in _OWN_HEADERS:
            continue
        if not _header_name_ok(name):
            raise BrokerRefused(f"header name {name!r} cannot be sent over NATS")
        value = value.strip()
        if "\r" in value or "\n" in value:
            value = value.translate(_LINE_BREAKS)
        lines.append(f"{name}: {value}\r\n")
    lines.append(f"{MSG_ID}: {_message_id(headers, flow_id)}\r\n\r\n")
    return "".join(lines).encode()


def _message_id(headers: Mapping[str, str], flow_id: str) -> str:
    """``Nats-Msg-Id``: the flow id; with its attempt for a publish that starts a run."""
    if headers.get(RUN_HEADER) == RUN_REPORT:
        return f"{flow_id}.{headers.get('tjobs-attempt', '')}"
    return flow_id
