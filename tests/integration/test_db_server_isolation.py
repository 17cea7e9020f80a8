"""Fault isolation across database servers, and fencing of a frozen former owner, on real MariaDB and etcd.

Given a node whose shards live on two database servers, when one server goes away the shards of the
other keep firing on time, the node keeps its job groups, and the lost server's shards resume when it
answers again; with two nodes, no group moves. The second server is the same MariaDB reached through
a TCP proxy this test starts, cuts (listener and every connection closed: a killed server) or freezes
(every byte held: a stopped server), and restores.

Given a former owner frozen inside a fire transaction (a connection holding ``SELECT … FOR UPDATE`` on
a task row, its sessions on record, its lease gone), the node that takes the jobs over ends its
sessions and fires the task on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncmy
import httpx
import pytest
from sqlalchemy.engine import make_url

from sharding import shard_for_key, shard_of_task_id
from testkit import RunningNode, run_node
from testkit.ports import free_port
from tests.contract.backends import drop_databases
from tests.receiver import Receiver
from tjobs.settings import Settings, StorageSettings, load_settings
from tjobs.stores.migrate import migrate
from tjobs.stores.shard_fence import fence_table_sql
from tjobs.stores.sql_sessions import BOOTED_AT_SQL

pytestmark = [pytest.mark.mariadb, pytest.mark.etcd]

OUTAGE_S = 8.0  # well past cluster.db_unreachable_max_s (3 s), the old node-wide fence
LATENESS_BOUND_S = 1.0  # issue 10: tasks on the healthy server, p99 lateness <= 1 s during the outage
CREATE_BOUND_S = 1.0  # issue 28: a create of a task on the healthy server during the outage


class TcpProxy:
    """127.0.0.1:<port> forwarded to a target. :meth:`cut` drops the listener and every connection
    (a killed server); :meth:`freeze` holds every byte and new connection until :meth:`thaw` (a
    SIGSTOPped server: connections stay open, nothing answers)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

    async def cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        # The client's connection is the proxy's from its accept: :meth:`cut` drops it even while it
        # waits for a thaw or for its upstream (a node's pools reconnect at any moment, teardown too).
        self._writers.add(client_writer)
        try:
            await self._flowing.wait()
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._writers.add(upstream_writer)

            async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                try:
                    while chunk := await reader.read(65536):
                        await self._flowing.wait()
                        writer.write(chunk)
                        await writer.drain()
                except (OSError, ConnectionError):
                    pass
                finally:
                    writer.transport.abort()
                    self._writers.discard(writer)

            await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))
        finally:
            client_writer.transport.abort()
            self._writers.discard(client_writer)


@pytest.fixture
async def proxy(mysql_url: str) -> AsyncIterator[TcpProxy]:
    url = make_url(mysql_url)
    started = TcpProxy(url.host or "127.0.0.1", url.port or 3306)
    await started.start()
    yield started
    started.thaw()
    await started.cut()


APPS_ON_HEALTHY = "apps table on the healthy server"
APPS_ON_LOST = "apps table on the lost server"  # issue 28: the server every delivery's app comes from


