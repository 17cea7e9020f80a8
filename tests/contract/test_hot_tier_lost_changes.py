"""A Redis hot tier that may have lost changes says so to the owner (``HotTier.start(..., lost=)``), so that
its node reads its jobs again (``Runner.reload``) instead of leaving a lost change to the next cycle load,
up to ``scheduler.cycle_s`` (300 s by default) later. Found by ``make chaos-grouped`` (2026-12-06): one
one-shot created just before a ``FLUSHALL`` counted lost in the Redis case with the product defaults.

Real Redis; the tiers poll only when a test calls ``poll_once``."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from sharding import TaskIdGenerator
from tjobs.clock import ManualClock, SystemClock
from tjobs.hot_tier.base import TaskChange
from tjobs.hot_tier.redis import RedisHotTier

pytestmark = pytest.mark.redis

IDS = TaskIdGenerator(16)
NEAR_MS = 600_000


class Lost:
    """A ``lost`` listener: counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1

    async def wait_for(self, calls: int, timeout_s: float = 5.0) -> None:
        started = time.monotonic()
        while self.calls < calls:
            if time.monotonic() - started > timeout_s:
                pytest.fail(f"the lost listener was called {self.calls} times, not {calls}, within {timeout_s} s")
            await asyncio.sleep(0.005)


class Received:
    def __init__(self) -> None:
        self.changes: list[TaskChange] = []

    def __call__(self, change: TaskChange) -> None:
        self.changes.append(change)


@pytest.fixture
async def tiers(redis_url: str) -> AsyncIterator[tuple[RedisHotTier, RedisHotTier, Received, Lost, Any]]:
    prefix = f"tjobs:ct{secrets.token_hex(4)}:hot"
    clock = ManualClock(SystemClock().now_ms())
    publisher = RedisHotTier(redis_url, prefix=prefix, clock=clock, near_ms=NEAR_MS, poll_interval_ms=3_600_000)
    owner = RedisHotTier(redis_url, prefix=prefix, clock=clock, near_ms=NEAR_MS, poll_interval_ms=3_600_000)
    admin = aioredis.from_url(redis_url)

    async def flush() -> None:  # this test's keys only: the Redis is shared
        keys = [key async for key in admin.scan_iter(match=f"{prefix}:*")]
        if keys:
            await admin.delete(*keys)

    received, lost = Received(), Lost()
    await publisher.start(Received(), lost=Lost())
    await owner.start(received, lost=lost)
    await owner.watch(frozenset({1}))
    await owner.poll_once()
    await publisher.poll_once()
    yield publisher, owner, received, lost, flush
    await publisher.stop()
    await owner.stop()
    await flush()
    await admin.aclose()


def change(clock_ms: int) -> TaskChange:
    return TaskChange(IDS.mint(1, clock_ms), "app", clock_ms + 2000, 1)


async def test_a_change_flushed_before_its_owner_read_it_is_signalled_once(tiers: Any) -> None:
    publisher, owner, received, lost, flush = tiers
    # Given a change published for the owner's shard and flushed away before the owner's poll
    await publisher.publish(change(SystemClock().now_ms()))
    await flush()
    # When the owner polls
    await owner.poll_once()
    # Then it could not read the change, and its lost listener is told, once
    assert received.changes == []
    await lost.wait_for(1)
    await owner.poll_once()
    later = change(SystemClock().now_ms())
    await publisher.publish(later)
    await owner.poll_once()
    assert received.changes == [later]
    await asyncio.sleep(0.05)
    assert lost.calls == 1


async def test_a_quiet_tier_never_signals_a_loss(tiers: Any) -> None:
    publisher, owner, received, lost, _flush = tiers
    for _ in range(3):
        published = change(SystemClock().now_ms())
        await publisher.publish(published)
        await owner.poll_once()
        await owner.poll_once()
        assert received.changes[-1] == published
    await asyncio.sleep(0.05)
    assert lost.calls == 0


async def test_a_change_a_publisher_could_not_write_is_signalled_to_the_owner_once_it_can(tiers: Any) -> None:
    publisher, owner, received, lost, _flush = tiers
    # Given a publish that failed (the publisher's Redis was unreachable for it alone)
    real_add = publisher._add

    async def unreachable(**_: Any) -> None:
        raise ConnectionError("unreachable")

    publisher._add = unreachable
    await publisher.publish(change(SystemClock().now_ms()))
    publisher._add = real_add
    await owner.poll_once()
    assert received.changes == [] and lost.calls == 0  # nobody else knows yet
    # When the publisher reaches Redis again (its own poll)
    await publisher.poll_once()
    # Then the owner's next poll tells its lost listener, once
    await owner.poll_once()
    await lost.wait_for(1)
    await owner.poll_once()
    await asyncio.sleep(0.05)
    assert lost.calls == 1


async def test_a_publish_that_fails_while_a_loss_is_being_said_is_said_too(tiers: Any) -> None:
    publisher, owner, _received, lost, _flush = tiers
    real_add, real_incr = publisher._add, publisher._redis.incr

    async def unreachable(**_: Any) -> None:
        raise ConnectionError("unreachable")

    async def incr_while_another_publish_fails(key: str) -> Any:
        publisher._broken_until = 0.0
        await publisher.publish(change(SystemClock().now_ms()))  # fails while the first loss is said
        return await real_incr(key)

    # Given a failed publish, and another failing while the publisher's poll says the first
    publisher._add = unreachable
    await publisher.publish(change(SystemClock().now_ms()))
    publisher._redis.incr = incr_while_another_publish_fails
    await publisher.poll_once()
    publisher._add, publisher._redis.incr = real_add, real_incr
    await owner.poll_once()
    await lost.wait_for(1)
    # When the publisher polls again
    await publisher.poll_once()
    await owner.poll_once()
    # Then the second loss is said too
    await lost.wait_for(2)
