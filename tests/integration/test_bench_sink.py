"""The bench's callback sink, run as its own process and fed signed callbacks over real HTTP."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import aiohttp
import pytest
from standardwebhooks.webhooks import Webhook

from tjobs.bench.sink import CallbackRecords, SinkConfig, SinkProcess

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


@pytest.fixture
async def sink() -> AsyncIterator[SinkProcess]:
    async with SinkProcess(SinkConfig(secrets=(SECRET,), verify_every=1)) as running:
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
    assert (stats.received, stats.flows, stats.malformed) == (4, 3, 1)
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


def test_records_round_trip_through_bytes() -> None:
    records = CallbackRecords()
    records.append(1_700_000_000_000_123, 2**62, 1_700_000_000_000, 0, 1)
    records.append(1_700_000_000_000_456, 5, -1, 1, 3)
    decoded = CallbackRecords.from_bytes(records.to_bytes())
    assert decoded == records
    with pytest.raises(ValueError, match="does not hold"):
        CallbackRecords.from_bytes(records.to_bytes()[:-1])
