"""A node fires a fixed_delay task its delay after each run *ended* (the receiver's answer), not at a
fixed rate (embedded store)."""

from __future__ import annotations

import itertools

import pytest

from testkit import RunningNode
from tests.e2e.test_fire_path import ON_TIME_MS, client_for, now_ms
from tests.receiver import Receiver, Reply

DELAY_MS = 1000
ANSWER_S = 0.3  # the receiver answers this long after a request arrives
RUNS = 4


@pytest.mark.timing
@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
async def test_a_fixed_delay_task_fires_its_delay_after_each_answer(running: RunningNode) -> None:
    async with Receiver(Reply(200, delay_s=ANSWER_S)) as receiver:
        client, _ = await client_for(running)
        async with client:
            start = now_ms() + 1500
            created = await client.post(
                "/v1/tasks",
                json={
                    "name": "fixed-delay",
                    "schedule": {"kind": "fixed_delay", "delay_ms": DELAY_MS, "start_at_ms": start},
                    "callback": {"url": receiver.url("/hook")},
                    "payload": {},
                },
            )
            assert created.status_code == 201, created.text
            task = created.json()
            assert task["next_run_at_ms"] == start

            requests = await receiver.wait_for(RUNS, timeout_s=15)

    arrived = [r.received_at_ns // 1_000_000 for r in requests[:RUNS]]
    instants = [int(r.headers["tjobs-scheduled-at"]) for r in requests[:RUNS]]
    assert instants[0] == start
    for previous, instant, at in zip(arrived, instants[1:], arrived[1:], strict=False):
        answered = previous + int(ANSWER_S * 1000)
        # the next instant is the delay after the answer (never a fixed rate from the previous start)
        assert instant >= answered + DELAY_MS - 5, (instant - previous, arrived)
        assert instant <= answered + DELAY_MS + ON_TIME_MS, (instant - previous, arrived)
        assert -5 <= at - instant <= ON_TIME_MS, (at - instant, arrived)  # fired on time, never early
    gaps = [b - a for a, b in itertools.pairwise(arrived)]
    assert all(gap >= DELAY_MS + ANSWER_S * 1000 - 5 for gap in gaps), gaps
