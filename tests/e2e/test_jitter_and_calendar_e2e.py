"""A node fires a jittered interval late by its jitter, never early, keyed by the nominal instants, and
skips the instant its calendar excludes (embedded store)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from testkit import RunningNode
from tests.e2e.test_fire_path import ON_TIME_MS, client_for, now_ms
from tests.receiver import Receiver

JITTER_MS = 400


def wall(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


@pytest.mark.timing
@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
async def test_a_jittered_interval_fires_its_nominal_instants_late_by_the_jitter_and_skips_the_excluded_one(
    running: RunningNode, receiver: Receiver
) -> None:
    client, _ = await client_for(running)
    async with client:
        start = (now_ms() // 1000 + 3) * 1000
        skipped = start + 2000
        put = await client.put(
            "/v1/calendars/pause", json={"periods": [{"from": wall(skipped), "to": wall(skipped + 1000)}]}
        )
        assert put.status_code == 201, put.text
        schedule = {
            "kind": "interval",
            "every_ms": 1000,
            "start_at_ms": start,
            "jitter_ms": JITTER_MS,
            "calendar": "pause",
        }
        created = await client.post(
            "/v1/tasks",
            json={"name": "jittered", "schedule": schedule, "callback": {"url": receiver.url("/hook")}, "payload": {}},
        )
        assert created.status_code == 201, created.text
        task = created.json()

        requests = await receiver.wait_for(4, timeout_s=15)
        nominal = [int(r.headers["tjobs-scheduled-at"]) for r in requests[:4]]
        assert nominal == [start, start + 1000, start + 3000, start + 4000]
        for request, instant in zip(requests, nominal, strict=False):
            assert request.headers["webhook-id"] == f"{task['id']}-{instant}"
            late_ms = request.received_at_ns // 1_000_000 - instant
            assert 0 <= late_ms <= JITTER_MS + ON_TIME_MS, (instant, late_ms)
