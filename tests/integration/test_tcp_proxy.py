"""The tests' TCP proxy (testkit/tcp_proxy.py): per-client pass, blackhole and drop on loopback."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

from testkit.tcp_proxy import TcpProxy, proxy_url


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, timeout_s: float) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), timeout_s)


async def test_pass_forwards_and_names_the_client_process(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy:
        proxy.clients[os.getpid()] = "me"
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await roundtrip(reader, writer, b"ping", 2) == b"ping"
        assert proxy.accepted == {"me": 1}
        writer.close()


async def test_a_blackhole_holds_the_bytes_until_the_path_heals(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy:
        proxy.clients[os.getpid()] = "me"
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await roundtrip(reader, writer, b"a", 2) == b"a"
        proxy.set_mode("blackhole", "me")
        with pytest.raises(TimeoutError):
            await roundtrip(reader, writer, b"held", 0.3)
        fresh_reader, fresh_writer = await asyncio.open_connection("127.0.0.1", proxy.port)  # accepted
        with pytest.raises(TimeoutError):
            await roundtrip(fresh_reader, fresh_writer, b"new", 0.3)
        proxy.set_mode("pass", "me")
        assert await asyncio.wait_for(reader.readexactly(4), 2) == b"held"
        assert await asyncio.wait_for(fresh_reader.readexactly(3), 2) == b"new"
        writer.close()
        fresh_writer.close()


async def test_a_blackhole_of_another_client_does_not_touch_this_one(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy:
        proxy.set_mode("blackhole", "someone else")
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await roundtrip(reader, writer, b"ok", 2) == b"ok"
        writer.close()


async def test_drop_resets_open_and_new_connections(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await roundtrip(reader, writer, b"x", 2) == b"x"
        proxy.set_mode("drop")
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(reader, writer, b"y", 2)
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(reader, writer, b"z", 2)


def test_proxy_url_swaps_only_the_port() -> None:
    proxy = TcpProxy(1)
    proxy.port = 4321
    assert proxy_url("mysql+asyncmy://root@127.0.0.1:3308/x?a=1", proxy) == "mysql+asyncmy://root@127.0.0.1:4321/x?a=1"
    assert proxy_url("http://127.0.0.1:2379", proxy) == "http://127.0.0.1:4321"
