"""The hot-path contract (:class:`tjobs.hot_tier.base.HotTier`), run on every implementation: the
in-process one, Redis ZSET slices (real Redis) and the DB poll (over the memory twin's log, SQLite files,
and a real MariaDB).

Each test gets a *pair*: the node that takes the API call (``publisher``) and the node whose wheel
holds the shard (``owner``). In-process, both are the one embedded node. Then a few Redis-specific
specifications of the slice layout (which slices an owner reads, and when).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from sharding import TaskIdGenerator
from testkit.mariadb_template import fresh_mariadb, release_mariadb
from testkit.sqlite_template import migrate_sqlite
from tests.observers import RecordingObserver
from tjobs.clock import ManualClock, SystemClock
from tjobs.hot_tier import dbpoll
from tjobs.hot_tier.base import HotTier, TaskChange
from tjobs.hot_tier.dbpoll import SETTLE_S, DbPollHotTier
from tjobs.hot_tier.local import LocalHotTier
from tjobs.hot_tier.redis import MINUTE_MS, RedisHotTier
from tjobs.settings import StorageSettings
from tjobs.stores.layout_record import StorageNotMigrated
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.migrate import migrate
from tjobs.stores.sql.hot_changes import SqlHotChangeLog
from tjobs.stores.sql_layout import create_engine_for

SHARDS = 16
IDS = TaskIdGenerator(SHARDS)
EVERY_SHARD = frozenset(range(SHARDS))
NEAR_MS = 600_000
ARRIVAL_TIMEOUT_S = 5.0


def task_id(shard: int) -> int:
    return IDS.mint(shard, SystemClock().now_ms() + secrets.randbelow(1000))


@dataclass
class Recorder:
    changes: list[TaskChange] = field(default_factory=list)
    observer: RecordingObserver = field(default_factory=RecordingObserver)  # the tier reports lags to it

    @property
    def lags_s(self) -> list[float]:
        return self.observer.lags_s

    def __call__(self, change: TaskChange) -> None:
        self.changes.append(change)

    async def wait_for(self, change: TaskChange, timeout_s: float = ARRIVAL_TIMEOUT_S) -> float:
        """Seconds until ``change`` arrived; fails after ``timeout_s``."""
        started = time.monotonic()
        while change not in self.changes:
            if time.monotonic() - started > timeout_s:
                pytest.fail(f"{change} did not arrive within {timeout_s} s (got {self.changes})")
            await asyncio.sleep(0.005)
        return time.monotonic() - started


@dataclass
class Pair:
    publisher: HotTier
    owner: HotTier
    published: Recorder
    received: Recorder
    remote: bool  # a change travels through a shared tier (else publisher is owner)
    lose_state: Callable[[], Awaitable[None]]  # the tier forgets everything (flush, truncate)
    outage: Callable[[Pair], Awaitable[None]]  # the tier stops answering ``pair.publisher``


async def _start(
    publisher: HotTier,
    owner: HotTier,
    remote: bool,
    lose_state: Callable[[], Awaitable[None]],
    outage: Callable[[Pair], Awaitable[None]],
) -> Pair:
    published, received = Recorder(), Recorder()
    if owner is publisher:
        await owner.start(received, received.observer)
        published = received
    else:
        await owner.start(received, received.observer)
        await publisher.start(published)
    await owner.watch(EVERY_SHARD)
    return Pair(publisher, owner, published, received, remote, lose_state, outage)


async def _nothing(*_: object) -> None:
    return None


@pytest.fixture(
    params=[
        "local",
        pytest.param("redis", marks=pytest.mark.redis),
        "dbpoll-memory",
        "dbpoll",
        pytest.param("dbpoll-mariadb", marks=pytest.mark.mariadb),
    ]
)
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pair]:
    if request.param == "local":
        local = LocalHotTier()
        yield await _start(local, local, False, _nothing, _nothing)
        await local.stop()
        return
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        prefix = f"tjobs:ct{secrets.token_hex(4)}:hot"
        admin = aioredis.from_url(url)
        publisher = RedisHotTier(url, prefix=prefix, clock=SystemClock(), near_ms=NEAR_MS, poll_interval_ms=20)
        owner = RedisHotTier(url, prefix=prefix, clock=SystemClock(), near_ms=NEAR_MS, poll_interval_ms=20)

        async def flush() -> None:  # only this test's keys: the Redis is shared
            keys = [key async for key in admin.scan_iter(match=f"{prefix}:*")]
            if keys:
                await admin.delete(*keys)

        async def redis_outage(pair: Pair) -> None:  # a node whose Redis is gone: nothing listens on port 1
            await pair.publisher.stop()
            pair.publisher = RedisHotTier(
                "redis://127.0.0.1:1/0", prefix=prefix, clock=SystemClock(), near_ms=NEAR_MS, timeout_s=0.2
            )
            await pair.publisher.start(pair.published)

        pair = await _start(publisher, owner, True, flush, redis_outage)
        yield pair
        await pair.publisher.stop()
        await owner.stop()
        await flush()
        await admin.aclose()
        return
    if request.param == "dbpoll-memory":  # two nodes' tiers over one twin's log
        store = MemoryTaskStore()
        node_a, node_b = (
            DbPollHotTier(
                store.hot_change_log(), origin=name, clock=SystemClock(), near_ms=NEAR_MS, poll_interval_ms=20
            )
            for name in ("node-a", "node-b")
        )

        async def truncate() -> None:
            store.hot_changes.truncate()

        async def unavailable(_: Pair) -> None:
            store.hot_changes.available = False

        memory_pair = await _start(node_a, node_b, True, truncate, unavailable)
        yield memory_pair
        await node_a.stop()
        await node_b.stop()
        return
    async with db_tier(request, tmp_path) as tier:
        db_pair = await _start(tier.publisher, tier.owner, True, tier.truncate, tier.drop)
        yield db_pair
        await db_pair.publisher.stop()
        await db_pair.owner.stop()


@dataclass
class DbTier:
    """A DB-poll pair's database: its two nodes' hot tiers, and SQL run on it from outside."""

    publisher: DbPollHotTier
    owner: DbPollHotTier
    execute: Callable[[str], Awaitable[None]]
    mariadb: bool
    new_log: Callable[[], SqlHotChangeLog]  # another log over the same database (another process's)

    async def truncate(self) -> None:  # the ids restart (SQLite reuses them once the table is empty)
        await self.execute("TRUNCATE TABLE hot_changes" if self.mariadb else "DELETE FROM hot_changes")

    async def drop(self, _: Pair) -> None:
        await self.execute("DROP TABLE hot_changes")


@contextlib.asynccontextmanager
async def db_tier(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DbTier]:
    """A migrated database of its own: SQLite files in ``tmp_path``, or with the ``dbpoll-mariadb``
    param a database on the test MariaDB as migrate leaves a new one (testkit/mariadb_template.py)."""
    mariadb = request.param == "dbpoll-mariadb"
    if mariadb:
        mysql_url: str = request.getfixturevalue("mysql_url")
        asked = StorageSettings(urls=[mysql_url], topology="1x1x16", database_prefix=f"tjobsct_{secrets.token_hex(4)}")
        storage = await fresh_mariadb(asked)
        prefix = storage.database_prefix
        admin = create_engine_for(mysql_url, storage)

        async def execute(sql: str) -> None:
            async with admin.begin() as conn:
                await conn.execute(text(f"USE `{prefix}_00`"))
                await conn.execute(text(sql))

    else:
        storage = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path}"], topology="1x1x16")

        async def execute(sql: str) -> None:
            import aiosqlite

            async with aiosqlite.connect(tmp_path / "tjobs_00.db") as db:
                await db.execute(sql)
                await db.commit()

    try:
        if not mariadb:  # MariaDB's came migrated
            await migrate_sqlite(storage)  # a copy of the process's migrated template
        yield DbTier(
            DbPollHotTier(
                SqlHotChangeLog(storage), origin="node-a", clock=SystemClock(), near_ms=NEAR_MS, poll_interval_ms=20
            ),
            DbPollHotTier(
                SqlHotChangeLog(storage), origin="node-b", clock=SystemClock(), near_ms=NEAR_MS, poll_interval_ms=20
            ),
            execute,
            mariadb,
            lambda: SqlHotChangeLog(storage),
        )
    finally:
        if mariadb:
            await admin.dispose()
            release_mariadb(storage)


def soon(offset_ms: int = 2000) -> int:
    return SystemClock().now_ms() + offset_ms


async def test_publish_applies_the_change_on_the_publishing_node_before_it_returns(pair: Pair) -> None:
    change = TaskChange(task_id(3), "app", soon(), 1)
    await pair.publisher.publish(change)
    assert change in pair.published.changes


async def test_publish_many_applies_each_change_in_order_as_publish_does(pair: Pair) -> None:
    changes = [TaskChange(task_id(3), "app", soon(), 1), TaskChange(task_id(5), "app", None, 2)]
    changes.append(TaskChange(task_id(3), "app", soon(3000), 3))
    await pair.publisher.publish_many(changes)
    assert [c for c in pair.published.changes if c in changes] == changes
    for change in changes:
        await pair.received.wait_for(change)


async def test_change_reaches_the_node_that_watches_its_shard(pair: Pair) -> None:
    change = TaskChange(task_id(5), "app", soon(), 1)
    await pair.publisher.publish(change)
    await pair.received.wait_for(change)


async def test_stop_change_reaches_the_owner(pair: Pair) -> None:
    change = TaskChange(task_id(7), "app", None, 4)
    await pair.publisher.publish(change)
    await pair.received.wait_for(change)


async def test_changes_published_after_the_tier_lost_its_state_still_arrive(pair: Pair) -> None:
    before = TaskChange(task_id(2), "app", soon(), 1)
    await pair.publisher.publish(before)
    await pair.received.wait_for(before)
    await pair.lose_state()
    after = TaskChange(task_id(2), "app", soon(), 1)
    await pair.publisher.publish(after)
    await pair.received.wait_for(after)


async def test_changes_published_after_the_tier_lost_its_settled_state_still_arrive(pair: Pair) -> None:
    # Given a change received and then settled (a DB-poll reader keeps no row of it once it is more
    # than its settle time old): the reader is idle, its watermark at the change
    before = TaskChange(task_id(4), "app", soon(), 1)
    await pair.publisher.publish(before)
    await pair.received.wait_for(before)
    await asyncio.sleep(SETTLE_S + 0.5)
    # When the tier loses its state (its ids restart) and a change is published
    await pair.lose_state()
    after = TaskChange(task_id(4), "app", soon(), 2)
    await pair.publisher.publish(after)
    # Then it still reaches the owner
    await pair.received.wait_for(after)


async def test_an_idle_tier_is_polled_without_warnings(pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    # Given a tier that carried a change long enough ago that nothing of it is pending
    change = TaskChange(task_id(6), "app", soon(), 1)
    await pair.publisher.publish(change)
    await pair.received.wait_for(change)
    # When it stays idle for many polls
    with caplog.at_level(logging.WARNING, logger="tjobs.hot_tier"):
        await asyncio.sleep(SETTLE_S + 1.0)
    # Then nothing was logged: an idle cluster is quiet
    assert [record.getMessage() for record in caplog.records if record.name.startswith("tjobs.hot_tier")] == []


async def test_publish_does_not_raise_while_the_tier_is_down(pair: Pair) -> None:
    if not pair.remote:
        pytest.skip("the in-process hot tier has no server that could be down")
    await pair.outage(pair)
    change = TaskChange(task_id(9), "app", soon(), 1)
    started = time.monotonic()
    await pair.publisher.publish(change)  # logs, never raises
    await pair.publisher.publish(TaskChange(task_id(9), "app", soon(), 1))
    assert time.monotonic() - started < 2.0
    assert change in pair.published.changes


async def test_a_remote_tier_applies_only_the_shards_the_node_watches(pair: Pair) -> None:
    if not pair.remote:
        pytest.skip("the in-process hot tier serves the one node that owns every shard")
    await pair.owner.watch(frozenset({1}))
    other = TaskChange(task_id(2), "app", soon(), 1)
    mine = TaskChange(task_id(1), "app", soon(), 1)
    await pair.publisher.publish(other)
    await pair.publisher.publish(mine)
    await pair.received.wait_for(mine)
    await asyncio.sleep(0.1)  # a few more polls
    assert other not in pair.received.changes


async def test_remote_changes_record_their_lag(pair: Pair) -> None:
    change = TaskChange(task_id(11), "app", soon(), 1)
    # A change is stamped when its publish begins (the DB-poll tier's row is written after that), so its
    # lag is bounded by the time from before the publish, not from its return: a clean-clone run's MariaDB
    # write took ~75 ms and the lag (88 ms) passed a bound that left the write out.
    started = time.monotonic()
    await pair.publisher.publish(change)
    await pair.received.wait_for(change)
    since_publish_began_s = time.monotonic() - started
    if not pair.remote:
        assert pair.received.lags_s == []  # nothing travelled
        return
    assert len(pair.received.lags_s) == 1
    assert 0 <= pair.received.lags_s[0] <= since_publish_began_s + 0.05  # + the wall clock's ms steps


# ---- Redis slices: which the owner reads, and when -------------------------------------------------


@pytest.fixture
async def redis_prefix(redis_url: str) -> AsyncIterator[str]:
    prefix = f"tjobs:ct{secrets.token_hex(4)}:hot"
    yield prefix
    admin = aioredis.from_url(redis_url)
    keys = [key async for key in admin.scan_iter(match=f"{prefix}:*")]
    if keys:
        await admin.delete(*keys)
    await admin.aclose()


def manual_pair(url: str, prefix: str, clock: ManualClock) -> tuple[RedisHotTier, RedisHotTier]:
    """Two Redis hot tiers whose loops poll once at start, then only when a test calls ``poll_once``."""
    return (
        RedisHotTier(url, prefix=prefix, clock=clock, near_ms=NEAR_MS, poll_interval_ms=3_600_000),
        RedisHotTier(url, prefix=prefix, clock=clock, near_ms=NEAR_MS, poll_interval_ms=3_600_000),
    )


@pytest.mark.redis
async def test_owner_reads_the_shards_it_watches_from_the_moment_it_gains_them(
    redis_url: str, redis_prefix: str
) -> None:
    clock = ManualClock(SystemClock().now_ms())
    publisher, owner = manual_pair(redis_url, redis_prefix, clock)
    received = Recorder()
    await publisher.start(Recorder())
    await owner.start(received)
    try:
        await owner.watch(frozenset({1}))
        mine = TaskChange(task_id(1), "app", clock.now_ms() + 1000, 1)
        other = TaskChange(task_id(2), "app", clock.now_ms() + 1000, 1)
        await publisher.publish(mine)
        await publisher.publish(other)
        await owner.poll_once()
        assert received.changes == [mine]
        # A gained shard: what was published before is the load's (the store had it first); what
        # is published from now on is read.
        await owner.watch(frozenset({1, 2}))
        later = TaskChange(task_id(2), "app", clock.now_ms() + 2000, 1)
        await publisher.publish(later)
        await owner.poll_once()
        assert received.changes == [mine, later]
        await owner.poll_once()
        assert received.changes == [mine, later]  # each change once
        await owner.watch(frozenset({2}))  # a released shard is no longer read
        await publisher.publish(TaskChange(task_id(1), "app", clock.now_ms() + 1000, 2))
        await owner.poll_once()
        assert received.changes == [mine, later]
    finally:
        await publisher.stop()
        await owner.stop()


@pytest.mark.redis
async def test_change_for_a_later_minute_is_read_once_that_minute_is_next(redis_url: str, redis_prefix: str) -> None:
    start_ms = (SystemClock().now_ms() // MINUTE_MS) * MINUTE_MS + 1000
    clock = ManualClock(start_ms)
    publisher, owner = manual_pair(redis_url, redis_prefix, clock)
    received = Recorder()
    await publisher.start(Recorder())
    await owner.start(received)
    try:
        await owner.watch(frozenset({4}))
        later = TaskChange(task_id(4), "app", start_ms + 4 * MINUTE_MS, 1)
        await publisher.publish(later)
        await owner.poll_once()
        assert received.changes == []  # its slice (minute + 4) is outside the window
        clock.advance(2 * MINUTE_MS)
        await owner.poll_once()
        assert received.changes == []
        clock.advance(MINUTE_MS)  # now its minute is the next one: 60..120 s ahead of the instant
        await owner.poll_once()
        assert received.changes == [later]
    finally:
        await publisher.stop()
        await owner.stop()


@pytest.mark.redis
async def test_update_and_stop_are_read_at_once_whatever_the_instant(redis_url: str, redis_prefix: str) -> None:
    clock = ManualClock(SystemClock().now_ms())
    publisher, owner = manual_pair(redis_url, redis_prefix, clock)
    received = Recorder()
    await publisher.start(Recorder())
    await owner.start(received)
    try:
        await owner.watch(EVERY_SHARD)
        await owner.poll_once()
        moved = TaskChange(task_id(6), "app", clock.now_ms() + 8 * MINUTE_MS, 2)  # the old entry must go now
        stop = TaskChange(task_id(6), "app", None, 3)
        await publisher.publish(moved)
        await publisher.publish(stop)
        await owner.poll_once()
        assert received.changes == [moved, stop]
    finally:
        await publisher.stop()
        await owner.stop()


# ---- DB poll: the table comes with the schema ---------------------------------------------------


@pytest.mark.mariadb
async def test_db_poll_refuses_a_schema_without_its_table_and_nodes_start_together_once_migrated(
    mysql_url: str,
) -> None:
    prefix = f"tjobsct_{secrets.token_hex(4)}"
    storage = StorageSettings(urls=[mysql_url], topology="1x1x16", database_prefix=prefix)
    admin = create_engine_for(mysql_url, storage)
    async with admin.begin() as conn:
        await conn.execute(text(f"CREATE DATABASE `{prefix}_00`"))  # a database no `tjobs migrate` ran on
    try:
        bare = DbPollHotTier(
            SqlHotChangeLog(storage), origin="node-0", clock=SystemClock(), near_ms=NEAR_MS, poll_interval_ms=50
        )
        with pytest.raises(StorageNotMigrated, match="tjobs migrate"):
            await bare.start(Recorder())
        await bare.stop()

        await migrate(storage)
        nodes = [
            DbPollHotTier(
                SqlHotChangeLog(storage), origin=f"node-{i}", clock=SystemClock(), near_ms=NEAR_MS, poll_interval_ms=50
            )
            for i in range(6)
        ]
        try:
            await asyncio.gather(*(node.start(Recorder()) for node in nodes))
        finally:
            await asyncio.gather(*(node.stop() for node in nodes))
    finally:
        async with admin.begin() as conn:
            await conn.execute(text(f"DROP DATABASE IF EXISTS `{prefix}_00`"))
        await admin.dispose()


# ---- DB poll: concurrent publishes share a transaction ------------------------------------------


@pytest.fixture(params=["dbpoll", pytest.param("dbpoll-mariadb", marks=pytest.mark.mariadb)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[DbTier, Pair]]:
    async with db_tier(request, tmp_path) as tier:
        db_pair = await _start(tier.publisher, tier.owner, True, tier.truncate, tier.drop)
        yield tier, db_pair
        await db_pair.publisher.stop()
        await db_pair.owner.stop()


def engine_of(hot: DbPollHotTier) -> AsyncEngine:
    """The engine of ``hot``'s SQL log (its own, while it runs)."""
    assert isinstance(hot.log, SqlHotChangeLog)
    return hot.log.engine


