"""The Redis Streams transport's pipelines, on a real Redis and on a fake one that stops answering or
drops the connection mid-pipeline: each attempt answered on its own, a cancelled attempt cancelled,
a connection no attempt waits for any more closed.

The broker-transport contract (``tests/contract/test_broker_transport_contract.py``) covers what
every broker transport shares; these cases are the transport's own promises: a refused ``XADD``
fails its own attempt and not the attempts sent alongside it, attempts to two streams of one server
in one loop turn both land, and an attempt cancelled while its ``XADD`` is written and unanswered
propagates its cancellation (redis-py must not turn it into a result) and leaves nothing counted as
waiting. On the fake: attempts that gave up on a silent server leave no connection waiting for an
answer (without a socket timeout a pipeline's read is bounded by its attempts alone; the pool would
otherwise run dry), and a connection dropped mid-pipeline fails its attempts at once and the next
ones connect again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest
import redis.asyncio

from tests.contract.broker_backends import SETTINGS, RedisStreamBackend, _target, give_up_once_written
from tests.contract.test_broker_transport_contract import signed_request
from tjobs.delivery.redis_stream_transport import MAX_CONNECTIONS, RedisStreamTransport
from tjobs.delivery.transport import Outcome
from tjobs.targets.model import RedisStreamTarget

pytestmark = pytest.mark.redis


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisStreamBackend]:
    built = RedisStreamBackend(redis_url)
    try:
        yield built
    finally:
        await built.aclose()


async def test_a_refused_xadd_fails_its_own_attempt_only(backend: RedisStreamBackend, redis_url: str) -> None:
    good = await backend.destination()
    not_a_stream = f"tjobs-test:{uuid.uuid4().hex[:12]}"
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        await client.set(not_a_stream, "a string, not a stream")
        assert isinstance(good.settings, RedisStreamTarget)
        wrong = replace(good, settings=replace(good.settings, stream=not_a_stream))
        requests = [signed_request(good), signed_request(wrong), signed_request(good)]
        results = await asyncio.gather(*(backend.transport.send(request) for request in requests))
    finally:
        await client.delete(not_a_stream)
        await client.aclose()
    assert [result.outcome for result in results] == [Outcome.DELIVERED, Outcome.PERMANENT, Outcome.DELIVERED]
    assert results[1].error is not None and "WRONGTYPE" in results[1].error
    received = await backend.received(good, 2, drain=True)
    assert sorted(message.message_id for message in received) == sorted([requests[0].flow_id, requests[2].flow_id])
    assert backend.transport.pending_publishes == 0


async def test_two_streams_of_one_server_in_one_turn_both_receive_theirs(backend: RedisStreamBackend) -> None:
    first, second = await backend.destination(), await backend.destination()
    requests = [signed_request(target) for target in (first, second) for _ in range(50)]
    results = await asyncio.gather(*(backend.transport.send(request) for request in requests))
    assert {result.outcome for result in results} == {Outcome.DELIVERED}
    for target, sent in ((first, requests[:50]), (second, requests[50:])):
        received = await backend.received(target, 50, drain=True)
        assert sorted(message.message_id for message in received) == sorted(request.flow_id for request in sent)


async def test_a_cancelled_attempt_leaves_nothing_waiting(backend: RedisStreamBackend) -> None:
    target = await backend.destination()
    assert (await backend.transport.send(signed_request(target))).outcome is Outcome.DELIVERED  # connected
    attempt = await give_up_once_written(backend, signed_request(target))  # queued or written, its answer not read yet
    assert attempt.cancelled()  # the cancellation propagates, not turned into a result
    assert backend.transport.pending_publishes == 0
    await backend.received(target, 0, drain=True)  # sent or not, the destination is emptied


# ---- a server that stops answering, or drops the connection mid-pipeline ------------------------------


class FakeRedis:
    """A loopback server speaking just enough RESP for the transport: ``INFO`` answered as Redis 7.0,
    any other command but ``XADD`` ``+OK``; each ``XADD`` answered with an entry id while
    :attr:`answering`, else left unanswered (``drop``: the connection closed once one arrives)."""

    def __init__(self) -> None:
        self.answering = True
        self.drop = False
        self.open = 0  # connections open now
        self.xadds = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            while True:
                command = await _read_command(reader)
                if command is None:
                    return
                name = command[0].upper()
                if name == b"INFO":
                    info = b"# Server\r\nredis_version:7.0.15\r\n"
                    writer.write(b"$%d\r\n%s\r\n" % (len(info), info))
                elif name == b"XADD":
                    self.xadds += 1
                    if self.drop:
                        return
                    if self.answering:
                        writer.write(b"$15\r\n1700000000000-%d\r\n" % (self.xadds % 10))
                else:
                    writer.write(b"+OK\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.open -= 1
            writer.close()


async def _read_command(reader: asyncio.StreamReader) -> list[bytes] | None:
    header = await reader.readline()
    if not header:
        return None
    assert header.startswith(b"*"), header
    parts = []
    for _ in range(int(header[1:])):
        length = int((await reader.readline())[1:])
        parts.append((await reader.readexactly(length + 2))[:-2])
    return parts


@pytest.fixture
async def fake() -> AsyncIterator[FakeRedis]:
    server = FakeRedis()
    try:
        yield server
    finally:
        await server.close()


async def _settle(condition: Callable[[], bool], seconds: float = 2.0) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition() and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110 (a fake's count)
        await asyncio.sleep(0.01)
    return bool(condition())


async def test_attempts_given_up_on_a_server_that_stopped_answering_leave_no_connection_waiting(
    fake: FakeRedis,
) -> None:
    """Without a socket timeout only the attempts' deadlines bound a read: once every attempt of a
    pipeline has given up, its connection is closed, so a silent server cannot use up the pool."""
    target = _target("fake", RedisStreamTarget(await fake.start(), "s"))
    transport = RedisStreamTransport(SETTINGS)
    try:
        assert (await transport.send(signed_request(target))).outcome is Outcome.DELIVERED  # connected
        fake.answering = False
        for _ in range(MAX_CONNECTIONS + 1):  # one pipeline each, more than the pool holds
            results = await asyncio.gather(*(transport.send(signed_request(target, timeout_ms=100)) for _ in range(3)))
            assert {result.outcome for result in results} == {Outcome.RETRYABLE}
        assert transport.pending_publishes == 0
        assert await _settle(lambda: fake.open == 0), f"{fake.open} connections still wait for an answer"
        fake.answering = True
        assert (await transport.send(signed_request(target, timeout_ms=2000))).outcome is Outcome.DELIVERED
    finally:
        await transport.close()


async def test_a_connection_dropped_mid_pipeline_fails_its_attempts_and_the_next_reconnect(fake: FakeRedis) -> None:
    target = _target("fake", RedisStreamTarget(await fake.start(), "s"))
    transport = RedisStreamTransport(SETTINGS)
    try:
        assert (await transport.send(signed_request(target))).outcome is Outcome.DELIVERED  # connected
        fake.drop = True  # closed once an XADD arrives, none answered
        results = await asyncio.gather(*(transport.send(signed_request(target, timeout_ms=5000)) for _ in range(20)))
        assert {result.outcome for result in results} == {Outcome.RETRYABLE}
        assert all(result.duration_s < 4 for result in results)  # failed with the connection, not at the deadline
        assert transport.pending_publishes == 0
        fake.drop = False
        results = await asyncio.gather(*(transport.send(signed_request(target)) for _ in range(20)))
        assert {result.outcome for result in results} == {Outcome.DELIVERED}
        assert transport.pending_publishes == 0
    finally:
        await transport.close()
