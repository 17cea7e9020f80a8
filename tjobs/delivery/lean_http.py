"""The lean HTTP/1.1 transport: asyncio protocols, the llhttp parser (``httptools``), a keep-alive pool.

:class:`LeanHttpTransport` keeps the :class:`tjobs.delivery.transport.Transport` contract with the
least work per attempt: the request is encoded straight to bytes (request line, ``Host``,
``User-Agent``, ``Content-Length``, the request's headers, the body) and written once on a pooled
connection; the answer is parsed by llhttp, which calls back only for what the result needs (the
status, the headers (``Retry-After``, ``Keep-Alive``, and the first few kept for the flow's page), the
first bytes of the body, the end of the message).

Where it connects (the SSRF guarantee): with a target policy, only to the :class:`Route`'s judged
addresses, in order, the next only if connecting to the previous one failed. A connection is opened
to an :class:`ipaddress` address object, never to a name, so nothing here resolves or re-parses the
host; the ``Host`` header is :attr:`CallbackUrl.host_header` and TLS sends and verifies
:attr:`CallbackUrl.tls_name` (SNI), or the address for an address URL. Only without a route (no
policy, or a policy answering ``None``, which the node's guard never does) does the transport resolve
a name itself, with the event loop's ``getaddrinfo``.

Connections are pooled per ``(scheme, address, port, TLS name)`` and reused while the receiver keeps
them alive (HTTP/1.1 keep-alive, no ``Connection: close``, the whole answer read). An idle connection
is closed after :data:`IDLE_S` (or the receiver's ``Keep-Alive: timeout`` less a second), before
receivers commonly close theirs, so an attempt rarely meets a connection the receiver is closing; one
the receiver closed while idle leaves the pool at once. A connection is never shared by two attempts.

Bounds: connecting (TCP and the TLS handshake) within ``connect_timeout_ms`` and the attempt's
deadline; the whole attempt within ``timeout_ms``; the answer's body is read up to ``max_body_bytes``
(beyond that the connection is dropped); chunked and read-until-close answers are parsed by llhttp.
Redirects are answers like any other (``3xx``: permanent). An HTTP proxy is not supported: the
aiohttp transport (:mod:`tjobs.delivery.http`, ``callbacks.transport = "aiohttp"``) stays for that.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
from collections.abc import Callable
from typing import cast

import httptools

from tjobs.clock import Clock, SystemClock
from tjobs.delivery.answers import received_raw_answer
from tjobs.delivery.retry import RETRY_AFTER_STATUSES, classify, parse_retry_after
from tjobs.delivery.transport import (
    ERROR_SNIPPET_BYTES,
    MAX_BODY_BYTES,
    AttemptResult,
    CallbackRequest,
    Route,
    TargetPolicy,
    TargetRejected,
    Transport,
    failure_error,
    judge_target,
    log_unexpected_error,
    status_error,
)
from tjobs.model import ANSWER_BODY_BYTES, ANSWER_HEADERS_KEPT, ReceivedAnswer
from tjobs.settings import CallbackSettings
from tjobs.targets.urls import CallbackUrl, IPAddress

logger = logging.getLogger(__name__)

IDLE_S = 4.0  # an idle pooled connection is closed after this (receivers commonly close theirs at 5 s)
MAX_IDLE_S = 60.0  # the most a receiver's ``Keep-Alive: timeout`` may extend it to
SWEEP_EVERY_S = 1.0
HEADS_MAX = 4096  # request heads kept, one per URL and method; emptied when full
# Headers the transport writes itself; one in the request would contradict them (validation refuses them).
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "user-agent"})

PoolKey = tuple[str, IPAddress, int, str | None]


class MalformedAnswer(ConnectionError):
    """The receiver's bytes are not an HTTP/1.1 answer (llhttp refused them)."""


class ClosedWithoutAnswer(ConnectionResetError):
    """The receiver closed the connection before its answer's status line."""


