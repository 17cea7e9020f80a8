"""The Redis hot tier: near-term task changes in ZSET slices keyed minute × bucket, polled by the owner.

Layout (xtimer's two-dimensional slices; ``P`` = ``tjobs:<cluster>:hot``)::

    P:slice:<minute>:{<bucket>}   ZSET  member = one change, score = its insertion sequence
    P:seq:{<bucket>}              STRING  the bucket's last insertion sequence
    P:epoch                       STRING  a token the first reader after a flush or a restart sets
    P:lost                        STRING  a count publishers raise after changes they could not write

* **minute** is the minute of a new task's instant (epoch ms // 60 000): the slice holds the fires
  that minute brings, as in xtimer. Any other change (an update, a pause, a delete: the owner must
  drop or move the entry it holds now, whatever the new instant) and an instant already past go into
  the slice of the publish minute. A slice expires ``SLICE_RETAIN_S`` after its minute ends.
* **bucket** is the task's shard, i.e. the job: exactly one node runs it, so a node reads only the
  slices of the jobs it owns (:meth:`HotTier.watch`), and a bucket changes hands with its job, never
  because a bucket count changed (xtimer reshuffles ownership then). ``{}`` keeps a bucket's keys in
  one Redis Cluster slot.
* **score** is an insertion sequence, not the instant as in xtimer: here the wheel already orders
  fires by instant, and what the owner must find cheaply is *what is new since its last read*. One
  Lua script bumps the bucket's sequence and adds the member atomically; the sequence is Redis server
  time in µs (or the last value + 1), so it only grows, even across a ``FLUSHALL`` or a restart.
* **member** is ``task|version|next-or-dash|published-ms|origin|app`` (origin: a random token of the
  publishing process, which applied the change itself already).

The owner polls every ``redis_poll_interval_ms``: one short script call returns the sequences of
all its buckets as one string (``"0,1763…,0"``); when that string equals the last one, the poll is
over. Otherwise, in one pipelined round trip, ``ZRANGEBYSCORE slice (cursor +inf`` for the slices
of the previous, current and next minute of the buckets whose sequence moved past the slice's
cursor. A slice entering that window (a new minute) is read from the start, so a change for an
instant minutes ahead is read at least 60 s before it. A gained job's buckets are read from the
sequence they had when it was gained (:meth:`watch` runs right before the load of the job, which
holds everything committed earlier), so a re-plan does not replay minutes of changes into fire
attempts the store already settled. Atomic scripts make the cursor exact: every change with a
sequence at or below the one just read is already in its slice, so no settle window is needed
(unlike the DB poll). The scripts build key names from their arguments: a standalone Redis (or a
primary with replicas), not Redis Cluster.

Why a pure poll and no wake-up signal: the lag a poll adds is at most one period plus a round trip,
within the 100 ms budget at the 50 ms default, and an idle poll is one script call, costing about
what one redis-py command does whatever the number of buckets the node owns (figures:
docs/benchmarks.md, "Moved from docstrings"). ``PUBLISH`` would save part of the period at the price
of a subscriber connection per node and a second delivery path to reconcile.

Redis is never the truth (invariant 7, docs/design.md). A change lost to an outage or a flush leaves
the task in the store. While Redis fails, publishing is skipped for a second at a time instead of
slowing every registration down. So that such a change is not left to the next cycle load (up to
``scheduler.cycle_s`` late), the tier tells the owner's ``lost`` listener (the runner reloads its jobs:
overdue ones fire at once under their misfire policy) when the *generation* its poll reads, ``epoch:lost``,
changed: a flush or a restart without the data removed ``P:epoch`` (the next poll sets a new token), or
a publisher that could not write raised ``P:lost`` at its first poll that reached Redis again. Not
seen: a restart from an older snapshot that kept ``P:epoch`` (its lost changes wait for the cycle
load), and a publisher that never reaches Redis again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any

import redis.asyncio as aioredis

from sharding import shard_of_task_id
from tjobs.clock import Clock
from tjobs.hot_tier.base import ChangeListener, ChangesLost, HotTier, TaskChange, cancel_and_wait, is_near
from tjobs.observability.observer import NO_OBSERVER, FireObserver

logger = logging.getLogger(__name__)

MINUTE_MS = 60_000
SLICE_RETAIN_S = 180  # a slice outlives its minute by this much (clock skew, slow readers)
SEQ_TTL_S = 3600  # longer than any slice lives; a lost counter restarts above every cursor anyway
BREAKER_OPEN_S = 1.0
READ_RETRY_S = 0.5

# KEYS: sequence, slice. ARGV: member, slice expiry (epoch ms), sequence TTL (ms).
_ADD_SCRIPT = """
local t = redis.call('TIME')
local seq = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if seq <= last then seq = last + 1 end
local text = string.format('%.0f', seq)
redis.call('SET', KEYS[1], text, 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], text, ARGV[1])
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
return text
"""


# ARGV: the watched buckets ("3,17,42"), the sequence key prefix, the epoch key, the lost key, a new
# epoch token. Returns "<epoch>:<lost>;" then the buckets' sequences, same order ("0" for none), as one
# string: the idle poll costs one short command and one string comparison.
_SEQS_SCRIPT = """
local epoch = redis.call('GET', ARGV[3])
if not epoch then
  epoch = ARGV[5]
  redis.call('SET', ARGV[3], epoch)