def commits_of(hot: DbPollHotTier) -> list[int]:
    """The transactions ``hot`` commits from now on (its poll reads commit none), one entry each."""
    commits: list[int] = []
    event.listen(engine_of(hot).sync_engine, "commit", lambda _conn: commits.append(1))
    return commits


async def rows_of(tier: DbTier, changes: list[TaskChange]) -> int:
    """How many of ``changes`` have their row in the table (read on a connection of its own)."""
    ids = {change.task_id for change in changes}
    logged = await tier.publisher.log.read_after(0, 1_000_000)
    return sum(1 for _, change in logged if change.task_id in ids)


async def test_db_poll_writes_concurrent_publishes_in_fewer_transactions_and_the_owner_reads_them_all(
    db: tuple[DbTier, Pair],
) -> None:
    tier, pair = db
    commits = commits_of(tier.publisher)
    # When 50 changes are published at once (50 creates answered by one node)
    changes = [TaskChange(task_id(index % SHARDS), "app", soon(), 1) for index in range(50)]
    await asyncio.gather(*(pair.publisher.publish(change) for change in changes))
    # Then each was written before its publish returned, in fewer transactions than changes
    assert await rows_of(tier, changes) == len(changes)
    assert 1 <= len(commits) < len(changes)
    # And the owner reads every one
    for change in changes:
        await pair.received.wait_for(change)


