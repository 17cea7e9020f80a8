"""The Redis hot tier: near-term task changes pushed to every node through one capped Redis stream.

xtimer keeps near-term timers in ZSET slices (minute × bucket) that the owning scheduler polls. Here
the wheel already holds the near-term timers; what must travel is only the *change*, from the node
that took the API call to the node whose wheel holds the shard, before the task's instant. A stream
read with ``XREAD BLOCK`` delivers it in about a millisecond instead of a poll period, keeps order,
and caps itself (``MAXLEN ~``). Every node applies the changes for the shards it owns
(:meth:`tjobs.scheduler.runner.JobRunner.on_task_change` ignores the others and never replaces a
newer version); the publishing node applies its own change locally first, so its own shards never
depend on Redis.

Redis is never the truth (invariant 7). A change lost to an outage or a ``FLUSHALL`` leaves the task
in the store, where the next cycle load or a take-over load finds it (overdue ones fire at once under
their misfire policy): latency, never a lost fire. Stream ids are time-based, so a reader resumes
after a flush or a restart from the last id it saw. While Redis fails, publishing is skipped for a
second at a time instead of slowing every registration down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import redis.asyncio as aioredis

from tjobs.clock import Clock
from tjobs.hotpath.base import ChangeListener, HotPath, TaskChange

logger = logging.getLogger(__name__)

STREAM_MAXLEN = 100_000
READ_BLOCK_MS = 1000
READ_COUNT = 1000
BREAKER_OPEN_S = 1.0


def is_near(change: TaskChange, now_ms: int, near_ms: int) -> bool:
    """Whether an owning wheel could hold this change: a stop, an update, or an instant within reach."""
    return change.next_run_at_ms is None or change.version > 1 or change.next_run_at_ms < now_ms + near_ms


class RedisHotPath(HotPath):
    def __init__(
        self, url: str, *, stream: str, origin: str, clock: Clock, near_ms: int, timeout_s: float = 0.5
    ) -> None:
        self._url = url
        self._stream = stream
        self._origin = origin
        self._clock = clock
        self._near_ms = near_ms
        self._timeout_s = timeout_s
        self._writer: aioredis.Redis | None = None
        self._reader: aioredis.Redis | None = None
        self._listener: ChangeListener | None = None
        self._task: asyncio.Task[None] | None = None
        self._broken_until = 0.0
        self.published = 0
        self.received = 0
        self.publish_failures = 0

    async def start(self, listener: ChangeListener) -> None:
        self._listener = listener
        self._writer = aioredis.from_url(
            self._url, socket_timeout=self._timeout_s, socket_connect_timeout=self._timeout_s
        )
        self._reader = aioredis.from_url(
            self._url, socket_timeout=READ_BLOCK_MS / 1000 + 2, socket_connect_timeout=self._timeout_s
        )
        self._task = asyncio.create_task(self._read_loop(), name="tjobs-hot-redis")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for client in (self._writer, self._reader):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()
        self._writer = self._reader = None
        self._listener = None

    async def publish(self, change: TaskChange) -> None:
        if self._listener is not None:
            self._listener(change)  # our own shards never wait for Redis
        if self._writer is None or not is_near(change, self._clock.now_ms(), self._near_ms):
            return
        if time.monotonic() < self._broken_until:
            return
        fields: dict[Any, Any] = {
            "t": change.task_id,
            "a": change.app_id,
            "v": change.version,
            "o": self._origin,
            "n": "" if change.next_run_at_ms is None else change.next_run_at_ms,
        }
        try:
            await self._writer.xadd(self._stream, fields, maxlen=STREAM_MAXLEN, approximate=True)
            self.published += 1
        except Exception as error:
            self.publish_failures += 1
            self._broken_until = time.monotonic() + BREAKER_OPEN_S
            logger.warning(
                "hot tier publish failed (%s); the cycle load covers task %d",
                error,
                change.task_id,
                extra={"action": "hot_publish_failed"},
            )

    async def _last_id(self) -> bytes:
        assert self._reader is not None
        newest: Any = await self._reader.xrevrange(self._stream, count=1)
        return bytes(newest[0][0]) if newest else b"0-0"

    async def _read_loop(self) -> None:
        last_id: bytes | None = None
        while True:
            try:
                assert self._reader is not None
                if last_id is None:
                    last_id = await self._last_id()
                replies: Any = await self._reader.xread(
                    {self._stream: last_id}, count=READ_COUNT, block=READ_BLOCK_MS
                )
                for _stream, entries in replies or ():
                    for entry_id, fields in entries:
                        last_id = bytes(entry_id)
                        self._apply(fields)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                logger.warning(
                    "hot tier read failed (%s); retrying", error, extra={"action": "hot_read_failed"}
                )
                await asyncio.sleep(0.5)

    def _apply(self, fields: dict[bytes, bytes]) -> None:
        if fields.get(b"o", b"").decode() == self._origin or self._listener is None:
            return
        try:
            raw_next = fields[b"n"]
            change = TaskChange(
                int(fields[b"t"]),
                fields[b"a"].decode(),
                int(raw_next) if raw_next else None,
                int(fields[b"v"]),
            )
        except (KeyError, ValueError):
            return
        self.received += 1
        self._listener(change)
