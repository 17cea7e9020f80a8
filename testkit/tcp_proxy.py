"""A TCP proxy on loopback whose forwarding a test controls per client process: real partitions without
network namespaces.

Every node points at the proxy instead of the server; the proxy tells the nodes apart by the process
owning each accepted connection's client socket (``/proc``), and forwards per client as the test says:

* ``pass``: both ways, as a wire would;
* ``blackhole``: accepts, forwards nothing either way and holds what it read (the peer sees a silent
  link, as a cut network path with TCP retransmitting); back to ``pass`` the held bytes flow on, as TCP
  would deliver them once the path heals;
* ``drop``: resets (RST) every connection of that client, and each new one at once.

It runs on an event loop in a thread of its own, so a busy test loop never stalls the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["pass", "blackhole", "drop"]
ANYONE = "*"
CHUNK = 65536


def socket_owner(client_port: int, server_port: int, pids: list[int]) -> int | None:
    """Which of ``pids`` owns the loopback TCP socket ``127.0.0.1:client_port -> :server_port``."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                cols = row.split()
                local, remote = cols[1], cols[2]
                if int(local.rsplit(":", 1)[1], 16) == client_port and int(remote.rsplit(":", 1)[1], 16) == server_port:
                    inode = cols[9]
                    break
        if inode is not None:
            break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return pid
    return None


@dataclass
class _Link:
    client: str
    writers: list[asyncio.StreamWriter] = field(default_factory=list)


class TcpProxy:
    """``TcpProxy(upstream_port)`` listens on ``127.0.0.1:<port>``; ``clients`` names processes by pid
    (``proxy.clients[pid] = "node2"``); a connection of any other process is client ``"*"``."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.clients: dict[int, str] = {}
        self.port = 0
        self.accepted: dict[str, int] = {}
        self._modes: dict[str, Mode] = {}
        self._open: dict[str, asyncio.Event] = {}
        self._links: list[_Link] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # made by start()
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    # ---- control (from any thread) ----------------------------------------------------------------

    def start(self) -> TcpProxy:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="tcp-proxy", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), loop).result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
            for link in list(self._links):
                for writer in link.writers:
                    writer.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_mode(self, mode: Mode, client: str = ANYONE) -> None:
        """Forward ``client``'s connections (open ones included) as ``mode`` says, from now on."""
        assert self._loop is not None, "start() the proxy first"
        asyncio.run_coroutine_threadsafe(self._set(client, mode), self._loop).result(10)

    def mode(self, client: str) -> Mode:
        return self._modes.get(client, "pass")

    # ---- the loop's side --------------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def _gate(self, client: str) -> asyncio.Event:
        gate = self._open.get(client)
        if gate is None:
            gate = self._open[client] = asyncio.Event()
            if self.mode(client) == "pass":
                gate.set()
        return gate

    async def _set(self, client: str, mode: Mode) -> None:
        self._modes[client] = mode
        gate = self._gate(client)
        if mode == "pass":
            gate.set()
        else:
            gate.clear()
        if mode == "drop":
            for link in [link for link in self._links if link.client == client]:
                self._reset(link)

    def _reset(self, link: _Link) -> None:
        for writer in link.writers:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        with contextlib.suppress(ValueError):
            self._links.remove(link)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_port = writer.get_extra_info("peername")[1]
        owner = await asyncio.to_thread(socket_owner, peer_port, self.port, list(self.clients))
        client = self.clients.get(owner, ANYONE) if owner is not None else ANYONE
        self.accepted[client] = self.accepted.get(client, 0) + 1
        link = _Link(client, [writer])
        self._links.append(link)
        if self.mode(client) == "drop":
            self._reset(link)
            return
        try:
            await self._gate(client).wait()  # blackholed: accepted, never forwarded (not even connected)
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except (OSError, asyncio.CancelledError):
            self._reset(link)
            return
        link.writers.append(up_writer)
        await asyncio.gather(self._pipe(link, reader, up_writer), self._pipe(link, up_reader, writer))
        with contextlib.suppress(ValueError):
            self._links.remove(link)

    async def _pipe(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(CHUNK):
                await self._gate(link.client).wait()  # blackholed: held until the path heals
                if link not in self._links:
                    return
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for other in link.writers:
                other.close()


def proxy_url(url: str, proxy: TcpProxy) -> str:
    """``url`` (``scheme://user@host:port/...``) with its port swapped for the proxy's."""
    head, _, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    host_port = authority.rsplit("@", 1)
    userinfo = host_port[0] + "@" if len(host_port) == 2 else ""
    host = host_port[-1].rsplit(":", 1)[0]
    return f"{head}://{userinfo}{host}:{proxy.port}{slash}{path}"
