"""Top-level fixtures: where the real services are, and the rule that CI never skips them.

``scripts/services.sh up`` starts (or finds) MariaDB, etcd, Redis, RabbitMQ and NATS and writes their URLs to
``.services/env``; ``scripts/test.sh`` exports them. Each fixture below checks that its service really
answers before handing out the URL. When it does not:

* with ``CI`` set, the test **fails** (a missing service must never turn a CI run green);
* otherwise it is skipped with a hint to run ``scripts/services.sh up``.

Tests marked ``mariadb``, ``etcd``, ``redis``, ``rabbitmq`` or ``nats`` may not be skipped at all under CI,
whatever skips them.
Fixtures of a single area belong in that area's own ``conftest.py``, not here.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import socket
import ssl
import threading
import urllib.request
from collections.abc import Callable, Generator
from typing import Any
from urllib.parse import urlsplit

import httpx._transports.default
import pytest

from tests.cluster.rigs import rig_group
from tests.timeout_tasks import pytest_timeout_cancel_timer, pytest_timeout_set_timer  # noqa: F401 (hooks)
from tjobs.node import GC_THRESHOLDS

DEFAULT_MYSQL_URL = "mysql+asyncmy://root@127.0.0.1:3306"
DEFAULT_ETCD_URL = "http://127.0.0.1:2379"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
SERVICE_MARKERS = ("mariadb", "etcd", "redis", "rabbitmq", "nats", "browser")
PROBE_TIMEOUT_S = 3.0

_MUST_RUN = pytest.StashKey[str]()


@functools.cache
def _default_tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


@pytest.fixture(scope="session", autouse=True)
def _one_tls_context_for_every_http_client() -> Generator[None]:
    """httpx builds a TLS context for every client it makes, loading certifi's CA bundle each time (tens of
    ms of CPU): the suite makes thousands of clients (one per tenant, per SDK call), and in a profile of the
    API tests 16 % of the CPU went there. One verifying context serves every client that asks for the
    default (the tests speak plain HTTP on loopback, and a context is not changed by using it)."""
    build = httpx.create_ssl_context  # what httpx._transports.default imported

    def shared(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is True and cert is None and trust_env:
            return _default_tls_context()
        return build(verify=verify, cert=cert, trust_env=trust_env)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx._transports.default, "create_ssl_context", shared)
        yield


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _require(service: str, env_var: str, url: str, probe: Callable[[str], None]) -> str:
    """Return ``url`` if ``probe`` succeeds; otherwise fail (CI) or skip (elsewhere)."""
    try:
        probe(url)
    except Exception as exc:
        message = (
            f"{service} does not answer at {url} ({env_var}): {type(exc).__name__}: {exc}. "
            "Run `scripts/services.sh up` (or `make test`), or point "
            f"{env_var} at a running {service}."
        )
        if _in_ci():
            pytest.fail(f"CI needs every service; {message}", pytrace=False)
        pytest.skip(message)
    return url


def _probe_mysql(url: str) -> None:
    import pymysql
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    connection = pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        connect_timeout=int(PROBE_TIMEOUT_S),
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            if cursor.fetchone() != (1,):
                raise RuntimeError("SELECT 1 did not return 1")
    finally:
        connection.close()


def _probe_etcd(url: str) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 2379
    with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
        pass
    with urllib.request.urlopen(f"http://{host}:{port}/version", timeout=PROBE_TIMEOUT_S) as response:
        version = json.loads(response.read())
    if "etcdserver" not in version:
        raise RuntimeError(f"/version answered {version!r}, not an etcd server")


def _probe_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S)
    try:
        if client.ping() is not True:
            raise RuntimeError("PING did not answer PONG")
    finally:
        client.close()


def _probe_amqp(url: str) -> None:
    """The AMQP 0-9-1 protocol header is answered by a ``Connection.Start`` frame (type 1, channel 0).

    The login itself is not probed: a broker refusing the URL's user fails the tests that use it."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), PROBE_TIMEOUT_S) as sock:
        sock.settimeout(PROBE_TIMEOUT_S)
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        greeting = sock.recv(7)
    if greeting[:3] != b"\x01\x00\x00":
        raise RuntimeError(f"answered {greeting!r}, not an AMQP 0-9-1 broker")