async def test_db_poll_bounds_the_rows_of_a_transaction_and_writes_the_rest_in_the_next(
    db: tuple[DbTier, Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    tier, pair = db
    monkeypatch.setattr(dbpoll, "FLUSH_ROWS", 8)
    commits = commits_of(tier.publisher)
    changes = [TaskChange(task_id(index % SHARDS), "app", soon(), 1) for index in range(20)]
    await asyncio.gather(*(pair.publisher.publish(change) for change in changes))
    assert await rows_of(tier, changes) == len(changes)
    assert len(commits) >= 3  # 8 + 8 + 4 at most per transaction
    for change in changes:
        await pair.received.wait_for(change)


async def test_db_poll_a_failed_write_is_logged_once_per_transaction_and_later_changes_still_arrive(
    db: tuple[DbTier, Pair], caplog: pytest.LogCaptureFixture
) -> None:
    tier, pair = db
    # Given a table the publisher cannot write to for a while
    await tier.execute("ALTER TABLE hot_changes RENAME TO hot_changes_away")
    changes = [TaskChange(task_id(index % SHARDS), "app", soon(), 1) for index in range(20)]
    with caplog.at_level(logging.WARNING, logger="tjobs.hot_tier"):
        # When changes are published at once: none raises, each is applied on the publishing node
        await asyncio.gather(*(pair.publisher.publish(change) for change in changes))
    assert all(change in pair.published.changes for change in changes)
    # Then the failure is logged per transaction, not per change, and says how many it left out
    failed = [record for record in caplog.records if getattr(record, "action", None) == "hot_publish_failed"]
    assert 1 <= len(failed) < len(changes)
    assert sum(int(record.getMessage().split()[0]) for record in failed) == len(changes)
    # And once the table is back, a change published then reaches the owner (the lost ones are the
    # cycle load's, from the store: the hot tier is never the truth)
    await tier.execute("ALTER TABLE hot_changes_away RENAME TO hot_changes")
    after = TaskChange(task_id(3), "app", soon(), 2)
    await pair.publisher.publish(after)
    await pair.received.wait_for(after)


async def test_db_poll_stops_in_bounded_time_while_a_write_hangs_and_releases_its_publishers(
    db: tuple[DbTier, Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    tier, pair = db
    monkeypatch.setattr(dbpoll, "STOP_WRITE_WAIT_S", 0.2)
    engine = engine_of(tier.publisher)

    real_begin = AsyncEngine.begin

    @contextlib.asynccontextmanager
    async def hung() -> AsyncIterator[None]:  # a server that never answers the write
        await asyncio.Event().wait()
        yield

    def begin(self: AsyncEngine) -> contextlib.AbstractAsyncContextManager[Any]:
        return hung() if self is engine else real_begin(self)

    monkeypatch.setattr(AsyncEngine, "begin", begin)
    # Given a publish waiting for a write that hangs
    change = TaskChange(task_id(5), "app", soon(), 1)
    publishing = asyncio.create_task(pair.publisher.publish(change))
    await asyncio.sleep(0.05)
    assert not publishing.done()
    # When the node stops: it does not wait for the write longer than its bound
    started = time.monotonic()
    await asyncio.wait_for(pair.publisher.stop(), 5.0)
    assert time.monotonic() - started < 2.0
    # And the publish returns (the change is the cycle load's), without raising
    await asyncio.wait_for(publishing, 1.0)
    assert change in pair.published.changes


async def test_db_poll_reads_back_none_of_its_own_changes_but_another_process_of_its_name_reads_them(
    db: tuple[DbTier, Pair],
) -> None:
    tier, pair = db
    # Given a second process under the publisher's node name (a restart overlapping the old process's
    # stop, or a handover between two processes of one name), watching every shard
    again = DbPollHotTier(tier.new_log(), origin="node-a", clock=SystemClock(), near_ms=NEAR_MS, poll_interval_ms=20)
    seen_again = Recorder()
    await again.start(seen_again)
    await again.watch(EVERY_SHARD)
    read: list[tuple[int, str]] = []  # (id, origin) of every row the publisher's poll got from its log
    real_read_after = tier.publisher.log.read_after

    async def recording(after_id: int, limit: int, **kwargs: Any) -> Any:
        rows = await real_read_after(after_id, limit, **kwargs)
        read.extend((row_id, row.origin) for row_id, row in rows)
        return rows

    tier.publisher.log.read_after = recording  # type: ignore[method-assign]
    try:
        await tier.publisher.watch(EVERY_SHARD)
        commits = commits_of(tier.publisher)
        # When the publisher publishes 50 changes at once
        changes = [TaskChange(task_id(index % SHARDS), "app", soon(), 1) for index in range(50)]
        await asyncio.gather(*(pair.publisher.publish(change) for change in changes))
        # Then the owner and the other process of the publisher's name get each one
        for change in changes:
            await pair.received.wait_for(change)
            await seen_again.wait_for(change)
        await asyncio.sleep(SETTLE_S + 0.2)  # the publisher's poll goes past its rows
        # And the publisher applied each once (at its publish), and its poll parsed none of its rows
        # but the last of the log at a poll: at most one a write
        assert pair.published.changes == changes
        mine = {row_id for row_id, origin in read if origin == tier.publisher.origin}
        assert len(mine) <= len(commits)
        assert tier.publisher.origin != again.origin and tier.publisher.origin.startswith("node-a")
    finally:
        await again.stop()
