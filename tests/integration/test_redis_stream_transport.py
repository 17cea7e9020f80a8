"""The Redis Streams transport on a real Redis, beyond the broker contract: each attempt answered on
its own, and a cancelled attempt cancelled.

The broker-transport contract (``tests/contract/test_broker_transport_contract.py``) covers what
every broker transport shares; these cases are the transport's own promises: a refused ``XADD``
fails its own attempt and not the attempts sent alongside it, attempts to two streams of one server
in one loop turn both land, and an attempt cancelled while its ``XADD`` is written and unanswered
propagates its cancellation (redis-py must not turn it into a result) and leaves nothing counted as
waiting.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import redis.asyncio

from tests.contract.broker_backends import RedisStreamBackend, give_up_once_written
from tests.contract.test_broker_transport_contract import signed_request
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
