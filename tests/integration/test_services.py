"""The real services answer through the client libraries tjobs uses (asyncmy, PyMySQL, SQLAlchemy,
aetcd, redis.asyncio). If one of these fails, every other integration test failing is the same problem."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import asyncmy
import pymysql
import pytest
import redis.asyncio
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url


def _mysql(url: str) -> URL:
    return make_url(url)


def _pymysql_row(url: URL, sql: str) -> tuple[Any, ...] | None:
    """The first row ``sql`` answers over a fresh PyMySQL connection to ``url``."""
    connection = pymysql.connect(
        host=url.host, port=url.port or 3306, user=url.username or "root", password=url.password or ""
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()
    finally:
        connection.close()


@pytest.mark.mariadb
async def test_mariadb_answers_select_1_over_asyncmy(mysql_url: str) -> None:
    url = _mysql(mysql_url)
    connection = await asyncmy.connect(
        host=url.host, port=url.port or 3306, user=url.username or "root", password=url.password or ""
    )
    try:
        async with connection.cursor() as cursor:
            await cursor.execute("SELECT 1")
            assert await cursor.fetchone() == (1,)
    finally:
        connection.close()
        await connection.ensure_closed()


@pytest.mark.mariadb
def test_mariadb_answers_select_1_over_pymysql(mysql_url: str) -> None:
    assert _pymysql_row(_mysql(mysql_url), "SELECT 1") == (1,)


@pytest.mark.mariadb
async def test_mariadb_url_is_usable_as_an_sqlalchemy_async_url(mysql_url: str) -> None:
    # Imported here so that a missing greenlet (SQLAlchemy 2.1 needs the `asyncio` extra) fails this
    # test alone instead of the whole module's collection.
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(mysql_url)
    try:
        async with engine.connect() as connection:
            assert (await connection.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()


# What scripts/services.sh gives a MariaDB it starts (--max-connections) and raises a reused one's
# max_connections to. The default run's four workers open up to ~150 connections at once (in-process
# nodes' pools beside the other workers' stores): Debian's default of 151 answered creates with 1040
# 'Too many connections' (503) in the clean-clone runs of 2026-12-05 and 2026-12-07.
RUN_CONNECTIONS = 1000


@pytest.mark.mariadb
def test_mariadb_admits_the_connections_a_parallel_run_opens(mysql_url: str) -> None:
    url = _mysql(mysql_url)
    row = _pymysql_row(url, "SELECT @@max_connections")
    assert row is not None
    assert int(row[0]) >= RUN_CONNECTIONS, (
        f"the test MariaDB at {url.host}:{url.port} admits {row[0]} connections; a parallel run opens up to"
        f" ~150 at once: `bash scripts/services.sh up` raises a reused server's max_connections to"
        f" {RUN_CONNECTIONS}, or set it so yourself"
    )


@pytest.mark.etcd
async def test_etcd_put_get_and_lease_expiry_by_revoke(etcd_url: str) -> None:
    import aetcd

    parts = urlsplit(etcd_url)
    prefix = f"/tjobs-test/services/{uuid.uuid4().hex}".encode()
    async with aetcd.Client(host=parts.hostname or "127.0.0.1", port=parts.port or 2379, timeout=5) as client:
        # Given a plain key and a key bound to a lease
        await client.put(prefix + b"/plain", b"v1")
        lease = await client.lease(ttl=30)
        await client.put(prefix + b"/leased", b"v2", lease=lease)

        # Then both read back, the lease is alive and owns its key
        plain = await client.get(prefix + b"/plain")
        leased = await client.get(prefix + b"/leased")
        assert plain is not None and plain.value == b"v1"
        assert leased is not None and leased.value == b"v2" and leased.lease == lease.id
        assert 0 < await lease.remaining_ttl() <= 30

        # When the lease is revoked, its key disappears with it
        await lease.revoke()
        assert await client.get(prefix + b"/leased") is None
        assert await client.get(prefix + b"/plain") is not None

        await client.delete(prefix + b"/plain")
        assert await client.get(prefix + b"/plain") is None


@pytest.mark.redis
async def test_redis_answers_ping_and_set_get(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url)
    key = f"tjobs-test:services:{uuid.uuid4().hex}"
    try:
        assert await client.ping() is True
        assert await client.set(key, b"v", px=30_000) is True
        assert await client.get(key) == b"v"
        assert 0 < await client.pttl(key) <= 30_000
    finally:
        await client.delete(key)
        await client.aclose()
