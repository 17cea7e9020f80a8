"""An idle client connection outlives the clients' own idle expiry, so no request meets a closing one.

A client reuses a kept-alive connection until its own idle expiry (httpx: 5 s; a load balancer in front
of the nodes: typically 60 s). A node that closed idle connections after 5 s (uvicorn's default) raced
every such client: a request sent at the instant the node closed the connection met a reset, and a
POST that meets a reset cannot be told from one that was lost (a clean-clone run's cluster test failed
on exactly that, ``httpx.ReadError`` creating a task). The node keeps idle connections longer than
those expiries (:data:`tjobs.api.server.KEEP_ALIVE_S`)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from testkit import run_node
from tjobs.api.server import KEEP_ALIVE_S
from tjobs.settings import load_settings

HTTPX_IDLE_EXPIRY_S = 5.0
A_LOAD_BALANCERS_IDLE_TIMEOUT_S = 60.0

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n"


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    return head.split(b"\r\n")[0]


def test_idle_connections_are_kept_longer_than_a_balancers_idle_timeout() -> None:
    assert KEEP_ALIVE_S > A_LOAD_BALANCERS_IDLE_TIMEOUT_S


@pytest.mark.slow  # waits past httpx's idle expiry
async def test_a_connection_idle_past_the_clients_expiry_still_answers() -> None:
    settings = load_settings(None, storage={"urls": ["memory://"], "topology": "1x1x1"})
    async with run_node(settings) as node:
        address = urlsplit(node.base_url)
        reader, writer = await asyncio.open_connection(address.hostname, address.port)
        try:
            writer.write(REQUEST)
            assert await _answer(reader) == b"HTTP/1.1 200 OK"
            await asyncio.sleep(HTTPX_IDLE_EXPIRY_S + 1)  # the client would reuse the connection until now
            writer.write(REQUEST)
            assert await _answer(reader) == b"HTTP/1.1 200 OK"  # the old 5-s keep-alive had closed it
        finally:
            writer.close()
            await writer.wait_closed()
