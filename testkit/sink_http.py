"""The bench sink's lean HTTP/1.1 server: asyncio protocols and llhttp (``httptools``), no framework.

At thousands of callbacks a second the sink shares the box's two cores with the node under test and
MariaDB; with aiohttp's server it spent 77-82 µs of CPU per callback, this one 29-33 µs
(docs/benchmarks.md, "The bench sink's CPU per callback"). This server answers the same routes as
:meth:`CallbackRecorder.app` — any method on ``/cb`` and ``/cb/…`` records the callback and answers
``204``; ``GET /_stats`` and ``GET /_records`` — with keep-alive, pipelined requests, ``Connection:
close`` and a ``400`` for what llhttp cannot parse (a refused connection is read and dropped for
``LINGER_S`` before it closes, so the answer is not lost to a reset). It is a test receiver, not a
general server: request bodies are read whole (1 MiB at most, as the aiohttp one) and nothing else is
served.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol, cast

import httptools
import orjson

MAX_BODY_BYTES = 1024 * 1024
_NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
_TOO_LARGE = b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_CALLBACK_PATH = b"/cb"
LINGER_S = 1.0  # a refused connection is read (and dropped) this long before it is closed


class _Records(Protocol):
    def to_bytes(self) -> bytes: ...


class CallbackRecorder(Protocol):
    """What this server records through: :class:`testkit.sink.CallbackRecorder` (which imports this module,
    so the server names only what it calls)."""

    @property
    def records(self) -> _Records: ...

    def record(self, recv_us: int, headers: Mapping[str, str]) -> bool: ...

    def check_signature(self, headers: Mapping[str, str], body: bytes) -> None: ...

    def current_stats(self) -> object: ...


def _answer(content_type: bytes, body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (content_type, len(body))
    return head + body


class SinkConnection(asyncio.Protocol):
    """One client connection: parse requests as they arrive and answer each in order."""

    def __init__(self, recorder: CallbackRecorder) -> None:
        self._recorder = recorder
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._refused = False  # a 400 or 413 was answered: the connection is lingering to its close

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # what a refused client still sends is read and dropped until the lingering close
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # only HTTP/1.1 is spoken here
            self._refuse(_BAD_REQUEST)

    # ---- llhttp's callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > MAX_BODY_BYTES:
            self._refuse(_TOO_LARGE)
            raise httptools.HttpParserError("body over the cap")
        self._body.append(body)

    def on_message_complete(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self._refused:
            return
        path = self._url.split(b"?", 1)[0]
        if path == _CALLBACK_PATH or path.startswith(_CALLBACK_PATH + b"/"):
            recorder = self._recorder
            if recorder.record(time.time_ns() // 1000, self._headers):
                recorder.check_signature(self._headers, b"".join(self._body))
            answer = _NO_CONTENT
        elif path == b"/_stats" and self._parser.get_method() == b"GET":
            answer = _answer(b"application/json", orjson.dumps(self._recorder.current_stats().__dict__))
        elif path == b"/_records" and self._parser.get_method() == b"GET":
            answer = _answer(b"application/octet-stream", self._recorder.records.to_bytes())
        else:
            answer = _NOT_FOUND
        transport.write(answer)
        if not self._parser.should_keep_alive():
            transport.close()

    def _refuse(self, answer: bytes) -> None:
        """Answer, end this side, and go on reading (and dropping) for ``LINGER_S`` before closing:
        closing with the client's data unread resets the connection, which can lose the answer."""
        transport = self._transport
        if self._refused or transport is None or transport.is_closing():
            return
        self._refused = True
        transport.write(answer)
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_S, transport.close)


async def serve(recorder: CallbackRecorder, host: str, port: int) -> asyncio.Server:
    """Listen on ``host:port`` (0: any free port) and record into ``recorder``."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: SinkConnection(recorder), host, port, backlog=1024)