def _probe_nats(url: str) -> None:
    """The server greets with ``INFO {...}``; JetStream must be on."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), PROBE_TIMEOUT_S) as sock:
        sock.settimeout(PROBE_TIMEOUT_S)
        greeting = sock.recv(4096)
    if not greeting.startswith(b"INFO "):
        raise RuntimeError(f"greeted with {greeting[:40]!r}, not a NATS server")
    if not json.loads(greeting[5:].split(b"\r\n", 1)[0]).get("jetstream"):
        raise RuntimeError("the NATS server runs without JetStream (start it with -js)")


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """SQLAlchemy URL of a MariaDB server (``mysql+asyncmy://root@host:port``) that answers."""
    url = os.environ.get("TJOBS_TEST_MYSQL_URL") or DEFAULT_MYSQL_URL
    return _require("MariaDB", "TJOBS_TEST_MYSQL_URL", url, _probe_mysql)


@pytest.fixture(scope="session")
def etcd_url() -> str:
    """``http://host:port`` of an etcd server that answers."""
    url = os.environ.get("TJOBS_TEST_ETCD_URL") or DEFAULT_ETCD_URL
    return _require("etcd", "TJOBS_TEST_ETCD_URL", url, _probe_etcd)


@pytest.fixture(scope="session")
def amqp_url() -> str:
    """``amqp://user:password@host:port/vhost`` of a RabbitMQ broker that lets that user in."""
    url = os.environ.get("TJOBS_TEST_AMQP_URL") or DEFAULT_AMQP_URL
    return _require("RabbitMQ", "TJOBS_TEST_AMQP_URL", url, _probe_amqp)


@pytest.fixture(scope="session")
def nats_url() -> str:
    """``nats://host:port`` of a NATS server with JetStream."""
    url = os.environ.get("TJOBS_TEST_NATS_URL") or DEFAULT_NATS_URL
    return _require("NATS", "TJOBS_TEST_NATS_URL", url, _probe_nats)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """``redis://host:port/db`` of a Redis server that answers."""
    url = os.environ.get("TJOBS_TEST_REDIS_URL") or DEFAULT_REDIS_URL
    return _require("Redis", "TJOBS_TEST_REDIS_URL", url, _probe_redis)


# A test that takes one of these fixtures (directly or through another fixture) needs that service,
# whether or not its module says so: it gets the service's marker, so that ``make check`` (no services)
# leaves it out and CI may not skip it.
SERVICE_FIXTURES = {
    "mysql_url": "mariadb",
    "etcd_url": "etcd",
    "redis_url": "redis",
    "amqp_url": "rabbitmq",
    "nats_url": "nats",
    "chromium": "browser",  # tests/console: Debian's chromium, which scripts/browser.sh installs
}
# Fixtures of services on fixed ports and state directories that the tests kill and restart (a cluster
# rig's etcd, Redis and two MariaDB servers): every test using one rig runs on the same xdist worker.
# tests/cluster has one rig, or two when TJOBS_TEST_CLUSTER2_DIR gives it a second (scripts/test.sh does,
# with ports of its own): each module's tests then use the rig tests/cluster/rigs.py assigns it, and each
# rig is a group ("cluster-rig", "cluster-rig-2"). The fault suite shares tests/cluster's first rig unless
# TJOBS_TEST_CHAOS_DIR gives it one of its own (scripts/test.sh does), and then it is a group of its own.
SHARED_RIG_FIXTURES: dict[str, Callable[[pytest.Item], str]] = {
    "infra": lambda item: rig_group(item.path),
    "chaos_infra": lambda item: "chaos-rig" if os.environ.get("TJOBS_TEST_CHAOS_DIR") else "cluster-rig",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups as the items stand
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark service tests by the fixtures they take, group the tests of one killable rig on one xdist
    worker, and under CI remember which tests need a real service: those may not be skipped."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for fixture in sorted(fixtures & SERVICE_FIXTURES.keys()):
            item.add_marker(SERVICE_FIXTURES[fixture])
        for fixture in sorted(fixtures & SHARED_RIG_FIXTURES.keys()):
            item.add_marker(pytest.mark.xdist_group(SHARED_RIG_FIXTURES[fixture](item)))
    if not _in_ci():
        return
    for item in items:
        needed = [name for name in SERVICE_MARKERS if item.get_closest_marker(name) is not None]
        if needed:
            item.stash[_MUST_RUN] = ", ".join(needed)


def pytest_configure(config: pytest.Config) -> None:
    """Collecting (importing tjobs, its libraries and the tests) runs with a node's collector thresholds too:
    0.35 of ~3.2 s of CPU less per collection, and every xdist worker collects."""
    gc.set_threshold(*GC_THRESHOLDS)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """The test process collects garbage as a node process does (:func:`tjobs.node.settle_heap`): what exists
    once the tests are collected (the modules of tjobs, its libraries and the tests, the parametrizations) is
    frozen out of the collector's reach, and young collections run every 50 000 allocations, not every 700.
    With CPython's defaults the collector took ~14 % of a worker's CPU (3.2 of 22.2 s over five API modules,
    2.6 s of it in full collections walking that heap again and again); now ~2 %. Garbage is still collected,
    and what a finalizer reports still fails the run: pytest collects once more when the session ends."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _aiosqlite_workers() -> set[threading.Thread]:
    """The threads of the aiosqlite connections not closed yet (one each, named after its target)."""
    return {thread for thread in threading.enumerate() if thread.name.endswith("(_connection_worker_thread)")}


@pytest.fixture(autouse=True)
def _sqlite_connections_left_open_fail_their_own_test() -> Generator[None]:
    """A test after which an aiosqlite connection it opened is still open (its worker thread alive once the
    test's fixtures and event loop are gone) is followed at once by a garbage collection: a connection the
    test left to the collector (a store, pool or engine not closed on some path) then fails this test's
    teardown with aiosqlite's ``ResourceWarning``, instead of whichever later test the collector happened to
    run in (tests/unit/test_sqlite_store_close.py). Tests that close what they open, and those whose
    connections a module's or session's node keeps, collect nothing more (README, "Running the tests")."""
    before = _aiosqlite_workers()
    yield
    if _aiosqlite_workers() - before:
        gc.collect()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Turn a skip of a service test into a failure under CI (skip marks, pytest.skip, importorskip)."""
    report = yield
    needed = item.stash.get(_MUST_RUN, None)
    if needed and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"CI must run tests marked {needed}, but this one was skipped: {reason}\n"
            "Start the services (scripts/services.sh up) instead of skipping."
        )
    return report
