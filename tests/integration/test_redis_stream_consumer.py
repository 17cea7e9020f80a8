"""The test rigs' Redis Streams consumer (:class:`testkit.consumers.RedisStreamConsumer`) stops when asked,
even when redis-py swallows the cancellation.

redis-py (8.1) writes each command within ``asyncio.wait_for`` when the connection has a socket
timeout (its default: 5 s), and Python 3.11's ``wait_for`` returns the inner write's result when
the cancellation comes as that write finishes (CPython gh-86296): the reader's ``XREAD`` loop then
went on forever, and ``stop()`` awaited it forever. That is how the broker-restart e2e case for
``redis_stream`` hung at its 300-s limit with every flow delivered (issue 26 item 2): the consumer's
``stop()`` after the last read. Here the cancellation is placed in that window on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import pytest
import redis.asyncio.connection

from testkit.consumers import Consumed, RedisStreamConsumer

pytestmark = pytest.mark.redis


async def test_stop_ends_the_reader_when_the_cancellation_comes_as_its_xread_is_written(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = RedisStreamConsumer(redis_url, "tjobs-test:consumer-stop-never-written")
    inbox: list[Consumed] = []
    await consumer.start(inbox.append)
    reader = consumer._reader
    assert reader is not None
    stopping: list[asyncio.Task[None]] = []
    write = redis.asyncio.connection.Connection._send_packed_command

    async def write_then_stop(self: Any, command: Iterable[bytes]) -> None:
        await write(self, command)
        if not stopping:  # stop() asked after the write finished, before wait_for resumes the reader
            loop = asyncio.get_running_loop()
            loop.call_soon(lambda: stopping.append(asyncio.ensure_future(consumer.stop())))

    monkeypatch.setattr(redis.asyncio.connection.Connection, "_send_packed_command", write_then_stop)
    try:
        for _ in range(300):  # the reader's next XREAD is written within its BLOCK of 1 s
            if stopping:
                break
            await asyncio.sleep(0.01)
        assert stopping, "the reader wrote no XREAD"
        await _within(stopping[0], 5.0)
        assert reader.done()
    finally:
        reader.cancel()  # a reader left running by the bug: asked again, in its read this time
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
    assert inbox == []


async def _within(stop: asyncio.Task[None], seconds: float) -> None:
    """Wait for ``stop`` without cancelling it (a cancelled stop() would cancel the reader again)."""
    await asyncio.wait({stop}, timeout=seconds)
    if not stop.done():
        stop.cancel()
        pytest.fail(f"stop() did not return within {seconds} s: the reader's cancellation was lost")
    stop.result()
