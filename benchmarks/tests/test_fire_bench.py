"""The bench's callback sink, run as its own process and fed signed callbacks over real HTTP."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from benchmarks import fire
from benchmarks._db_cost import COUNTERS, DbReading
from benchmarks.fire import BenchError, run_fire_bench, run_register_bench
from benchmarks.report import to_json
from testkit.sink import SINK_SERVERS, CallbackRecords, SinkConfig, SinkProcess

SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()


def signed_headers(
    secret: str, flow_id: str, task_id: int, scheduled_ms: int, attempt: int, body: bytes
) -> dict[str, str]:
    now = datetime.now(UTC)
    signature = Webhook(secret).sign(flow_id, now, body.decode())
    return {
        "webhook-id": flow_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
        "tjobs-task-id": str(task_id),
        "tjobs-scheduled-at": str(scheduled_ms),
        "tjobs-attempt": str(attempt),
        "content-type": "application/json",
    }


@pytest.fixture(params=SINK_SERVERS)
async def sink(request: pytest.FixtureRequest) -> AsyncIterator[SinkProcess]:
    async with SinkProcess(SinkConfig(secrets=(SECRET,), verify_every=1, server=request.param)) as running:
        yield running


async def test_sink_records_every_callback_and_counts_flows(sink: SinkProcess) -> None:
    # Given three callbacks of two tasks (one a retry of the same flow), one signed with a wrong
    # secret, and one without tjobs headers
    scheduled_ms = int(time.time() * 1000)
    body = b'{"i": 1}'
    calls = [
        signed_headers(SECRET, "flow-a", 7_000_000_000_001, scheduled_ms, 1, body),
        signed_headers(SECRET, "flow-a", 7_000_000_000_001, scheduled_ms, 2, body),
        signed_headers(SECRET, "flow-b", 7_000_000_000_002, scheduled_ms + 5, 1, body),
        signed_headers(OTHER_SECRET, "flow-c", 7_000_000_000_003, scheduled_ms + 9, 1, body),
    ]
    before_us = time.time_ns() // 1000
    async with aiohttp.ClientSession() as session:
        for headers in calls:
            async with session.post(sink.callback_url, data=body, headers=headers) as response:
                # Then each is answered 204 at once
                assert response.status == 204
        async with session.post(sink.callback_url, data=body, headers={"x": "y"}) as response:
            assert response.status == 204
    after_us = time.time_ns() // 1000

    # Then the stats count recorded callbacks, distinct flows, the malformed one and the bad signature
    stats = await sink.stats()
    assert (stats.received, stats.flows, stats.tasks, stats.malformed) == (4, 3, 3, 1)
    assert (stats.signatures_checked, stats.signatures_failed) == (4, 1)

    # And the records carry task, scheduled instant, flow index and attempt of each, in arrival order
    records = await sink.records()
    assert len(records) == 4
    task_a, task_b, task_c = 7_000_000_000_001, 7_000_000_000_002, 7_000_000_000_003
    assert list(records.task_id) == [task_a, task_a, task_b, task_c]
    assert list(records.scheduled_ms) == [scheduled_ms, scheduled_ms, scheduled_ms + 5, scheduled_ms + 9]
    assert list(records.flow) == [0, 0, 1, 2]
    assert list(records.attempt) == [1, 2, 1, 1]
    assert all(before_us <= recv_us <= after_us for recv_us in records.recv_us)
    assert list(records.recv_us) == sorted(records.recv_us)


async def test_sink_accepts_any_method_and_subpath(sink: SinkProcess) -> None:
    headers = {"webhook-id": "f", "tjobs-task-id": "1", "tjobs-scheduled-at": "2", "tjobs-attempt": "1"}
    async with aiohttp.ClientSession() as session:
        for method, url in (("PUT", sink.callback_url), ("GET", sink.callback_url + "/orders/close")):
            async with session.request(method, url, headers=headers) as response:
                assert response.status == 204
    assert (await sink.stats()).received == 2


async def raw_exchange(sink: SinkProcess, request: bytes, answers: int) -> list[bytes]:
    """Send ``request`` (bytes as they go on the wire) on one connection; the status lines of the first
    ``answers`` answers, and b"closed" if the server then closed the connection."""
    port = int(sink.base_url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        statuses: list[bytes] = []
        for _ in range(answers):
            status = await asyncio.wait_for(reader.readline(), 5)
            statuses.append(status.strip())
            length = 0
            while (line := await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
        if await asyncio.wait_for(reader.read(1), 5) == b"":
            statuses.append(b"closed")
        return statuses
    finally:
        writer.close()


CALLBACK_HEADERS = b"webhook-id: f\r\ntjobs-task-id: 1\r\ntjobs-scheduled-at: 2\r\n"


async def test_the_lean_sink_answers_pipelined_requests_in_order_and_honours_connection_close() -> None:
    async with SinkProcess(SinkConfig(server="lean")) as sink:
        post = b"POST /cb HTTP/1.1\r\nHost: x\r\n" + CALLBACK_HEADERS + b"Content-Length: 2\r\n\r\n{}"
        last = b"POST /cb/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + CALLBACK_HEADERS + b"\r\n"
        statuses = await raw_exchange(sink, post + post + b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n" + last, 4)
        assert statuses == [b"HTTP/1.1 204 No Content"] * 2 + [
            b"HTTP/1.1 404 Not Found",
            b"HTTP/1.1 204 No Content",
            b"closed",
        ]
        assert (await sink.stats()).received == 3


async def test_the_lean_sink_refuses_what_it_cannot_parse_and_bodies_over_the_cap() -> None:
    async with SinkProcess(SinkConfig(server="lean")) as sink:
        assert await raw_exchange(sink, b"NOT HTTP AT ALL\r\n\r\n", 1) == [b"HTTP/1.1 400 Bad Request", b"closed"]
        huge = b"POST /cb HTTP/1.1\r\nHost: x\r\n" + CALLBACK_HEADERS + b"Content-Length: 2000000\r\n\r\n"
        answer = await raw_exchange(sink, huge + b"x" * 1_100_000, 1)
        assert answer == [b"HTTP/1.1 413 Payload Too Large", b"closed"]
        assert (await sink.stats()).received == 0


def test_a_sink_server_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="sink server must be one of lean, aiohttp, not 'nginx'"):
        SinkConfig(server="nginx")


async def test_sink_without_secrets_checks_no_signature() -> None:
    async with SinkProcess() as sink, aiohttp.ClientSession() as session:
        headers = signed_headers(SECRET, "flow-a", 1, 2, 1, b"{}")
        async with session.post(sink.callback_url, data=b"{}", headers=headers) as response:
            assert response.status == 204
        stats = await sink.stats()
    assert (stats.received, stats.signatures_checked) == (1, 0)


async def test_sink_process_exits_when_stopped() -> None:
    sink = SinkProcess()
    await sink.start()
    pid = sink.pid
    assert pid is not None
    await sink.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_sink_consuming_records_messages_as_callbacks() -> None:
    # Given a sink that serves gRPC Receiver.Fire (a consumer, not HTTP), checking every signature
    import grpc

    from tjobs.delivery.grpc_proto import receiver_pb2, receiver_pb2_grpc

    config = SinkConfig(secrets=(SECRET,), verify_every=1, consume={"protocol": "grpc"})
    async with SinkProcess(config) as sink, grpc.aio.insecure_channel(sink.consumer_address) as channel:
        fire = receiver_pb2_grpc.ReceiverStub(channel).Fire
        # When two flows arrive, one twice (a retry), and a third signed with another secret
        body = b'{"i": 1}'
        for secret, flow, attempt in (
            (SECRET, "1-5", 1),
            (SECRET, "1-5", 2),
            (SECRET, "2-5", 1),
            (OTHER_SECRET, "3-5", 1),
        ):
            headers = signed_headers(secret, flow, int(flow[0]), 5, attempt, body)
            await fire(receiver_pb2.FireRequest(flow_id=flow, payload=body, headers=headers))
        stats = await sink.stats()
        records = await sink.records()
    # Then each is recorded as a callback would be, its signature checked
    assert (stats.received, stats.flows, stats.tasks, stats.malformed) == (4, 3, 3, 0)
    assert (stats.signatures_checked, stats.signatures_failed) == (4, 1)
    assert (list(records.task_id), list(records.flow), list(records.attempt)) == (
        [1, 1, 2, 3],
        [0, 0, 1, 2],
        [1, 2, 1, 1],
    )


def test_records_round_trip_through_bytes() -> None:
    records = CallbackRecords()
    records.append(1_700_000_000_000_123, 2**62, 1_700_000_000_000, 0, 1)
    records.append(1_700_000_000_000_456, 5, -1, 1, 3)
    decoded = CallbackRecords.from_bytes(records.to_bytes())
    assert decoded == records
    with pytest.raises(ValueError, match="does not hold"):
        CallbackRecords.from_bytes(records.to_bytes()[:-1])


# ---- the fire bench end to end against a stand-in node --------------------------------------------


class StandInNode:
    """Serves the node's contract for the bench (create app, create task) and calls each task back at its
    instant, with the same headers a real node sends; ``twice`` tasks get a second flow, ``retried``
    tasks a second attempt of the same flow, and ``dropped`` tasks no callback at all; a flow read
    (``GET /v1/flows/{id}``) answers the retried ones' stored history and 404 for the others."""

    def __init__(self, twice: set[int], retried: set[int], dropped: set[int]) -> None:
        self.twice, self.retried, self.dropped = twice, retried, dropped
        self.secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
        self.next_id = 1_000_000_000_000
        self.pending: set[asyncio.Task[None]] = set()
        self.session: aiohttp.ClientSession | None = None
        self.deleted: set[int] = set()
        self.app_bodies: list[dict[str, Any]] = []
        self.retried_flow_ids: set[str] = set()  # the API ids of the flows called back twice

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/apps", self.create_app)
        app.router.add_post("/v1/tasks", self.create_task)
        app.router.add_delete("/v1/tasks/{id}", self.delete_task)
        app.router.add_get("/v1/flows/{id}", self.get_flow)
        return app

    async def get_flow(self, request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == "Bearer key"
        flow_id = request.match_info["id"]
        if flow_id not in self.retried_flow_ids:
            return web.json_response({"error": {"code": "not_found"}}, status=404)
        history = [{"attempt": 1, "duration_ms": 3000, "error": "timed out"}, {"attempt": 2, "status_code": 204}]
        return web.json_response({"id": flow_id, "status": "delivered", "attempts": 2, "attempt_history": history})

    async def delete_task(self, request: web.Request) -> web.Response:
        self.deleted.add(int(request.match_info["id"]))
        return web.Response(status=204)

    async def create_app(self, request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == "Bearer admin"
        body = await request.json()
        self.app_bodies.append(body)
        assert body["allowed_callback_hosts"] == ["127.0.0.1"]
        assert body["name"].startswith("bench")
        return web.json_response({"id": "app_1", "api_key": "key", "secrets": [self.secret]}, status=201)

    async def create_task(self, request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == "Bearer key"
        body = await request.json()
        self.next_id += 1
        task_id, index, at_ms = self.next_id, body["payload"]["i"], body["schedule"]["at_ms"]
        if at_ms > time.time() * 1000 + 86_400_000:
            return web.json_response({"id": str(task_id), "next_run_at_ms": at_ms}, status=201)
        if index in self.retried:
            self.retried_flow_ids.add(f"{task_id}-{at_ms}")
        if index not in self.dropped:
            flows = [f"flow-{task_id}-a"] + ([f"flow-{task_id}-b"] if index in self.twice else [])
            for flow_id in flows:
                url = body["callback"]["url"]
                for attempt in [1, 2] if index in self.retried else [1]:
                    task = asyncio.create_task(self.call_back(url, task_id, at_ms, flow_id, attempt))
                    self.pending.add(task)
                    task.add_done_callback(self.pending.discard)
        return web.json_response({"id": str(task_id), "next_run_at_ms": at_ms}, status=201)

    async def call_back(self, url: str, task_id: int, at_ms: int, flow_id: str, attempt: int) -> None:
        await asyncio.sleep(max(0.0, at_ms / 1000 - time.time()) + 0.05 * (attempt - 1))
        body = b'{"i": 0}'
        assert self.session is not None
        headers = signed_headers(self.secret, flow_id, task_id, at_ms, attempt, body)
        async with self.session.post(url, data=body, headers=headers) as response:
            assert response.status == 204


@pytest.fixture
async def stand_in_node() -> AsyncIterator[tuple[str, StandInNode]]:
    node = StandInNode(twice={3}, retried={5, 6}, dropped={7})
    runner = web.AppRunner(node.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    async with aiohttp.ClientSession() as session:
        node.session = session
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", node
        for task in list(node.pending):
            task.cancel()
    await runner.cleanup()


async def test_fire_bench_counts_missing_duplicates_and_lateness(
    stand_in_node: tuple[str, StandInNode],
) -> None:
    # Given a node that fires 200 tasks over 1 s: task 3 twice (two flows), tasks 5 and 6 with a
    # retry of the same flow, task 7 never
    base_url, node = stand_in_node
    phases: dict[str, tuple[int, int]] = {}

    def progress(phase: str, done: int, total: int) -> None:
        phases[phase] = (done, total)

    result = await run_fire_bench(
        base_url,
        "admin",
        tasks=200,
        window_s=1.0,
        lead_s=1.0,
        register_rate=None,
        concurrency=16,
        progress=progress,
        drain_timeout_s=2.0,
        settle_s=0.3,
        verify_every=1,
    )
    summary = to_json(result)
    # Then the bench counts exactly those, and the rest arrived on time
    assert (summary["registered"], summary["registration_errors"]) == (200, 0)
    assert summary["missing"] == 1
    assert summary["duplicates_detail"] == {"same_flow": 2, "extra_flows": 1, "tasks_with_extra_flows": 1}
    assert summary["duplicates"] == 3
    assert summary["retried_callbacks"] == 2
    assert len(node.retried_flow_ids) == 2  # and the two retried flows' stored histories are read back
    assert [flow["flow_id"] for flow in summary["retried_flows"]] == sorted(node.retried_flow_ids)
    assert all(flow["attempt_history"][0]["error"] == "timed out" for flow in summary["retried_flows"])
    assert summary["drained"] is False  # one task never called back
    assert 0 <= summary["lateness_ms"]["p50"] < 100
    assert 100 < summary["fires_per_s"] < 400  # 199 tasks over ~1 s
    assert summary["sink"]["signatures_checked"] == 202 and summary["sink"]["signatures_failed"] == 0
    assert phases["register"] == (200, 200)
    assert phases["fire"] == (199, 200)  # callbacks of 199 distinct tasks out of 200


async def test_the_bench_app_has_the_products_concurrency_cap_unless_told(
    stand_in_node: tuple[str, StandInNode],
) -> None:
    base_url, node = stand_in_node
    common: dict[str, Any] = {"tasks": 5, "window_s": 0.2, "lead_s": 0.5, "drain_timeout_s": 1.0, "settle_s": 0.1}
    default = await run_fire_bench(base_url, "admin", **common)
    raised = await run_fire_bench(base_url, "admin", max_concurrency=1000, **common)
    assert [body["max_concurrency"] for body in node.app_bodies] == [100, 1000]
    assert (to_json(default)["settings"]["max_concurrency"], to_json(raised)["settings"]["max_concurrency"]) == (
        100,
        1000,
    )


async def test_register_bench_measures_creates_and_deletes_its_tasks(
    stand_in_node: tuple[str, StandInNode],
) -> None:
    base_url, node = stand_in_node
    result = await run_register_bench(base_url, "admin", tasks=300, concurrency=8)
    summary = to_json(result)
    assert (summary["registered"], summary["registration_errors"], summary["fires_per_s"]) == (300, 0, None)
    assert summary["registrations_per_s"] > 0 and summary["create_latency_ms"]["p50"] is not None
    assert len(node.deleted) == 300 and not node.pending  # due in 30 days: nothing was called back


async def test_batch_registration_fails_clearly_while_the_node_has_no_batch_endpoint(
    stand_in_node: tuple[str, StandInNode],
) -> None:
    base_url, _ = stand_in_node
    with pytest.raises(BenchError, match="tasks:batch"):
        await run_register_bench(base_url, "admin", tasks=10, batch_size=5)


async def test_without_lead_or_rate_a_probe_sizes_the_lead_and_is_deleted(
    stand_in_node: tuple[str, StandInNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, node = stand_in_node
    monkeypatch.setattr(fire, "LEAD_EXTRA_S", 0.5)
    result = await run_fire_bench(base_url, "admin", tasks=50, window_s=0.5, drain_timeout_s=2.0, settle_s=0.1)
    summary = to_json(result)
    rate = summary["settings"]["calibrated_register_rate"]
    assert rate > 0
    assert summary["settings"]["lead_s"] == pytest.approx(50 / rate * fire.LEAD_MARGIN + 0.5, abs=0.01)
    assert len(node.deleted) == fire.PROBE_MIN  # the probe's tasks, due in 30 days, are gone
    assert summary["late_registrations"] == 0 and summary["registered"] == 50


class ScriptedDb:
    """Stands in for MariaDB's probe: each reading 1,001 statements and 0.5 s of CPU past the one before."""

    def __init__(self) -> None:
        self.reads = 0

    def read(self) -> DbReading:
        self.reads += 1
        return DbReading(0.5 * self.reads, {"Questions": 1_001 * self.reads, "Com_insert": 5 * self.reads})


async def test_with_a_database_probe_the_fire_bench_reports_its_cost_per_fire(
    stand_in_node: tuple[str, StandInNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the stand-in node firing 5 tasks, and a probe of the database (quiet from 0.1 s on)
    base_url, _ = stand_in_node
    monkeypatch.setattr(fire, "QUIET_MIN_S", 0.1)
    db = ScriptedDb()
    common: dict[str, Any] = {"tasks": 5, "window_s": 0.2, "lead_s": 1.0, "drain_timeout_s": 1.0, "settle_s": 0.1}
    result = await run_fire_bench(base_url, "admin", db_probe=db, **common)
    summary = to_json(result)
    # Then it was read three times: quiet, the fire phase's start and its end; the cost is per delivered task
    assert db.reads == 3 and summary["delivered"] == 5
    assert (summary["mariadb_cpu_us_per_fire"], summary["statements_per_fire"]) == (100_000.0, 200.0)
    cost = summary["mariadb_per_fire"]
    assert cost["gross"]["counters"] == {"Com_insert": 1.0} and cost["net"] is not None
    assert 0.1 <= cost["quiet"]["seconds"] < 1.0 and cost["quiet"]["statements_per_s"] > 0
    assert set(cost["absent"]) == set(COUNTERS) - {"Questions", "Com_insert"}
    assert any(warning.startswith("MariaDB has no status counter") for warning in summary["warnings"])
    # And without one there is no database figure
    assert to_json(await run_fire_bench(base_url, "admin", **common))["mariadb_per_fire"] is None


async def test_with_a_database_probe_the_register_bench_reports_its_cost_per_create(
    stand_in_node: tuple[str, StandInNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the stand-in node taking 20 creates, and a probe of the database (quiet for 0.1 s first)
    base_url, node = stand_in_node
    monkeypatch.setattr(fire, "QUIET_MIN_S", 0.1)
    db = ScriptedDb()
    result = await run_register_bench(base_url, "admin", tasks=20, concurrency=4, db_probe=db, keep_tasks=True)
    summary = to_json(result)
    # Then it was read three times (quiet, the registration's start and end); the cost is per stored task
    assert db.reads == 3 and summary["registered"] == 20
    assert (summary["mariadb_cpu_us_per_create"], summary["statements_per_create"]) == (25_000.0, 50.0)
    cost = summary["mariadb_per_create"]
    assert cost["gross"]["counters"] == {"Com_insert": 0.25} and cost["net"] is not None
    assert "mariadb_cpu_us_per_fire" not in summary
    # and the client's CPU over the registration alone is given; kept tasks are not deleted
    assert summary["bench_cpu_s"]["client_register"] is not None
    assert not node.deleted
