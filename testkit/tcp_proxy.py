"""A TCP proxy on loopback whose forwarding a test controls per client process: real partitions without
network namespaces.

Every node points at the proxy instead of the server; the proxy tells the nodes apart by the process
owning each accepted connection's client socket (the kernel's sock_diag gives the socket's inode, the
named processes' ``/proc/<pid>/fd`` the owner), and forwards per client as the test says:

* ``pass``: both ways, as a wire would;
* ``blackhole``: accepts, forwards nothing either way and holds what it read (the peer sees a silent
  link, as a cut network path with TCP retransmitting); back to ``pass`` the held bytes flow on, as TCP
  would deliver them once the path heals;
* ``drop``: resets (RST) every connection of that client, and each new one at once.

It runs on an event loop in a thread of its own, so a busy test loop never stalls the wire;
:class:`ProxyProcess` runs it in a process of its own, so its work never holds the test's GIL either.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

Mode = Literal["pass", "blackhole", "drop"]
ANYONE = "*"
CHUNK = 65536


NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
_NO_COOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
_LOOPBACK = socket.inet_aton("127.0.0.1") + bytes(12)


def socket_inode(client_port: int, server_port: int) -> int | None:
    """The inode of the loopback TCP socket ``127.0.0.1:client_port -> 127.0.0.1:server_port``, asked of
    the kernel for that one socket (sock_diag over netlink, ~30 us) rather than found in ``/proc/net/tcp``,
    which lists every socket of the machine (the soak leaves ~10k in TIME_WAIT: milliseconds a read).
    ``None``: no such socket, or no sock_diag here."""
    sockid = struct.pack("!HH", client_port, server_port) + _LOOPBACK + _LOOPBACK
    sockid += struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    request = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, _ALL_STATES) + sockid
    header = struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as link:
            link.send(header + request)
            reply = link.recv(8192)
    except OSError:
        return None
    if len(reply) < 16 + 72 or struct.unpack_from("=H", reply, 4)[0] != SOCK_DIAG_BY_FAMILY:
        return None  # NLMSG_ERROR: no such socket
    inode: int = struct.unpack_from("=I", reply, 16 + 4 + 48 + 16)[0]  # inet_diag_msg.idiag_inode
    return inode


def _inode_from_tables(client_port: int, server_port: int) -> int | None:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            next(rows, None)
            for row in rows:
                cols = row.split()
                local, remote = cols[1], cols[2]
                if int(local.rsplit(":", 1)[1], 16) == client_port and int(remote.rsplit(":", 1)[1], 16) == server_port:
                    return int(cols[9])
    return None


def socket_owner(client_port: int, server_port: int, pids: list[int]) -> int | None:
    """Which of ``pids`` owns the loopback TCP socket ``127.0.0.1:client_port -> :server_port``."""
    inode = socket_inode(client_port, server_port)
    if inode is None:  # no sock_diag (or an IPv6 client): the tables
        inode = _inode_from_tables(client_port, server_port)
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


@dataclass(eq=False)  # one link is itself only: _pipe's `link in self._links` is per chunk
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

    def set_clients(self, clients: Mapping[int, str]) -> None:
        """Name the client processes (pid -> name), all of them at once."""
        self.clients = dict(clients)

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


def proxy_url(url: str, proxy: TcpProxy | ProxyProcess) -> str:
    """``url`` (``scheme://user@host:port/...``) with its port swapped for the proxy's."""
    head, _, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    host_port = authority.rsplit("@", 1)
    userinfo = host_port[0] + "@" if len(host_port) == 2 else ""
    host = host_port[-1].rsplit(":", 1)[0]
    return f"{head}://{userinfo}{host}:{proxy.port}{slash}{path}"


class ProxyProcess:
    """A :class:`TcpProxy` in a process of its own (``python -m testkit.tcp_proxy UPSTREAM_PORT``), so
    that its pumping and owner lookups never hold this process's GIL: the soak's driver receives every
    callback and makes every create on its loop. Controlled over the child's stdin and stdout, one JSON
    line a call and its answer; the same forwarding, as the proxy's own code runs it. The child ends
    when its stdin closes (this process ending, killed or not, leaves no proxy behind)."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.clients: dict[int, str] = {}  # as sent with set_clients
        self._modes: dict[str, Mode] = {}
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> ProxyProcess:
        command = [sys.executable, "-m", "testkit.tcp_proxy", str(self.upstream[1]), self.upstream[0]]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # this checkout's testkit, from anywhere
        )
        self.port = int(self._call(None))
        return self

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        finally:
            if process.stdout is not None:
                process.stdout.close()

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, request: list[Any] | None) -> Any:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None, "start() first"
        with self._lock:
            if request is not None:
                process.stdin.write(json.dumps(request) + "\n")
                process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the proxy process ended (exit code {process.poll()})")
        return json.loads(line)

    def set_clients(self, clients: Mapping[int, str]) -> None:
        """Name the client processes (pid -> name), all of them at once."""
        self.clients = dict(clients)
        self._call(["clients", {str(pid): name for pid, name in self.clients.items()}])

    def set_mode(self, mode: Mode, client: str = ANYONE) -> None:
        """As :meth:`TcpProxy.set_mode`: in force when this returns."""
        self._call(["mode", client, mode])
        self._modes[client] = mode

    def mode(self, client: str) -> Mode:
        return self._modes.get(client, "pass")

    @property
    def accepted(self) -> dict[str, int]:
        accepted: dict[str, int] = self._call(["accepted"])
        return accepted


def serve(upstream_port: int, upstream_host: str, commands: TextIO, answers: TextIO) -> None:
    """The proxy process: a :class:`TcpProxy` told what to do by ``commands`` (:class:`ProxyProcess`)."""
    with TcpProxy(upstream_port, upstream_host) as proxy:
        answers.write(f"{proxy.port}\n")
        answers.flush()
        for line in commands:
            request = json.loads(line)
            answer: Any = True
            if request[0] == "clients":
                proxy.set_clients({int(pid): name for pid, name in request[1].items()})
            elif request[0] == "mode":
                proxy.set_mode(request[2], request[1])
            elif request[0] == "accepted":
                answer = dict(proxy.accepted)
            answers.write(json.dumps(answer) + "\n")
            answers.flush()


if __name__ == "__main__":
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # a terminal's Ctrl-C is the driver's to handle; stdin's end stops this
    serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1", sys.stdin, sys.stdout)
