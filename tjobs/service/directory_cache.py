"""The cache in front of the app and target directories, which outlives its server's silence.

Apps and named targets live on one database server (the one holding the apps table). A delivery on
any other server's shards needs them too, so a frozen or cut apps server must not stop every
server's callbacks (issue 28). Each entry, timed on the node's clock from its last good read, is:

- **fresh** for ``ttl_ms``. A hit in the last fifth of that starts a read in the background (one per
  key at a time), so an entry in use is read again before it expires while its server answers: the
  fast lane (:meth:`DirectoryCache.cached`) never misses on it, and a change made through another node
  (an app disabled, a secret rotated, a target edited) is seen within ``ttl_ms``.
- **stale** for ``serve_stale_ms`` after that. A caller waits for a read at most ``read_deadline_ms``
  and is then answered with the copy (the last good read). Once a read has failed or outlived that
  deadline (a read ahead of expiry still unanswered at expiry, typically) the server counts as silent
  for the key: the copy is answered at once, the fast lane included, and a read is tried again in the
  background every ``RETRY_MS`` until one succeeds.
- **gone** after that: a caller waits for the server as if nothing were cached (the deliverer leaves
  the flow ``pending`` when the read fails, and the compensator re-drives it). A caller that passes
  ``miss_deadline_ms`` (an API request: it must not hang) waits that long at most, then gets
  :class:`tjobs.errors.StorageUnavailable` (the read goes on for the next caller).

A read that started before a :meth:`~DirectoryCache.put` or :meth:`~DirectoryCache.forget` of its key
keeps nothing when it ends: what this node wrote or dropped since (a rotated key) is newer than its answer.

A read that says the entry no longer exists (a deleted app or target) drops the copy at once: no copy
outlives an answer that it is gone. Log actions, one line each per outage and directory, however many
entries it touches: ``directory_stale`` (the first entry whose server stopped answering; its copy is
served) and ``directory_recovered`` (the last such entry read again: how many were silent, for how long).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tjobs.clock import Clock
from tjobs.errors import StorageUnavailable

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

REFRESH_AHEAD = 0.8  # of ttl_ms: a hit past this starts a background read
RETRY_MS = 1_000  # a silent server's key is read again at most this often (in the background)


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """How long a copy is fresh, how long it may be served stale, and how long a caller waits for the
    server before it is answered with the stale copy (``directory.*`` settings)."""

    ttl_ms: int
    serve_stale_ms: int = 300_000
    read_deadline_ms: int = 200


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    read_at_ms: int
    silent_since_ms: int | None = None  # a read since read_at_ms failed or outlived the deadline
    last_try_ms: int = 0  # when the last read of this key started


class DirectoryCache(Generic[K, V]):
    """Values by key over ``read(key)`` (which answers ``None`` when the key no longer exists and raises
    when its server cannot answer), kept as the module docstring says. ``name`` names the directory
    in log lines (``apps``, ``targets``)."""

    def __init__(self, read: Callable[[K], Awaitable[V | None]], clock: Clock, policy: CachePolicy, name: str) -> None:
        self._read = read
        self._clock = clock
        self.policy = policy
        self._name = name
        self._entries: dict[K, _Entry[V]] = {}
        self._reads: dict[K, asyncio.Future[V | None]] = {}  # key -> the read under way
        # key -> its puts and forgets while a read was under way (that read keeps its answer only if none)
        self._writes: dict[K, int] = {}
        self._silent: set[K] = set()  # keys whose server has not answered since it went silent
        self._outage_since_ms = 0  # when the first of them went silent
        self._outage_keys = 0  # how many went silent in this outage

    def cached(self, key: K) -> V | None:
        """The value without waiting: fresh, or stale within the bound while its server is silent
        (``None``: ask :meth:`get`). May start a background read (ahead of expiry, or a retry)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        now_ms = self._clock.now_ms()
        age_ms = now_ms - entry.read_at_ms
        policy = self.policy
        if age_ms < policy.ttl_ms:
            if age_ms >= policy.ttl_ms * REFRESH_AHEAD:
                self._refresh(key, entry, now_ms)
            return entry.value
        if age_ms >= policy.ttl_ms + policy.serve_stale_ms:
            return None
        if (
            entry.silent_since_ms is None
            and key in self._reads
            and now_ms - entry.last_try_ms >= policy.read_deadline_ms
        ):
            # the read (ahead of expiry, typically) has outlived the deadline already: nobody need wait it
            self._went_silent(key, entry, now_ms, "no answer within the read deadline")
        if entry.silent_since_ms is not None:
            self._refresh(key, entry, now_ms)
            return entry.value
        return None

    async def get(self, key: K, miss_deadline_ms: int | None = None) -> V | None:
        """The value: cached, else read (one read per key at a time, shared by every caller; a caller
        that is cancelled leaves it running for the others). With a copy within the stale bound, waits
        for the read at most ``read_deadline_ms`` and answers the copy if the read fails or is late;
        without one, waits for the read (at most ``miss_deadline_ms`` when given, then
        :class:`StorageUnavailable`) and raises what it raises. ``None``: the key does not exist."""
        value = self.cached(key)
        if value is not None:
            return value
        entry = self._entries.get(key)
        now_ms = self._clock.now_ms()
        read = self._start_read(key, entry, now_ms)
        if entry is None or now_ms - entry.read_at_ms >= self.policy.ttl_ms + self.policy.serve_stale_ms:
            if miss_deadline_ms is None:
                return await asyncio.shield(read)
            done, _ = await asyncio.wait({read}, timeout=miss_deadline_ms / 1000)
            if not done:
                raise StorageUnavailable(
                    f"the database server holding the {self._name} directory did not answer within "
                    f"{miss_deadline_ms} ms and this node has no copy to serve; nothing was done; retry "
                    f"after {StorageUnavailable.retry_after_s} s"
                )
            return read.result()
        done, _ = await asyncio.wait({read}, timeout=self.policy.read_deadline_ms / 1000)
        if done and not read.cancelled() and read.exception() is None:
            return read.result()
        if entry.silent_since_ms is None:  # not failed yet: still under way past the deadline
            self._went_silent(key, entry, now_ms, "no answer within the read deadline")
        return entry.value

    def put(self, key: K, value: V) -> None:
        """A value this node just wrote (or read elsewhere): fresh from now."""
        now_ms = self._clock.now_ms()
        self._entries[key] = _Entry(value, now_ms)
        self._wrote(key)
        self._answered(key, now_ms)

    def forget(self, key: K) -> None:
        """Drop the copy (and the answer of a read under way): the next caller waits for a new read."""
        self._entries.pop(key, None)
        self._wrote(key)
        self._answered(key, self._clock.now_ms())

    def holds(self, key: K) -> bool:
        """A copy of ``key`` is kept, of any age (it has been read and not dropped since)."""
        return key in self._entries

    def last_copy(self, key: K) -> V | None:
        """The last good copy of ``key``, however old (``None``: none kept). Not for what the staleness
        bound covers: a caller that acts on the value uses :meth:`cached` or :meth:`get`."""
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def _wrote(self, key: K) -> None:
        if key in self._reads:  # only a read under way needs telling
            self._writes[key] = self._writes.get(key, 0) + 1

    async def close(self) -> None:
        """Cancel the reads under way (the node is stopping)."""
        reads = list(self._reads.values())
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)

    # ---- reads --------------------------------------------------------------------------------------------

    def _refresh(self, key: K, entry: _Entry[V], now_ms: int) -> None:
        """A background read, unless one is under way or (for a silent key) one started < RETRY_MS ago."""
        if key in self._reads:
            return
        if entry.silent_since_ms is not None and now_ms - entry.last_try_ms < RETRY_MS:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop to read on (a synchronous caller): the next hit will
            return
        self._start_read(key, entry, now_ms)

    def _start_read(self, key: K, entry: _Entry[V] | None, now_ms: int) -> asyncio.Future[V | None]:
        read = self._reads.get(key)
        if read is None:
            if entry is not None:
                entry.last_try_ms = now_ms
            read = self._reads[key] = asyncio.ensure_future(self._read_and_keep(key, self._writes.get(key, 0)))
            read.add_done_callback(functools.partial(self._read_done, key))
        return read

    async def _read_and_keep(self, key: K, writes: int) -> V | None:
        try:
            value = await self._read(key)
        except Exception as error:
            entry = self._entries.get(key)
            if entry is not None and entry.silent_since_ms is None:
                self._went_silent(key, entry, self._clock.now_ms(), f"{type(error).__name__}: {error}")
            raise
        now_ms = self._clock.now_ms()
        if self._writes.get(key, 0) != writes:  # put or forgotten meanwhile: that is newer than this answer
            kept = self._entries.get(key)
            return None if kept is None else kept.value
        self._entries.pop(key, None)
        if value is not None:
            self._entries[key] = _Entry(value, now_ms)
        self._answered(key, now_ms)
        return value

    def _went_silent(self, key: K, entry: _Entry[V], now_ms: int, why: str) -> None:
        entry.silent_since_ms = now_ms
        if key in self._silent:
            return
        self._silent.add(key)
        self._outage_keys += 1
        if len(self._silent) > 1:
            return  # the outage is logged already
        self._outage_since_ms = now_ms
        served_until_ms = entry.read_at_ms + self.policy.ttl_ms + self.policy.serve_stale_ms
        logger.warning(
            "%s directory: %r could not be read (%s); its copy read %d ms ago is served for %d ms more, "
            "and so are other entries of a server that does not answer (counted when it does)",
            self._name,
            key,
            why,
            now_ms - entry.read_at_ms,
            max(served_until_ms - now_ms, 0),
            extra={"action": "directory_stale"},
        )

    def _answered(self, key: K, now_ms: int) -> None:
        """``key`` was read (or dropped): the outage ends with its last silent entry."""
        if key not in self._silent:
            return
        self._silent.discard(key)
        if self._silent:
            return
        logger.info(
            "%s directory: read again after %d ms; %d entries were served from their copies meanwhile",
            self._name,
            now_ms - self._outage_since_ms,
            self._outage_keys,
            extra={"action": "directory_recovered"},
        )
        self._outage_keys = 0

    def _read_done(self, key: K, read: asyncio.Future[V | None]) -> None:
        if self._reads.get(key) is read:
            del self._reads[key]
            self._writes.pop(key, None)
        if not read.cancelled():
            read.exception()  # retrieved: every caller may have gone (a background read has none)