@pytest.fixture
async def two_server_settings(
    request: pytest.FixtureRequest, mysql_url: str, etcd_url: str, proxy: TcpProxy
) -> AsyncIterator[Settings]:
    """Two database servers, the second reached through the proxy (the one a test takes away). The apps
    table lives on the first server of ``storage.urls``: the direct one, unless the test's parameter
    (``indirect``) says :data:`APPS_ON_LOST`."""
    proxy_url = mysql_url.replace(f":{make_url(mysql_url).port or 3306}", f":{proxy.port}")
    assert proxy_url != mysql_url
    apps_on_lost = getattr(request, "param", APPS_ON_HEALTHY) == APPS_ON_LOST
    urls = [proxy_url, mysql_url] if apps_on_lost else [mysql_url, proxy_url]
    storage = StorageSettings(urls=urls, topology="2x2x2", database_prefix=f"tjiso_{secrets.token_hex(3)}")
    # With the apps table on the lost server, the app's and the target's cache entries expire early in
    # the outage (several times), whatever their age at the fault: with the defaults (10 s, 5 s) the
    # app's expired 6-7 s into the 8-s outage, too late to show a delivery waiting on the server.
    caches = {"directory": {"app_ttl_s": 2.0}, "targets": {"cache_ttl_s": 2.0}} if apps_on_lost else {}
    settings = load_settings(
        None,
        **caches,
        storage=storage.model_dump(),
        scheduler={"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3},
        compensator={"interval_s": 0.5, "grace_s": 2.0},
        callbacks={"backoff_base_ms": 100, "backoff_max_ms": 1000, "timeout_ms": 2000},
        cluster={
            "etcd_endpoints": [etcd_url],
            "name": f"iso-{secrets.token_hex(4)}",
            "hot_tier": "off",
            "sync_interval_ms": 100,
        },
        allow_loopback_callbacks=True,
    )
    await migrate(settings.storage)
    yield settings
    if not proxy.listening:
        await proxy.start()  # the test stopped during the outage: reach the second server to clean up
    await drop_databases(settings.storage)


@contextlib.asynccontextmanager
async def settled_heap() -> AsyncIterator[None]:
    """What ``tjobs serve`` does once its node has started (:func:`tjobs.node.settle_heap`): freeze what the
    process holds, so that the collector's full passes walk only what is made afterwards; undone at the end.
    The process here is pytest's, and its full passes walked every object of the tests run before in it
    too (thousands in a full run): 0.2-0.7 s each at load 6-10 in this file alone, one inside the outage
    (issue 31), on the loop the node fires on."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def wait_until(condition: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s} s")
        await asyncio.sleep(0.05)


@pytest.mark.timing
@pytest.mark.parametrize("two_server_settings", [APPS_ON_HEALTHY, APPS_ON_LOST], indirect=True)
@pytest.mark.parametrize("fault", ["killed", "frozen"])
async def test_shards_of_a_healthy_server_keep_firing_on_time_while_another_server_is_down(
    two_server_settings: Settings, proxy: TcpProxy, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    # With the apps table on the lost server (issue 28), every delivery's app (and a named target) is
    # on a server that does not answer: the healthy server's callbacks go on from the node's last good
    # copy (tjobs.service.directory_cache), since the app's cache entry expires during the outage.
    caplog.set_level(logging.INFO)
    # The node fires on this test's event loop: its heap is settled as a served node's is, and the client
    # is made before the fault, since making one (its TLS context) takes tens of ms of CPU, which the
    # healthy server's fires would wait for.
    async with (
        Receiver() as receiver,
        run_node(two_server_settings) as running,
        settled_heap(),
        httpx.AsyncClient(base_url=running.base_url) as probe,
        httpx.AsyncClient(base_url=running.base_url) as creates,
    ):
        node = running.node
        shard_count = node.topology.shard_count
        await wait_until(lambda: node.runner.owned == frozenset(range(shard_count)), 15)
        lost = f"127.0.0.1:{proxy.port}"
        (healthy,) = set(node.store.database_servers()) - {lost}

        # Given interval tasks every second on both servers, firing (half of them naming a target: the
        # target's copy comes from the apps server too)
        task_ids = await register_every_second_tasks(running, receiver, count=16, name_a_target=True)
        server_of = {task_id: node.store.server_of_shard(shard_of_task_id(task_id)) for task_id in task_ids}
        assert set(server_of.values()) == {healthy, lost}, "the tasks should land on both servers"
        # and an app creating tasks on the healthy server, its key accepted by the node before the fault
        creator, creator_key = await running.create_app("iso-creates")
        create_keys = keys_on(running, creator.id, healthy, 4, "during")
        creates.headers["authorization"] = f"Bearer {creator_key}"
        assert (
            await creates.post("/v1/tasks", json=create_body(create_keys[0], receiver.url("/c")))
        ).status_code == 201
        key_read_s = time.monotonic()
        await asyncio.sleep(3.0)

        # When the second server goes away for longer than the node-wide fence's limit
        cut_ms = time.time_ns() // 1_000_000
        if fault == "killed":
            await proxy.cut()
        else:
            proxy.freeze()
        await asyncio.sleep(OUTAGE_S / 2)
        view = node.coordinator.describe()
        listed = view["database_servers"]
        assert isinstance(listed, list)
        servers = {s["server"]: s for s in listed}
        assert servers[lost]["reachable"] is False and servers[healthy]["reachable"] is True
        assert "://" not in repr(view["database_servers"]) and "root@" not in repr(view["database_servers"])
        ready = await probe.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert node.runner.owned == frozenset(range(shard_count)), "the node must keep its groups"
        await asyncio.sleep(OUTAGE_S / 2)
        # And creates of tasks on the healthy server, once the key's cache entry has expired, are answered
        # at once: from the key's last good copy when the apps table is on the lost server (issue 28)
        assert time.monotonic() - key_read_s > two_server_settings.directory.app_ttl_s
        took_s: list[float] = []
        answers: list[int | str] = []  # checked once the server is back (a hung create must not hold it down)
        for key in create_keys[1:]:
            started_s = time.monotonic()
            try:
                body = create_body(key, receiver.url("/c"))
                answers.append((await creates.post("/v1/tasks", json=body, timeout=3 * CREATE_BOUND_S)).status_code)
            except httpx.TimeoutException:
                answers.append("no answer")
            took_s.append(time.monotonic() - started_s)
        print(f"creates on the healthy server during the outage: {', '.join(f'{t:.3f}' for t in took_s)} s")
        restore_ms = time.time_ns() // 1_000_000
        if fault == "killed":
            await proxy.start()
        else:
            proxy.thaw()
        await asyncio.sleep(4.0)

    assert answers == [201] * len(answers), f"creates on the healthy server during the outage: {answers}"
    assert max(took_s) <= CREATE_BOUND_S, f"creates on the healthy server took {took_s} s during the outage"
    # Then every instant of the healthy server's tasks during the outage was delivered on time
    deliveries: dict[tuple[int, int], float] = {}
    for request in receiver.requests:
        task_id = int(request.headers["tjobs-task-id"])
        scheduled_ms = int(request.headers["tjobs-scheduled-at"])
        lateness_s = (request.received_at_ns / 1e6 - scheduled_ms) / 1000
        deliveries.setdefault((task_id, scheduled_ms), lateness_s)
    late: list[tuple[int, int, float]] = []
    for task_id in (t for t, server in server_of.items() if server == healthy):
        instants = sorted(s for (t, s) in deliveries if t == task_id and cut_ms <= s <= restore_ms)
        assert len(instants) >= int(OUTAGE_S) - 1, (task_id, instants)
        assert all(b - a == 1000 for a, b in itertools.pairwise(instants)), (task_id, instants)
        late += [
            (task_id, s, deliveries[(task_id, s)]) for s in instants if deliveries[(task_id, s)] > LATENESS_BOUND_S
        ]
    lateness = sorted(
        deliveries[(t, s)] for (t, s) in deliveries if server_of.get(t) == healthy and cut_ms <= s <= restore_ms
    )
    p99_s = lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))]
    print(
        f"healthy server during the outage: {len(lateness)} instants, "
        f"lateness p99 {p99_s:.3f} s, max {lateness[-1]:.3f} s"
    )
    assert not late, f"tasks on the healthy server fired late during the outage (p99 {p99_s:.3f} s): {late[:10]}"
    # And the lost server's tasks fire again once it answers
    for task_id in (t for t, server in server_of.items() if server == lost):
        assert any(s >= restore_ms for (t, s) in deliveries if t == task_id), task_id
    actions = [getattr(record, "action", None) for record in caplog.records]
    assert "db_server_unreachable" in actions and "db_server_recovered" in actions
    assert "fenced" not in actions


async def register_every_second_tasks(
    running: RunningNode, receiver: Receiver, count: int, name_a_target: bool = False
) -> list[int]:
    """``count`` tasks firing every second from 2 s on; with ``name_a_target``, every other one calls
    back through a named HTTP target (to the same receiver) instead of an inline URL."""
    _, api_key = await running.create_app("iso")
    async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {api_key}"}) as client:
        if name_a_target:
            target = {"name": "iso-hook", "protocol": "http", "settings": {"url": receiver.url("/hook")}}
            created = await client.post("/v1/targets", json=target)
            assert created.status_code == 201, created.text
        start_ms = (time.time_ns() // 1_000_000 // 1000 + 2) * 1000
        ids = []
        for index in range(count):
            inline = not name_a_target or index % 2 == 0
            reply = await client.post(
                "/v1/tasks",
                json={
                    "name": f"iso-{index}",
                    "schedule": {"kind": "interval", "every_ms": 1000, "start_at_ms": start_ms},
                    "callback": {"url": receiver.url("/hook")} if inline else {"target": "iso-hook"},
                },
            )
            assert reply.status_code == 201, reply.text
            ids.append(int(reply.json()["id"]))
    return ids


# ---- a frozen former owner's row locks ----------------------------------------------------------------


@pytest.fixture
async def one_server_settings(mysql_url: str, etcd_url: str) -> AsyncIterator[Settings]:
    storage = StorageSettings(urls=[mysql_url], topology="2x2x2", database_prefix=f"tjfz_{secrets.token_hex(3)}")
    settings = load_settings(
        None,
        storage=storage.model_dump(),
        scheduler={"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3},
        callbacks={"backoff_base_ms": 100, "backoff_max_ms": 1000, "timeout_ms": 2000},
        cluster={
            "etcd_endpoints": [etcd_url],
            "name": f"fz-{secrets.token_hex(4)}",
            "hot_tier": "off",
            "sync_interval_ms": 100,
        },
        allow_loopback_callbacks=True,
    )
    await migrate(settings.storage)
    yield settings
    await drop_databases(settings.storage)


@pytest.mark.timing
@pytest.mark.parametrize("recorded_in", ["this run of the server", "an earlier run of the server"])
async def test_a_frozen_former_owners_row_lock_does_not_delay_the_new_owners_fire(
    one_server_settings: Settings,
    mysql_url: str,
    etcd_url: str,
    caplog: pytest.LogCaptureFixture,
    recorded_in: str,
) -> None:
    caplog.set_level(logging.INFO)
    settings = one_server_settings
    async with Receiver() as receiver:
        # Given a task due in a few seconds, registered through a node that then stops
        async with run_node(settings) as first:
            _, api_key = await first.create_app("frozen")
            due_ms = (time.time_ns() // 1_000_000 // 1000 + 8) * 1000
            async with httpx.AsyncClient(
                base_url=first.base_url, headers={"authorization": f"Bearer {api_key}"}
            ) as client:
                reply = await client.post(
                    "/v1/tasks",
                    json={
                        "name": "frozen",
                        "schedule": {"kind": "at", "at_ms": due_ms},
                        "callback": {"url": receiver.url("/hook")},
                    },
                )
            assert reply.status_code == 201, reply.text
            task_id = int(reply.json()["id"])
            tasks_sql = first.node.store.layout.shards[shard_of_task_id(task_id)].tasks_sql  # type: ignore[attr-defined]

        # And a former owner, frozen inside a fire transaction: it holds the task's row lock, its
        # lease is gone, and its sessions are on record
        url = make_url(mysql_url)
        frozen = await asyncmy.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
        )
        try:
            await frozen.begin()
            async with frozen.cursor() as cursor:
                await cursor.execute(f"SELECT id FROM {tasks_sql} WHERE id = %s FOR UPDATE", (task_id,))
                await cursor.execute(BOOTED_AT_SQL)
                (booted_at_s,) = await cursor.fetchone()
            server = f"{url.host or '127.0.0.1'}:{url.port or 3306}"
            if recorded_in == "an earlier run of the server":
                booted_at_s -= 3600
            record = {"servers": {server: {"booted_at_s": int(booted_at_s), "ids": [frozen.thread_id()]}}}
            await put_etcd(etcd_url, f"/tjobs/{settings.cluster.name}/sessions/frozen-node", json.dumps(record))

            # When a new owner takes the jobs over before the instant
            async with run_node(settings) as second:
                await wait_until(lambda: bool(second.node.runner.owned), 10)
                assert time.time_ns() // 1_000_000 < due_ms - 1000, "the takeover took too long to test"
                if recorded_in == "an earlier run of the server":
                    # Then ids recorded under another start of the server are not killed: they may
                    # name someone else's sessions now (the lock holder lives on)
                    await asyncio.sleep(1.0)
                    async with frozen.cursor() as cursor:
                        await cursor.execute("SELECT 1")
                    assert "db_sessions_ended" not in [getattr(r, "action", None) for r in caplog.records]
                    return
                await wait_until(lambda: bool(receiver.requests), (due_ms - time.time_ns() // 1_000_000) / 1000 + 10)
        finally:
            frozen.close()

    # Then the fire was not held up by the frozen owner's lock
    request = receiver.requests[0]
    lateness_s = (request.received_at_ns / 1e6 - int(request.headers["tjobs-scheduled-at"])) / 1000
    assert lateness_s <= LATENESS_BOUND_S, lateness_s
    assert "db_sessions_ended" in [getattr(record, "action", None) for record in caplog.records]


async def put_etcd(etcd_url: str, key: str, value: str) -> None:
    import aetcd

    from tjobs.cluster.etcd import _host_port

    host, port = _host_port(etcd_url)
    async with aetcd.Client(host=host, port=port) as client:
        await client.put(key.encode(), value.encode())


async def test_no_group_moves_between_nodes_while_one_server_is_down(
    two_server_settings: Settings, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # Given two nodes sharing the jobs
    caplog.set_level(logging.INFO)
    async with contextlib.AsyncExitStack() as stack:
        nodes = [
            await stack.enter_async_context(run_node(two_server_settings.model_copy(update={"node_id": f"n{i}"})))
            for i in range(2)
        ]
        shard_count = nodes[0].node.topology.shard_count
        await wait_until(
            lambda: (
                all(n.node.runner.owned for n in nodes) and sum(len(n.node.runner.owned) for n in nodes) == shard_count
            ),
            20,
        )
        before = [n.node.runner.owned for n in nodes]
        caplog.clear()

        # When the second server goes away for longer than the node-wide fence's limit
        await proxy.cut()
        await asyncio.sleep(OUTAGE_S)

        # Then both nodes pause that server's shards and keep their groups: no failover, no fence
        assert [n.node.runner.owned for n in nodes] == before
        lost = f"127.0.0.1:{proxy.port}"
        lost_shards = frozenset(s for s in range(shard_count) if nodes[0].node.store.server_of_shard(s) == lost)
        for n in nodes:
            assert n.node.runner.paused == lost_shards
        actions = [getattr(record, "action", None) for record in caplog.records]
        assert not {"fenced", "group_failover", "group_released", "lease_lost"} & set(actions), actions
        await proxy.start()
        await wait_until(lambda: all(not n.node.runner.paused for n in nodes), 10)


# ---- creates whose server is down: a prompt 503, nothing stored that was not acknowledged ---------------

CLIENT_TIMEOUT_S = 20.0  # far past storage.create_timeout_s: a create still waiting by then went unanswered


def keys_on(running: RunningNode, app_id: str, server: str, count: int, prefix: str) -> list[str]:
    """``count`` idempotency keys whose shard lives on ``server``."""
    store, shards = running.node.store, running.node.topology.shard_count
    keys = (f"{prefix}-{index}" for index in itertools.count())
    return list(
        itertools.islice((k for k in keys if store.server_of_shard(shard_for_key(app_id, k, shards)) == server), count)
    )


async def create_sent_as_the_server_stops(
    client: httpx.AsyncClient, proxy: TcpProxy, home: Any, body: dict[str, object]
) -> httpx.Response:
    """POST ``body`` (a task of shard ``home``, on the server behind ``proxy``) while the test holds the
    fence row of the shard's database (``FOR UPDATE``, on a connection of its own to the proxy's target,
    not through the proxy): the create's one round trip (fence, insert, count, ``COMMIT``) waits in the server
    for that lock. Once it does, the proxy freezes (nothing more reaches the node: a stopped server) and
    the lock goes, so the transaction commits in the server while its answer is held. Returns the create's
    answer. Deterministic where a freeze before the create was not: whether that create was ever sent
    depended on the node's pool. The node's cycle loads share it; once a checkout found no free connection
    and began opening one to the stopped server, every later checkout waited behind it (asyncmy's pool
    holds its lock while it connects), so the create was never sent and was answered, truly, that nothing
    was stored (two CI runs at load ~9, 2026-12-06)."""
    host, port = proxy.target
    locker = await asyncmy.connect(host=host, port=port, user="root")
    try:
        await locker.begin()
        async with locker.cursor() as cursor:
            await cursor.execute(f"SELECT epoch FROM {fence_table_sql(home.database)} WHERE id = 1 FOR UPDATE")
        answer = asyncio.ensure_future(client.post("/v1/tasks", json=body))
        deadline = time.monotonic() + 10
        async with locker.cursor() as cursor:
            while True:  # the create's fence check, waiting for the row (MariaDB's INNODB_TRX did not list it)
                await cursor.execute(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND INFO LIKE %s",
                    (f"(SELECT CASE WHEN f.epoch % FROM {fence_table_sql(home.database)} f LOCK IN SHARE MODE)%",),
                )
                (waiting,) = await cursor.fetchone()
                if waiting:
                    break
                assert time.monotonic() < deadline and not answer.done(), "the create never waited in the server"
                await asyncio.sleep(0.02)
        proxy.freeze()
        await locker.rollback()
    finally:
        locker.close()
    return await answer


def create_body(key: str, url: str) -> dict[str, object]:
    return {"name": key, "key": key, "schedule": {"kind": "delay", "delay_ms": 3_600_000}, "callback": {"url": url}}


def assert_storage_503(reply: httpx.Response) -> dict[str, object]:
    """A 503 naming the storage, with Retry-After; returns the error body."""
    assert reply.status_code == 503, reply.text
    assert int(reply.headers["retry-after"]) >= 1
    error = reply.json()["error"]
    assert error["code"] in ("storage_unavailable", "storage_outcome_unknown"), error
    return dict(error)


async def assert_stored_only_if_unknown(client: httpx.AsyncClient, key: str, error: dict[str, object]) -> None:
    """A definite 503 stored nothing; an unknown outcome names the task id that may have been stored.

    The read goes again while it answers 503 (for at most 10 s): right after the server came back, a CI run
    got one 503 for it, and what was stored is the question here, not the first read's luck."""
    reply = await client.get("/v1/tasks", params={"key": key})
    for _ in range(20):
        if reply.status_code != 503:
            break
        logging.getLogger(__name__).warning("the read after the server came back answered 503: %s", reply.text)
        await asyncio.sleep(0.5)
        reply = await client.get("/v1/tasks", params={"key": key})
    assert reply.status_code == 200, reply.text
    found = reply.json()["items"]
    if error["code"] == "storage_unavailable":
        assert found == [], f"a create answered 503 {error} was stored: {found}"
    else:
        details = error["details"]
        assert isinstance(details, dict) and details["stored"] == "unknown"
        assert [item["id"] for item in found] in ([], [details["task_id"]]), (found, details)


