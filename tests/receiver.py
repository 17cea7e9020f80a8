"""A real HTTP callback receiver for tests: an aiohttp server on 127.0.0.1 with scriptable failures.

::

    async with Receiver() as receiver:
        receiver.script("/hook", Reply(500), Reply(503, retry_after="1"))   # then 200 for good
        receiver.script("/hook", Reply(500), flow_id="42-1000")             # only for that flow
        ... deliver to receiver.url("/hook") ...
        await receiver.wait_for(3, path="/hook")
        receiver.requests            # every request: path, method, headers, body, receive time

Replies are taken in order per ``(path, flow)`` script first (the flow is the ``webhook-id``
header), then per path; when a script is used up its ``then`` reply repeats (``200`` by default).
A reply can be slow (``delay_s``, which the sender's timeout turns into a timeout), reset the
connection without answering (``reset``), or carry any status, headers and body.

Run as a script (``python tests/receiver.py [reply_delay_ms]``) it serves in its own process for
benchmarks: it prints its port on the first stdout line, answers 204 to everything, serves
``GET /_records`` (JSON ``[[webhook-id, receive time in epoch ns], ...]``) and ``GET /_cpu`` (its CPU
seconds), and exits when stdin closes.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType

import orjson
from aiohttp import web


@dataclass(frozen=True)
class Reply:
    status: int = 200
    retry_after: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay_s: float = 0.0
    reset: bool = False  # close the connection without any response


OK = Reply(200)


@dataclass(frozen=True)
class Received:
    path: str
    method: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    received_at_ns: int  # wall clock, epoch ns
    received_mono_s: float  # monotonic clock, for gaps between requests

    @property
    def flow_id(self) -> str:
        return self.headers.get("webhook-id", "")

    @property
    def attempt(self) -> int:
        return int(self.headers.get("tjobs-attempt", "0"))


@dataclass
class _Script:
    replies: deque[Reply]
    then: Reply


class Receiver:
    def __init__(self, default: Reply = OK) -> None:
        self.default = default
        self.requests: list[Received] = []
        self._scripts: dict[tuple[str, str | None], _Script] = {}
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = _listening_socket()
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Receiver:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # ---- scripting and inspection -------------------------------------------------------------

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, *replies: Reply, then: Reply | None = None, flow_id: str | None = None) -> None:
        """Answer requests to ``path`` (of ``flow_id``, or any flow) with ``replies``, then ``then``."""
        self._scripts[(path, flow_id)] = _Script(deque(replies), then or self.default)

    def for_path(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    def for_flow(self, flow_id: str) -> list[Received]:
        return [r for r in self.requests if r.flow_id == flow_id]

    async def wait_for(self, count: int, path: str | None = None, timeout_s: float = 10.0) -> list[Received]:
        """Wait until ``count`` requests (to ``path``, if given) arrived; return them."""

        def matching() -> list[Received]:
            return self.requests if path is None else self.for_path(path)

        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: len(matching()) >= count)
        return matching()

    def _reply_for(self, path: str, flow_id: str) -> Reply:
        script = self._scripts.get((path, flow_id)) or self._scripts.get((path, None))
        if script is None:
            return self.default
        return script.replies.popleft() if script.replies else script.then

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        received = Received(
            request.path,
            request.method,
            {k.lower(): v for k, v in request.headers.items()},
            body,
            time.time_ns(),
            time.monotonic(),
        )
        reply = self._reply_for(received.path, received.flow_id)
        self.requests.append(received)
        async with self._arrived:
            self._arrived.notify_all()
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.reset:
            transport = request.transport
            if transport is not None:
                sock = transport.get_extra_info("socket")
                if sock is not None:  # RST instead of FIN: linger on, timeout 0
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                transport.abort()
            raise asyncio.CancelledError
        headers = dict(reply.headers)
        if reply.retry_after is not None:
            headers["Retry-After"] = reply.retry_after
        return web.Response(status=reply.status, headers=headers, body=reply.body)


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then released): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# ---- separate-process mode for benchmarks ---------------------------------------------------------


async def _serve_forever(delay_s: float) -> None:
    records: list[tuple[str, int]] = []

    async def record(request: web.Request) -> web.Response:
        await request.read()
        records.append((request.headers.get("webhook-id", ""), time.time_ns()))
        if delay_s:
            await asyncio.sleep(delay_s)
        return web.Response(status=204)

    async def dump(request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(records), content_type="application/json")

    async def cpu(request: web.Request) -> web.Response:
        body = orjson.dumps({"cpu_s": time.process_time()})
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/_records", dump)
    app.router.add_get("/_cpu", cpu)
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    sock = _listening_socket()
    await web.SockSite(runner, sock, backlog=1024).start()
    print(sock.getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    await runner.cleanup()


if __name__ == "__main__":
    reply_delay_s = float(sys.argv[1]) / 1000 if len(sys.argv) > 1 else 0.0  # optional: reply delay in ms
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve_forever(reply_delay_s))
    else:
        uvloop.run(_serve_forever(reply_delay_s))