class _Exchange:
    """What one answer gave so far; completed (``done`` set) by the connection."""

    __slots__ = ("body_bytes", "done", "headers", "keep_alive", "retry_after", "sent_at", "snippet", "status")

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done
        self.sent_at: float | None = None  # loop time once the request was handed to the socket
        self.status: int | None = None
        self.retry_after: str | None = None
        self.headers: list[tuple[bytes, bytes]] = []  # the first ANSWER_HEADERS_KEPT, as they came
        self.snippet = b""  # the body's first ANSWER_BODY_BYTES
        self.body_bytes = 0
        self.keep_alive = False  # read whole and kept alive by the receiver: the connection may carry another


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: writes one request at a time and parses its answer with llhttp."""

    def __init__(self, key: PoolKey, max_body_bytes: int, on_lost: Callable[[_Connection], None]) -> None:
        self.key = key
        self.idle_since = 0.0
        self.keep_alive_s = IDLE_S
        self.closed = False
        self._max_body_bytes = max_body_bytes
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._exchange: _Exchange | None = None
        self._head_only = False

    # ---- used by the transport ------------------------------------------------------------------

    def start(self, payload: bytes, exchange: _Exchange, head_only: bool) -> None:
        """Write one request; its answer completes ``exchange``."""
        assert self._transport is not None
        self._exchange = exchange
        self._head_only = head_only
        self._transport.write(payload)

    def reusable(self) -> bool:
        exchange = self._exchange
        return not self.closed and exchange is not None and exchange.keep_alive and not self._head_only

    def release(self) -> None:
        """The attempt is over and the connection goes back to the pool."""
        self._exchange = None

    def abort(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    def time_out(self) -> None:
        """The attempt's deadline passed before its answer ended."""
        exchange = self._exchange
        if exchange is not None and not exchange.done.done():
            exchange.done.set_exception(TimeoutError())
            self.abort()

    # ---- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        exchange = self._exchange
        if exchange is None or exchange.done.done():  # nothing asked: a receiver out of step, not reused
            self.abort()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._end(reusable=False)
        except httptools.HttpParserError as error:
            self._fail(MalformedAnswer(f"malformed answer: {error}"))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self._exchange
        if exchange is None:
            self._on_lost(self)
            return
        if exchange.status is not None:  # the answer was cut short, or read until close: its status stands
            self._end(reusable=False)
        else:
            self._fail(exc if isinstance(exc, OSError) else ClosedWithoutAnswer("closed before an answer"))

    # ---- llhttp callbacks -----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        exchange = self._exchange
        assert exchange is not None
        if len(exchange.headers) < ANSWER_HEADERS_KEPT:
            exchange.headers.append((name, value))
        if len(name) == 11 and name.lower() == b"retry-after":
            exchange.retry_after = value.decode("latin-1")
        elif len(name) == 10 and name.lower() == b"keep-alive":
            self._read_keep_alive(value)

    def on_headers_complete(self) -> None:
        exchange = self._exchange
        assert exchange is not None
        exchange.status = self._parser.get_status_code()
        if self._head_only and exchange.status >= 200:
            self._end(reusable=False)

    def on_body(self, body: bytes) -> None:
        exchange = self._exchange
        assert exchange is not None
        if len(exchange.snippet) < ANSWER_BODY_BYTES:
            exchange.snippet += body[: ANSWER_BODY_BYTES - len(exchange.snippet)]
        exchange.body_bytes += len(body)
        if exchange.body_bytes > self._max_body_bytes:
            self._end(reusable=False)  # not worth reading: drop the connection instead of keeping it
            self.abort()

    def on_message_complete(self) -> None:
        exchange = self._exchange
        assert exchange is not None
        status = exchange.status
        if status is not None and status < 200 and status != 101:
            # an interim answer (100 Continue, 103 Early Hints): the final one follows
            exchange.status = None
            exchange.retry_after = None
            exchange.headers = []
            exchange.snippet = b""
            exchange.body_bytes = 0
            return
        # asked now: once this callback returns, llhttp's state is the next message's
        self._end(reusable=self._parser.should_keep_alive())

    # ---- helpers --------------------------------------------------------------------------------

    def _end(self, reusable: bool) -> None:
        """The answer is over (its status stands); ``reusable``: read whole, and the receiver keeps the
        connection alive."""
        exchange = self._exchange
        if exchange is not None and not exchange.done.done():
            exchange.keep_alive = reusable
            exchange.done.set_result(None)

    def _fail(self, error: BaseException) -> None:
        exchange = self._exchange
        if exchange is not None and not exchange.done.done():
            exchange.done.set_exception(error)
        self.abort()

    def _read_keep_alive(self, value: bytes) -> None:
        for part in value.split(b","):
            name, _, number = part.strip().partition(b"=")
            if name.lower() == b"timeout" and number.strip().isdigit():
                self.keep_alive_s = min(max(int(number) - 1.0, 0.0), MAX_IDLE_S)