@pytest.mark.parametrize("fault", ["killed", "frozen"])
async def test_creates_on_a_lost_server_answer_503_promptly_and_store_nothing_unacknowledged(
    two_server_settings: Settings, proxy: TcpProxy, fault: str
) -> None:
    async with run_node(two_server_settings) as running:
        node = running.node
        healthy, lost = node.store.database_servers()
        app, api_key = await running.create_app("unavailable")
        url = "http://127.0.0.1:9/hook"
        lost_keys = keys_on(running, app.id, lost, 4, "lost")
        healthy_keys = keys_on(running, app.id, healthy, 2, "healthy")
        headers = {"authorization": f"Bearer {api_key}"}
        async with httpx.AsyncClient(base_url=running.base_url, headers=headers, timeout=CLIENT_TIMEOUT_S) as client:
            try:
                # Given a create on the second server went through (its connection stays pooled)
                warm = await client.post("/v1/tasks", json=create_body(lost_keys[3], url))
                assert warm.status_code == 201, warm.text

                if fault == "killed":
                    # And then that server goes away
                    await proxy.cut()

                    # When a create lands on it before the node's health check has noticed
                    first = await client.post("/v1/tasks", json=create_body(lost_keys[0], url))
                else:
                    # When a create's transaction is in the server (waiting there for its database's fence
                    # row, which the test holds) as the server stops; then it runs on, unanswered
                    shard = shard_for_key(app.id, lost_keys[0], node.topology.shard_count)
                    home = node.store.layout.shards[shard]  # type: ignore[attr-defined]
                    first = await create_sent_as_the_server_stops(client, proxy, home, create_body(lost_keys[0], url))

                # Then it answers 503 with Retry-After (not a hang, not a 5xx without a reason); a stopped
                # server got the insert and may commit it (it did here) before it answers, so the answer must
                # not say nothing was stored
                first_error = assert_storage_503(first)
                if fault == "frozen":
                    assert first_error["code"] == "storage_outcome_unknown", first_error

                # And once the node knows the server is down, a create on it is refused as storing nothing
                await wait_until(lambda: node.db_health.unreachable_servers() == [lost], 15)
                refused = await client.post("/v1/tasks", json=create_body(lost_keys[1], url))
                assert assert_storage_503(refused)["code"] == "storage_unavailable"

                # While creates on the healthy server are stored, and a batch answers per item
                assert (await client.post("/v1/tasks", json=create_body(healthy_keys[0], url))).status_code == 201
                batch = await client.post(
                    "/v1/tasks/batch",
                    json={"tasks": [create_body(healthy_keys[1], url), create_body(lost_keys[2], url)]},
                )
                assert batch.status_code == 200, batch.text
                items = batch.json()["items"]
                assert items[0]["status"] == 201, items
                assert items[1]["status"] == 503 and items[1]["error"]["code"] == "storage_unavailable", items

                # And when the server is back, nothing answered storage_unavailable was stored
                if fault == "killed":
                    await proxy.start()
                else:
                    proxy.thaw()
                await wait_until(lambda: not node.db_health.unreachable_servers(), 15)
                await assert_stored_only_if_unknown(client, lost_keys[0], first_error)
                if fault == "frozen":  # the insert ran on in the stopped server: it was stored
                    found = (await client.get("/v1/tasks", params={"key": lost_keys[0]})).json()["items"]
                    assert [item["id"] for item in found] == [first_error["details"]["task_id"]], found  # type: ignore[index]
                for key in lost_keys[1:3]:
                    assert (await client.get("/v1/tasks", params={"key": key})).json()["items"] == [], key
                for key in healthy_keys:
                    assert len((await client.get("/v1/tasks", params={"key": key})).json()["items"]) == 1, key
            finally:  # never stop the node with its server frozen or gone (its pools would wait on it)
                proxy.thaw()
                if not proxy.listening:
                    await proxy.start()


async def test_the_proxy_drops_a_connection_it_holds_frozen_when_cut(proxy: TcpProxy) -> None:
    # CI (2026-11-29): a connection accepted at teardown, not yet piped, was never closed by cut() and
    # failed the test that used the proxy with an unclosed-transport warning.
    proxy.freeze()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    await asyncio.sleep(0.1)  # accepted: waiting for the thaw
    await proxy.cut()
    assert await asyncio.wait_for(reader.read(), 2.0) == b""  # dropped, not left hanging
    writer.close()
