"""The tests' TCP proxy (testkit/tcp_proxy.py): per-client pass, blackhole and drop on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import AsyncIterator, Iterator

import pytest

from testkit import tcp_proxy
from testkit.tcp_proxy import ProxyProcess, TcpProxy, proxy_url, socket_inode, socket_owner


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
        # A new connection is accepted and reset at once: on a loaded box the reset can come before the
        # client's connect completes (open_connection raises ECONNRESET), else at its first read
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            await roundtrip(reader, writer, b"z", 2)


def test_proxy_url_swaps_only_the_port() -> None:
    proxy = TcpProxy(1)
    proxy.port = 4321
    assert proxy_url("mysql+asyncmy://root@127.0.0.1:3308/x?a=1", proxy) == "mysql+asyncmy://root@127.0.0.1:4321/x?a=1"
    assert proxy_url("http://127.0.0.1:2379", proxy) == "http://127.0.0.1:4321"


@pytest.fixture
def loopback_pair() -> Iterator[tuple[socket.socket, int]]:
    """A connected loopback client socket and the port of the server it is connected to."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        yield client, server.getsockname()[1]
        accepted.close()
        client.close()


def test_socket_inode_finds_a_loopback_client_socket_by_its_two_ports(loopback_pair: tuple[socket.socket, int]) -> None:
    client, server_port = loopback_pair
    assert socket_inode(client.getsockname()[1], server_port) == os.fstat(client.fileno()).st_ino
    assert socket_inode(client.getsockname()[1], server_port + 1 if server_port < 65535 else 1) is None


def test_the_owner_of_a_connection_is_found_without_reading_the_whole_tcp_table(
    loopback_pair: tuple[socket.socket, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading /proc/net/tcp costs milliseconds once the machine holds thousands of sockets (the soak's
    callbacks leave ~10k in TIME_WAIT), and the proxy looks an owner up for every connection it accepts."""

    def no_table(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"read {args[0]}")

    monkeypatch.setattr(tcp_proxy, "open", no_table, raising=False)
    client, server_port = loopback_pair
    assert socket_owner(client.getsockname()[1], server_port, [os.getpid()]) == os.getpid()


async def test_a_proxy_process_passes_blackholes_and_drops_a_named_client(echo_port: int) -> None:
    with ProxyProcess(echo_port) as proxy:
        assert proxy.pid != os.getpid()
        proxy.set_clients({os.getpid(): "me"})
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await roundtrip(reader, writer, b"ping", 2) == b"ping"
        assert proxy.accepted == {"me": 1}
        proxy.set_mode("blackhole", "someone else")
        assert await roundtrip(reader, writer, b"ok", 2) == b"ok"
        proxy.set_mode("blackhole", "me")
        with pytest.raises(TimeoutError):
            await roundtrip(reader, writer, b"held", 0.3)
        proxy.set_mode("pass", "me")
        assert await asyncio.wait_for(reader.readexactly(4), 2) == b"held"
        proxy.set_mode("drop", "me")
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(reader, writer, b"y", 2)
        # A new connection is accepted and reset at once: on a loaded box the reset can come before the
        # client's connect completes (open_connection raises ECONNRESET), else at its first read
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            await roundtrip(reader, writer, b"z", 2)
        assert proxy.accepted == {"me": 2}
    assert proxy.pid is None


def test_a_proxy_process_that_ended_fails_the_call_rather_than_hanging() -> None:
    """The soak's heal() relies on it: a proxy that is gone cuts no one, and its end must not stop the
    soak from stopping its nodes."""
    proxy = ProxyProcess(1).start()
    assert proxy.pid is not None
    os.kill(proxy.pid, signal.SIGKILL)
    os.waitpid(proxy.pid, 0)
    with pytest.raises((RuntimeError, OSError)):
        proxy.set_mode("pass", "node2")
    proxy.stop()