class _Pool:
    """Idle keep-alive connections per :data:`PoolKey`, most recently used first; the expired ones are
    closed by a sweep every :data:`SWEEP_EVERY_S` while any connection is idle."""

    def __init__(self, max_idle: int) -> None:
        self.idle: dict[PoolKey, list[_Connection]] = {}
        self.count = 0
        self.closed = False
        self._max_idle = max_idle
        self._sweeper: asyncio.TimerHandle | None = None

    def take(self, key: PoolKey, now: float) -> _Connection | None:
        idle = self.idle.get(key)
        while idle:
            connection = idle.pop()
            self.count -= 1
            if not connection.closed and now - connection.idle_since < connection.keep_alive_s:
                return connection
            connection.abort()
        return None

    def put(self, connection: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        if self.closed or self.count >= self._max_idle:
            connection.abort()
            return
        connection.release()
        connection.idle_since = loop.time()
        idle = self.idle.get(connection.key)
        if idle is None:
            idle = self.idle[connection.key] = []
        idle.append(connection)
        self.count += 1
        if self._sweeper is None:
            self._sweeper = loop.call_later(SWEEP_EVERY_S, self._sweep, loop)

    def discard(self, connection: _Connection) -> None:
        """A connection closed while idle (by the receiver) leaves the pool."""
        idle = self.idle.get(connection.key)
        if idle is not None and connection in idle:
            idle.remove(connection)
            self.count -= 1

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._sweeper = None
        now = loop.time()
        for key, idle in list(self.idle.items()):
            keep: list[_Connection] = []
            for connection in idle:
                if not connection.closed and now - connection.idle_since < connection.keep_alive_s:
                    keep.append(connection)
                else:
                    connection.abort()
            self.count -= len(idle) - len(keep)
            if keep:
                self.idle[key] = keep
            else:
                del self.idle[key]
        if self.count:
            self._sweeper = loop.call_later(SWEEP_EVERY_S, self._sweep, loop)

    def close(self) -> None:
        self.closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self.idle.values():
            for connection in idle:
                connection.abort()
        self.idle.clear()
        self.count = 0


class LeanHttpTransport(Transport):
    """Sends callback attempts over pooled keep-alive HTTP/1.1 connections (see the module docstring)."""

    def __init__(
        self,
        settings: CallbackSettings,
        clock: Clock | None = None,
        policy: TargetPolicy | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        self._policy = policy
        self._max_body_bytes = max_body_bytes
        self._max_retry_after_ms = settings.max_retry_after_s * 1000
        self._connect_timeout_s = (settings.connect_timeout_ms or settings.timeout_ms) / 1000
        self._user_agent = settings.user_agent
        self._max_idle = settings.global_max_in_flight
        self._ssl = ssl_context
        self._pool = _Pool(self._max_idle)
        self._heads: dict[tuple[int, str], tuple[CallbackUrl, str]] = {}

    @property
    def idle_connections(self) -> int:
        """How many keep-alive connections wait in the pool now."""
        return self._pool.count

    async def close(self) -> None:
        self._pool.close()
        self._pool = _Pool(self._max_idle)

    async def send(self, request: CallbackRequest) -> AttemptResult:
        started_ms = self._clock.now_ms()
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + request.timeout_ms / 1000
        status: int | None = None
        error: str | None = None
        retry_after_ms: int | None = None
        failure: BaseException | None = None
        sent_ms: int | None = None
        answer: ReceivedAnswer | None = None
        try:
            url, addresses = await self._route(request, loop)
            payload = self._encode(request, url)
            exchange = await self._exchange(loop, url, addresses, payload, deadline, request.method)
            if exchange.sent_at is not None:
                sent_ms = started_ms + round((exchange.sent_at - started) * 1000)
            status = exchange.status
            assert status is not None
            if status in RETRY_AFTER_STATUSES and exchange.retry_after is not None:
                retry_after_ms = parse_retry_after(exchange.retry_after, self._clock.now_ms())
                if retry_after_ms is not None:
                    retry_after_ms = min(retry_after_ms, self._max_retry_after_ms)
            if not 200 <= status < 300:
                error = status_error(status, exchange.snippet[:ERROR_SNIPPET_BYTES])
            answer = received_raw_answer(exchange.headers, exchange.snippet, exchange.body_bytes)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = exc
            error = failure_error(exc, request.timeout_ms)
            if not isinstance(exc, OSError | TimeoutError | TargetRejected):
                log_unexpected_error(logger, request, error, exc)
        duration_s = loop.time() - started
        return request.result(
            classify(status, failure), status, error, retry_after_ms, started_ms, duration_s, sent_ms, answer
        )

    # ---- where to connect ---------------------------------------------------------------------------

    async def _route(
        self, request: CallbackRequest, loop: asyncio.AbstractEventLoop
    ) -> tuple[CallbackUrl, tuple[IPAddress, ...]]:
        judged = await judge_target(self._policy, request)
        if isinstance(judged, Route):
            return judged.url, judged.addresses
        url = judged
        if url.host.address is not None:
            return url, (url.host.address,)
        # No policy judged this name: resolve it here (the node's guard always hands a route).
        infos = await loop.getaddrinfo(url.host.bare_name, url.port, type=socket.SOCK_STREAM)
        found = dict.fromkeys(ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos)
        return url, tuple(found)

    # ---- the request as bytes ---------------------------------------------------------------------

    def _encode(self, request: CallbackRequest, url: CallbackUrl) -> bytes:
        body = request.body
        lines = [self._head(request.method, url)]
        if body is not None or request.method not in ("GET", "HEAD"):
            lines.append(f"Content-Length: {len(body) if body is not None else 0}")
        for name, value in request.headers.items():
            if name.lower() not in _OWN_HEADERS:
                lines.append(f"{name}: {value}")
        lines.append("\r\n")
        head = "\r\n".join(lines)
        # one line per header and no more: a CR or LF inside a name or value would start another
        breaks = len(lines) + 2  # the request line, Host and User-Agent share the first entry
        if head.count("\n") != breaks or head.count("\r") != breaks:
            raise ValueError("a header name or value contains a line break")
        encoded = head.encode("utf-8")
        return encoded + body if body else encoded

    def _head(self, method: str, url: CallbackUrl) -> str:
        """The request line, ``Host`` and ``User-Agent`` of ``method`` to ``url``: made once per URL (a
        parsed URL is one shared object while its text is cached: :func:`parse_callback_url`)."""
        key = (id(url), method)
        known = self._heads.get(key)
        if known is not None and known[0] is url:  # the entry holds the URL: its id is not reused
            return known[1]
        head = f"{method} {url.target} HTTP/1.1\r\nHost: {url.host_header}\r\nUser-Agent: {self._user_agent}"
        if len(self._heads) >= HEADS_MAX:
            self._heads.clear()
        self._heads[key] = (url, head)
        return head

    # ---- one exchange on a pooled or new connection -------------------------------------------------

    async def _exchange(
        self,
        loop: asyncio.AbstractEventLoop,
        url: CallbackUrl,
        addresses: tuple[IPAddress, ...],
        payload: bytes,
        deadline: float,
        method: str,
    ) -> _Exchange:
        pool = self._pool
        connection: _Connection | None = None
        now = loop.time()
        for address in addresses:  # a live connection to any judged address, preferring the first
            connection = pool.take((url.scheme, address, url.port, url.tls_name), now)
            if connection is not None:
                break
        if connection is None:
            connection = await self._connect(loop, url, addresses, deadline, pool)
        exchange = _Exchange(loop.create_future())
        timer = loop.call_at(deadline, connection.time_out)
        try:
            connection.start(payload, exchange, method == "HEAD")
            exchange.sent_at = loop.time()
            await exchange.done
        except BaseException:
            connection.abort()
            raise
        finally:
            timer.cancel()
        if connection.reusable():
            pool.put(connection, loop)
        else:
            connection.abort()
        return exchange

    async def _connect(
        self,
        loop: asyncio.AbstractEventLoop,
        url: CallbackUrl,
        addresses: tuple[IPAddress, ...],
        deadline: float,
        pool: _Pool,
    ) -> _Connection:
        """A new connection to the first judged address that accepts one (within the deadline)."""
        last = len(addresses) - 1
        for index, address in enumerate(addresses):
            connect_by = min(deadline, loop.time() + self._connect_timeout_s)
            try:
                async with asyncio.timeout_at(connect_by):
                    return await self._open(loop, url, address, pool)
            except (OSError, TimeoutError):
                # nothing was sent: the next judged address, if any and if time is left
                if index == last or loop.time() >= deadline:
                    raise
        raise AssertionError("unreachable: a route has at least one address")

    async def _open(
        self, loop: asyncio.AbstractEventLoop, url: CallbackUrl, address: IPAddress, pool: _Pool
    ) -> _Connection:
        # The host is an address: the event loop connects to it without a lookup (asyncio and uvloop
        # both take a numeric host as is). The loop owns the socket from the start, so a failed or
        # cancelled connect closes it exactly once.
        key: PoolKey = (url.scheme, address, url.port, url.tls_name)
        tls: ssl.SSLContext | None = None
        server_hostname: str | None = None
        if url.scheme == "https":
            tls = self._ssl or _default_tls()
            server_hostname = url.tls_name or url.host.name  # an address URL: verified against the address
        max_body = self._max_body_bytes
        _, connection = await loop.create_connection(
            lambda: _Connection(key, max_body, pool.discard),
            host=address.compressed,
            port=url.port,
            family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
            ssl=tls,
            server_hostname=server_hostname,
        )
        return connection


_tls_context: ssl.SSLContext | None = None


def _default_tls() -> ssl.SSLContext:
    """The system's trust store with hostname checking (one context, built on first use)."""
    global _tls_context
    if _tls_context is None:
        _tls_context = ssl.create_default_context()
    return _tls_context
