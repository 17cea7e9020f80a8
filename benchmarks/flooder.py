"""An open-loop HTTP/1.1 flooder that costs its host little: one GET, pre-encoded, pipelined over a few
keep-alive connections.

A misbehaving client sends on its own schedule whatever the server answers, over a bounded number of
connections. :func:`flood` does that: every ``tick_s`` it writes every request due by then (``rate``
per second from the start) to its connections in turn, without waiting for earlier answers (HTTP/1.1
pipelining: the server answers a connection's requests in order). It parses only what it must to count
answers: the status line and ``content-length`` of each response, whose body it skips. A connection
holding ``max_in_flight`` unanswered requests gets no more; a request due then is counted in
``not_sent`` instead (the offer the server's slowness refused, reported rather than hidden). A
connection the server closes is reopened at the next tick; its unanswered requests count as ``lost``.

Its own CPU (``client_cpu_s``) is reported with the counts, so a bench can show the flood was offered
at a cost that leaves the machine's cores to the server.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class FloodResult:
    offered: int  # requests due over the duration
    sent: int
    not_sent: int  # due while every connection held max_in_flight unanswered requests
    statuses: dict[str, int] = field(default_factory=dict)  # answers by status code; "lost", "unanswered"
    sent_per_s: float = 0.0
    answered_per_s: float = 0.0
    answer_p50_ms: float = float("nan")  # from each request's due instant to its answer's last byte
    answer_p99_ms: float = float("nan")
    connections_opened: int = 0
    client_cpu_s: float = 0.0


class _Connection(asyncio.Protocol):
    """One keep-alive connection: counts each response's status and skips its body."""

    def __init__(self, statuses: Counter[str], latencies_ms: list[float], clock: asyncio.AbstractEventLoop) -> None:
        self.transport: asyncio.Transport | None = None
        self.due: deque[float] = deque()  # due instants of the unanswered requests, oldest first
        self._statuses = statuses
        self._latencies_ms = latencies_ms
        self._clock = clock
        self._buffer = bytearray()
        self._body_left = 0
        self._status = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._statuses["lost"] += len(self.due)
        self.due.clear()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        position = 0
        while True:
            if self._body_left:
                taken = min(self._body_left, len(buffer) - position)
                self._body_left -= taken
                position += taken
                if self._body_left:
                    break
                self._answered()
                continue
            head_end = buffer.find(b"\r\n\r\n", position)
            if head_end < 0:
                break
            head = bytes(buffer[position:head_end]).lower()
            self._status = head[9:12]
            position = head_end + 4
            length_at = head.find(b"\r\ncontent-length:")
            if length_at < 0:  # every answer this bench floods carries a length; anything else ends the count
                raise RuntimeError(f"response without content-length: {head[:200]!r}")
            line_end = head.find(b"\r\n", length_at + 2)
            self._body_left = int(head[length_at + 17 : line_end if line_end >= 0 else len(head)])
            if not self._body_left:
                self._answered()
        del buffer[:position]

    def _answered(self) -> None:
        self._statuses[self._status.decode()] += 1
        self._latencies_ms.append((self._clock.time() - self.due.popleft()) * 1000)


async def flood(
    url: str,
    headers: dict[str, str],
    rate: float,
    duration_s: float,
    *,
    connections: int = 4,
    max_in_flight: int = 256,
    tick_s: float = 0.002,
    drain_s: float = 5.0,
) -> FloodResult:
    """GET ``url`` at ``rate`` per second for ``duration_s`` over ``connections`` pipelined connections;
    wait up to ``drain_s`` for the last answers."""
    loop = asyncio.get_running_loop()
    cpu0 = time.process_time()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        + "\r\n"
    ).encode("latin-1")
    statuses: Counter[str] = Counter()
    latencies_ms: list[float] = []
    pool: list[_Connection] = []
    opened = 0

    async def open_one() -> _Connection:
        nonlocal opened
        _, protocol = await loop.create_connection(lambda: _Connection(statuses, latencies_ms, loop), host, port)
        opened += 1
        return protocol

    for _ in range(connections):
        pool.append(await open_one())
    offered = round(rate * duration_s)
    sent = not_sent = 0
    start = loop.time()
    due_index = 0
    turn = 0
    while due_index < offered:
        now = loop.time()
        due_now = min(offered, int((now - start) * rate) + 1)
        for slot, connection in enumerate(pool):
            if connection.transport is None or connection.transport.is_closing():
                pool[slot] = await open_one()
        batches: dict[int, int] = {}
        for index in range(due_index, due_now):
            for _ in range(connections):  # the next connection with room, in turn
                slot = turn % connections
                turn += 1
                if len(pool[slot].due) < max_in_flight:
                    pool[slot].due.append(start + index / rate)
                    batches[slot] = batches.get(slot, 0) + 1
                    break
            else:
                not_sent += 1
        due_index = due_now
        for slot, count in batches.items():
            transport = pool[slot].transport
            assert transport is not None
            transport.write(request * count)
            sent += count
        await asyncio.sleep(max(0.0, start + due_index / rate - loop.time(), tick_s))
    sending_s = loop.time() - start
    for _ in range(round(drain_s / 0.01)):  # the last answers, polled: the connections have no event for it
        if not any(connection.due for connection in pool):
            break
        await asyncio.sleep(0.01)
    answered_s = loop.time() - start
    for connection in pool:
        statuses["unanswered"] += len(connection.due)
        if connection.transport is not None:
            connection.transport.close()
    ordered = sorted(latencies_ms)
    return FloodResult(
        offered=offered,
        sent=sent,
        not_sent=not_sent,
        statuses=dict(+statuses),  # zero counts dropped
        sent_per_s=round(sent / sending_s, 1),
        answered_per_s=round(len(latencies_ms) / answered_s, 1),
        answer_p50_ms=round(ordered[len(ordered) // 2], 2) if ordered else float("nan"),
        answer_p99_ms=round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2) if ordered else float("nan"),
        connections_opened=opened,
        client_cpu_s=round(time.process_time() - cpu0, 3),
    )