end
local out = {}
for bucket in string.gmatch(ARGV[1], '[^,]+') do
  out[#out + 1] = redis.call('GET', ARGV[2] .. '{' .. bucket .. '}') or '0'
end
return epoch .. ':' .. (redis.call('GET', ARGV[4]) or '0') .. ';' .. table.concat(out, ',')
"""


def slice_minute(change: TaskChange, now_ms: int) -> int:
    """The minute whose slice carries ``change``: a new task's instant's; now for any other change
    (update, pause, delete: the owner acts on it at once) and for an instant already past."""
    if change.version == 1 and change.next_run_at_ms is not None:
        return max(change.next_run_at_ms, now_ms) // MINUTE_MS
    return now_ms // MINUTE_MS


def encode(change: TaskChange, published_at_ms: int, origin: str) -> str:
    next_run = "-" if change.next_run_at_ms is None else str(change.next_run_at_ms)
    return f"{change.task_id}|{change.version}|{next_run}|{published_at_ms}|{origin}|{change.app_id}"


def decode(member: str) -> tuple[TaskChange, int, str]:
    """``(change, published_at_ms, origin)``; raises ``ValueError`` for a malformed member."""
    task_id, version, next_run, published, origin, app_id = member.split("|", 5)
    change = TaskChange(int(task_id), app_id, None if next_run == "-" else int(next_run), int(version))
    return change, int(published), origin


class RedisHotTier(HotTier):
    tier = "redis"

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        clock: Clock,
        near_ms: int,
        poll_interval_ms: int = 50,
        timeout_s: float = 0.5,
    ) -> None:
        super().__init__()
        self._url = url
        self._prefix = prefix
        self._clock = clock
        self._near_ms = near_ms
        self._interval_s = poll_interval_ms / 1000
        self._timeout_s = timeout_s
        self._origin = secrets.token_hex(4)
        self._redis: aioredis.Redis | None = None
        self._add: Any = None
        self._listener: ChangeListener | None = None
        self._lost: ChangesLost | None = None
        self._lost_task: asyncio.Task[None] | None = None  # telling ``_lost``; one at a time
        self._lost_again = False  # another loss while it ran: tell it again when it ends
        self._generation: str | None = None  # "epoch:lost" as the last poll read it
        self._lost_unsaid = False  # a change of ours was not written: raise P:lost once Redis answers
        self._task: asyncio.Task[None] | None = None
        self._watched: frozenset[int] = frozenset()
        self._cursors: dict[tuple[int, int], int] = {}  # (minute, bucket) -> last sequence read
        self._floors: dict[int, int] = {}  # bucket -> its sequence when gained (older: the load's)
        self._minute = 0
        self._buckets: list[int] = []
        self._buckets_arg: str | None = None  # "3,17,42": the watched buckets, as the script takes them
        self._last_seqs: tuple[str, str] | None = None  # (buckets, sequences) of the last full read
        self._read_seqs: Any = None
        self._broken_until = 0.0
        self.published = 0
        self.received = 0
        self.publish_failures = 0
        self.polls = 0

    def seq_key(self, bucket: int) -> str:
        return f"{self._prefix}:seq:{{{bucket}}}"

    def slice_key(self, minute: int, bucket: int) -> str:
        return f"{self._prefix}:slice:{minute}:{{{bucket}}}"

    @property
    def lost_key(self) -> str:
        return f"{self._prefix}:lost"

    async def start(
        self, listener: ChangeListener, observer: FireObserver = NO_OBSERVER, lost: ChangesLost | None = None
    ) -> None:
        self._listener = listener
        self._observer = observer
        self._lost = lost
        self._redis = aioredis.from_url(
            self._url,
            socket_timeout=self._timeout_s,
            socket_connect_timeout=self._timeout_s,
            decode_responses=True,
            protocol=2,  # RESP2 whatever the client's default (RESP3 with HELLO since redis-py 8)
        )
        self._add = self._redis.register_script(_ADD_SCRIPT)
        self._read_seqs = self._redis.register_script(_SEQS_SCRIPT)
        self._task = asyncio.create_task(self._poll_loop(), name="tjobs-hot-redis")

    async def stop(self) -> None:
        for task in (self._task, self._lost_task):
            if task is not None:
                await cancel_and_wait(task)
        self._task = self._lost_task = None
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()
        self._redis = None
        self._listener = None

    async def watch(self, shards: frozenset[int]) -> None:
        gained = sorted(shards - self._watched)
        floors: dict[int, int] = {}
        if gained and self._redis is not None:
            try:
                found = await self._redis.mget([self.seq_key(b) for b in gained])
                floors = {b: int(raw) if raw else 0 for b, raw in zip(gained, found, strict=True)}
            except Exception as error:  # replaying a gained bucket from its start is slower, not wrong
                logger.warning("hot tier unreadable at a job gain (%s)", error, extra={"action": "hot_read_failed"})
        # No await from here to the runner's set_owned: nothing of a gained bucket is applied unowned.
        self._floors = {b: f for b, f in self._floors.items() if b in shards} | floors
        self._watched = shards
        self._buckets_arg = None
        self._last_seqs = None
        self._cursors = {key: seq for key, seq in self._cursors.items() if key[1] in shards}

    async def publish(self, change: TaskChange) -> None:
        if self._listener is not None:
            self._listener(change)  # our own shards never wait for Redis
        now_ms = self._clock.now_ms()
        if self._add is None or not is_near(change, now_ms, self._near_ms):
            return
        if time.monotonic() < self._broken_until:
            self._lost_unsaid = True
            return
        minute = slice_minute(change, now_ms)
        bucket = shard_of_task_id(change.task_id)
        expire_at_ms = (minute + 1) * MINUTE_MS + SLICE_RETAIN_S * 1000
        try:
            await self._add(
                keys=[self.seq_key(bucket), self.slice_key(minute, bucket)],
                args=[encode(change, now_ms, self._origin), expire_at_ms, SEQ_TTL_S * 1000],
            )
            self.published += 1
        except Exception as error:
            self.publish_failures += 1
            self._lost_unsaid = True
            self._broken_until = time.monotonic() + BREAKER_OPEN_S
            logger.warning(
                "hot tier publish failed (%s); its owner reads task %d again once this node reaches Redis",
                error,
                change.task_id,
                extra={"action": "hot_publish_failed"},
            )

    async def _poll_loop(self) -> None:
        while True:
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                logger.warning("hot tier read failed (%s); retrying", error, extra={"action": "hot_read_failed"})
                await asyncio.sleep(READ_RETRY_S)
            await asyncio.sleep(self._interval_s)

    async def poll_once(self) -> int:
        """Read what is new in the watched slices and apply it; returns the changes applied."""
        assert self._redis is not None and self._read_seqs is not None
        self.polls += 1
        if self._lost_unsaid:  # every owner reads its jobs again: one of them missed our change
            self._lost_unsaid = False  # first: a publish failing during the INCR sets it again
            try:
                await self._redis.incr(self.lost_key)
            except BaseException:
                self._lost_unsaid = True
                raise
        if not self._watched:
            return 0
        minute = self._clock.now_ms() // MINUTE_MS
        if minute != self._minute:  # slices entering the window must be read, those leaving it forgotten
            self._minute = minute
            self._cursors = {key: seq for key, seq in self._cursors.items() if key[0] >= minute - 1}
            self._last_seqs = None
        if self._buckets_arg is None:
            self._buckets = sorted(self._watched)
            self._buckets_arg = ",".join(map(str, self._buckets))
        buckets, buckets_arg = self._buckets, self._buckets_arg
        reply: str = await self._read_seqs(
            keys=[],
            args=[
                buckets_arg,
                f"{self._prefix}:seq:",
                f"{self._prefix}:epoch",
                self.lost_key,
                f"{self._origin}.{self.polls}",
            ],
        )
        if (buckets_arg, reply) == self._last_seqs:
            return 0  # the idle poll: one short script call, one string compared
        generation, _, raw = reply.partition(";")
        if generation != self._generation:
            if self._generation is not None:
                self._changes_lost(self._generation, generation)
            self._generation = generation
        window = (minute - 1, minute, minute + 1)
        due: list[tuple[tuple[int, int], int, int]] = []  # (slice, read after, bucket's sequence)
        for bucket, text in zip(buckets, raw.split(","), strict=True):
            seq = int(text)
            for m in window:
                after = self._cursors.get((m, bucket))
                if after is None:
                    after = self._floors.get(bucket, 0)
                    if seq <= after:
                        self._cursors[(m, bucket)] = after  # nothing newer was ever added
                        continue
                elif seq <= after:
                    continue
                due.append(((m, bucket), after, seq))
        applied = await self._read(due) if due else 0
        self._last_seqs = (buckets_arg, reply)
        return applied

    def _changes_lost(self, was: str, now: str) -> None:
        logger.warning(
            "hot tier generation %s -> %s: changes for this node's jobs may be lost; reading them again",
            was,
            now,
            extra={"action": "hot_changes_lost"},
        )
        if self._lost is None:
            return
        if self._lost_task is not None and not self._lost_task.done():
            self._lost_again = True
            return
        self._lost_task = asyncio.create_task(self._tell_lost(self._lost), name="tjobs-hot-lost")

    async def _tell_lost(self, lost: ChangesLost) -> None:
        while True:
            self._lost_again = False
            try:
                await lost()
            except Exception as error:
                logger.warning(
                    "reading the jobs again after lost hot-tier changes failed (%s); the cycle load covers them",
                    error,
                    extra={"action": "hot_reload_failed"},
                )
            if not self._lost_again:
                return

    async def _read(self, due: list[tuple[tuple[int, int], int, int]]) -> int:
        assert self._redis is not None
        pipe = self._redis.pipeline(transaction=False)
        for (m, bucket), after, _seq in due:
            pipe.zrangebyscore(self.slice_key(m, bucket), f"({after}", "+inf", withscores=True)
        replies: list[list[tuple[str, float]]] = await pipe.execute()
        now_ms = self._clock.now_ms()
        applied = 0
        for ((m, bucket), _after, seq), members in zip(due, replies, strict=True):
            readable_from_ms = (m - 1) * MINUTE_MS  # a slice is read from the minute before its own
            highest = seq
            for member, score in members:
                highest = max(highest, int(score))
                applied += self._apply(member, now_ms, readable_from_ms)
            self._cursors[(m, bucket)] = highest
        return applied

    def _apply(self, member: str, now_ms: int, readable_from_ms: int) -> int:
        try:
            change, published_at_ms, origin = decode(member)
        except ValueError:
            return 0
        if origin == self._origin or self._listener is None:
            return 0
        self.received += 1
        # Lag of the tier, not of the design: a change held for a later minute counts from when its
        # slice became readable.
        self._observe_lag(max(published_at_ms, readable_from_ms), now_ms)
        self._listener(change)
        return 1
