"""The DB-poll hot tier, for clusters without Redis: an append-only log of task changes in the store
(:class:`tjobs.stores.contracts.HotChangeLog`; on SQL the ``hot_changes`` table in logical database 0)
that every node polls by increasing id every ``hot_poll_interval_ms``, applying the changes of the
shards it owns (:meth:`DbPollHotTier.watch`).

Each process logs its changes under an origin of its own (its node's name and a random token), and its
poll asks the log to leave those out (``read_after(..., skip_origin=...)``): it applied them when it
published them, so the server skips them on the key's range and the node never receives nor parses them
(they were ~38 us of a near-term create's node CPU in cluster mode, docs/benchmarks.md). The log's last
change comes back whoever wrote it, so the watermark still goes past the node's own rows. Every other
process reads them, including another process of the same node name (a restart overlapping the old
process's stop): the token, not the name, tells them apart. Every change is still written, for the
shards the node owns too: during a handover both owners overlap and the other must see it.

A poll begins above the log's highest id as ``start`` read it, so a node receives every change logged
after its ``start`` returned. Ids come from an auto-increment key, and a lower id may commit after a
higher one was read, so each poll re-reads the ids above a *settled* watermark (the highest id seen at
least a second ago) and skips those it already applied. A log emptied under it whose ids restart
(``TRUNCATE``, or SQLite reusing ids once every row was purged) is noticed (the highest id fell below
the highest read, or is that id on another change) and read again from the start. Changes older than
``RETENTION_S`` are pruned.

Publishing works like the store's :class:`tjobs.stores.sql_direct.GroupCommit`: a change is written at
once when no write is in flight, and changes published meanwhile wait and go together in the next
write, up to :data:`FLUSH_ROWS` changes in one append (one transaction), instead of a transaction per
change (the profile of a cluster node taking creates: docs/benchmarks.md). A publish returns once its
change's write ended, or once the write in flight has run :data:`PUBLISH_WAIT_S` (at once if it has
already): the log lives in logical database 0, on the server holding the apps table, and a create whose
task is on another server must not wait on that one for more than that (issue 28; nobody can read the
log of a server that does not answer anyway). Its change stays queued and is written once the server
answers (``hot_publish_stalled`` logged once per stalled write).
A write that failed is logged once for its changes and, like any other change missed, is covered by the
cycle load.

The log comes with the schema (``tjobs migrate``, revision ``0004_hot_changes``); a node finding it
missing refuses to start and says so. It is not the truth (invariant 7, docs/design.md): a missed
change costs latency until the next load, never a fire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time

from sharding import shard_of_task_id
from tjobs.clock import Clock
from tjobs.hot_tier.base import ChangeListener, ChangesLost, HotTier, TaskChange, cancel_and_wait, is_near
from tjobs.observability.observer import NO_OBSERVER, FireObserver
from tjobs.stores.contracts import HotChange, HotChangeLog

logger = logging.getLogger(__name__)

RETENTION_S = 600
PURGE_INTERVAL_S = 30.0
SETTLE_S = 1.0
POLL_LIMIT = 5000
FLUSH_ROWS = 500  # rows per publishing transaction at most
ORIGIN_NAME_CHARS = 119  # of the node's name in an origin; "/" and 8 hex digits of the process fill 128
STOP_WRITE_WAIT_S = 2.0  # how long stop() lets a write in flight finish before cancelling it
PUBLISH_WAIT_S = 1.0  # a publish stops waiting once the write in flight has run this long (it goes on)


class DbPollHotTier(HotTier):
    tier = "dbpoll"

    def __init__(self, log: HotChangeLog, *, origin: str, clock: Clock, near_ms: int, poll_interval_ms: int) -> None:
        super().__init__()
        self.log = log  # opened by start, closed by stop
        self._open = False
        self._origin = f"{origin[:ORIGIN_NAME_CHARS]}/{secrets.token_hex(4)}"  # this process's, in 128 chars
        self._clock = clock
        self._near_ms = near_ms
        self._interval_s = poll_interval_ms / 1000
        self._listener: ChangeListener | None = None
        self._task: asyncio.Task[None] | None = None
        self._watched: frozenset[int] = frozenset()
        self._queue: list[tuple[HotChange, asyncio.Future[None]]] = []  # changes waiting for a write
        self._flush: asyncio.Task[None] | None = None  # the write in flight, if any
        self._write_started_s = 0.0  # loop time when the write in flight began
        self._stall_logged = False  # a publish gave up waiting on the write in flight (logged once per write)
        self.published = 0
        self.received = 0

    @property
    def origin(self) -> str:
        """What this process's changes are logged under: its node's name and a token of its own."""
        return self._origin

    async def start(
        self, listener: ChangeListener, observer: FireObserver = NO_OBSERVER, lost: ChangesLost | None = None
    ) -> None:  # ``lost`` is not called: a failed write's changes wait for the cycle load
        self._listener = listener
        self._observer = observer
        await self.log.open()  # refuses a schema older than the log
        self._open = True
        # the poll begins above the log's highest id as of now: every change logged after start returns is
        # received (read here, not on the poll's first turn, which may come after such a change)
        watermark: int | None = None
        try:
            watermark = await self.log.highest_id()
        except Exception as error:  # the poll reads it on its first turn instead
            logger.warning(
                "hot change log unreadable at start (%s); retrying", error, extra={"action": "hot_read_failed"}
            )
        except asyncio.CancelledError:  # the start given up: nobody will stop the tier, so close what it opened
            self._open = False
            await self.log.close()
            raise
        self._task = asyncio.create_task(self._poll_loop(watermark), name="tjobs-hot-dbpoll")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self._flush is not None:  # the rows queued are written (or fail) before the engine goes,
            flush = self._flush  # unless the server does not answer: then they are the cycle load's
            _, pending = await asyncio.wait([flush], timeout=STOP_WRITE_WAIT_S)
            if pending:
                logger.warning(
                    "hot change write still running %.0f s after stop; cancelled, the cycle load covers its changes",
                    STOP_WRITE_WAIT_S,
                    extra={"action": "hot_publish_failed"},
                )
                await cancel_and_wait(flush)
        self._open = False
        await self.log.close()
        self._listener = None

    async def watch(self, shards: frozenset[int]) -> None:
        self._watched = shards  # every node reads every row; only its own shards' are applied

    async def publish(self, change: TaskChange) -> None:
        if self._listener is not None:
            self._listener(change)
        now_ms = self._clock.now_ms()
        if not self._open or not is_near(change, now_ms, self._near_ms):
            return
        row = HotChange(change.task_id, change.app_id, change.next_run_at_ms, change.version, self._origin, now_ms)
        loop = asyncio.get_running_loop()
        written: asyncio.Future[None] = loop.create_future()
        self._queue.append((row, written))
        wait_s = PUBLISH_WAIT_S
        if self._flush is None:  # nothing in flight: written at once (it starts on the loop's next turn)
            self._write_started_s = loop.time()
            self._flush = asyncio.create_task(self._write_queued(), name="tjobs-hot-dbpoll-publish")
        else:  # a write that has not answered for PUBLISH_WAIT_S is not waited for again
            wait_s = max(0.0, self._write_started_s + PUBLISH_WAIT_S - loop.time())
        # a caller cancelled meanwhile, or past the wait, leaves its row to be written with the others
        done, _ = await asyncio.wait({written}, timeout=wait_s)
        if not done and not self._stall_logged:
            self._stall_logged = True
            logger.warning(
                "hot change write unanswered after %.1f s (the log's server is stopped, cut or slow); creates "
                "go on without waiting, their changes stay queued for the next write",
                PUBLISH_WAIT_S,
                extra={"action": "hot_publish_stalled"},
            )

    async def _write_queued(self) -> None:
        """Write the queued rows, up to :data:`FLUSH_ROWS` per transaction, until none is left; rows
        queued during a write go in the next. Never raises: a failed write is logged for its rows."""
        try:
            while self._queue:
                batch, self._queue = self._queue[:FLUSH_ROWS], self._queue[FLUSH_ROWS:]
                self._write_started_s = asyncio.get_running_loop().time()
                try:
                    await self.log.append([row for row, _ in batch])
                    self.published += len(batch)
                except Exception as error:
                    logger.warning(
                        "%d hot change(s) not recorded (tasks %s) (%s); the cycle load covers them",
                        len(batch),
                        ", ".join(str(row.task_id) for row, _ in batch[:5]) + (", ..." if len(batch) > 5 else ""),
                        error,
                        extra={"action": "hot_publish_failed"},
                    )
                finally:
                    self._stall_logged = False
                    _release(batch)
        finally:  # rows still queued only when this was cancelled: nobody waits for them forever
            self._flush = None
            _release(self._queue)
            self._queue = []

    async def _poll_loop(self, watermark: int | None) -> None:
        log = self.log
        recent: list[tuple[float, int]] = []  # (seen at, id) above the watermark
        seen: dict[int, HotChange] = {}  # id -> the change read under it, above the watermark
        highest: tuple[int, HotChange | None] = (watermark or 0, None)  # the highest id read, and its change
        next_purge = time.monotonic() + PURGE_INTERVAL_S
        while True:
            try:
                if watermark is None:
                    watermark = await log.highest_id()
                    highest = (watermark, None)
                rows = await log.read_after(watermark, POLL_LIMIT, skip_origin=self._origin)
                if not rows and await self._ids_went_back(*highest):
                    watermark, recent, seen, highest = 0, [], {}, (0, None)
                    continue
                now = time.monotonic()
                now_ms = self._clock.now_ms()
                for row_id, row in rows:
                    if seen.get(row_id) == row:
                        continue
                    seen[row_id] = row  # an id reused after a truncate carries another change
                    if row_id >= highest[0]:
                        highest = (row_id, row)
                    recent.append((now, row_id))
                    if (
                        row.origin != self._origin  # only the log's last change can be this process's
                        and self._listener is not None
                        and shard_of_task_id(row.task_id) in self._watched
                    ):
                        self.received += 1
                        self._observe_lag(row.created_at_ms, now_ms)
                        self._listener(TaskChange(row.task_id, row.app_id, row.next_run_at_ms, row.version))
                settled = [row_id for at, row_id in recent if now - at >= SETTLE_S]
                if settled:
                    watermark = max(watermark, max(settled))
                    recent = [(at, row_id) for at, row_id in recent if row_id > watermark]
                    seen = {row_id: row for row_id, row in seen.items() if row_id > watermark}
                if now >= next_purge:
                    next_purge = now + PURGE_INTERVAL_S
                    with contextlib.suppress(Exception):
                        await log.prune(self._clock.now_ms() - RETENTION_S * 1000)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                logger.warning("hot change poll failed (%s); retrying", error, extra={"action": "hot_read_failed"})
            await asyncio.sleep(self._interval_s)

    async def _ids_went_back(self, highest_id: int, highest_row: HotChange | None) -> bool:
        """Whether the log was emptied and its ids restarted (a ``TRUNCATE``, or SQLite reusing ids
        once the purge deleted every row): its highest id is below ``highest_id``, the highest read, or
        is that id on another change than ``highest_row`` — then everything present is new."""
        if highest_id == 0:
            return False
        top = await self.log.last()
        if top is None:
            return False  # empty: a change with an id at or below highest_id shows it on a later poll
        top_id, top_row = top
        if top_id != highest_id:
            return top_id < highest_id
        return highest_row is not None and top_row != highest_row


def _release(rows: list[tuple[HotChange, asyncio.Future[None]]]) -> None:
    for _, written in rows:
        if not written.done():
            written.set_result(None)
