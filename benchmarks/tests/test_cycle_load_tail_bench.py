"""The cycle-load-tail bench's arithmetic: the loads read off the node's log, slices with and without one;
its paced creates against a stand-in API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from benchmarks.cycle_load_tail import (
    Create,
    CreateRun,
    LoadSlices,
    cpu_by_load,
    create_figures,
    loads_from_log,
    paced_creates,
    slice_figures,
)
from benchmarks.fire import task_bodies
from benchmarks.report import Delivery
from benchmarks.shard_move import now_ms


def _log(ts: float, message: str, action: str) -> str:
    return orjson.dumps({"ts": ts, "level": "info", "message": message, "action": action}).decode()


def test_the_loads_are_read_off_the_cycle_loaded_lines() -> None:
    lines = [
        _log(100.5, "loaded 120000 tasks due before 5 (not again those due in [1, 2)) in 1500 ms", "cycle_loaded"),
        _log(101.0, "something else in 3 ms", "other"),
        "not json",
        _log(160.0, "loaded 7 tasks due before 9 in 12 ms", "cycle_loaded"),
    ]
    assert loads_from_log(lines) == [
        {"start_ms": 99_000, "end_ms": 100_500, "tasks": 120_000},
        {"start_ms": 159_988, "end_ms": 160_000, "tasks": 7},
    ]


def test_a_slice_holds_a_load_when_it_overlaps_the_load_or_the_second_after_it() -> None:
    # 4 slices of 10 s from 0: fires 10 ms late everywhere, 100 ms late in the second slice
    by_instant = tuple((at, 100.0 if 10_000 <= at < 20_000 else 10.0) for at in range(0, 40_000, 100))
    delivery = Delivery(400, 400, 0, 0, 0, 0, 0, 0, 0, (), (), by_instant)
    loads = [{"start_ms": 12_000, "end_ms": 14_000, "tasks": 5}, {"start_ms": 28_000, "end_ms": 29_500, "tasks": 5}]

    figures = slice_figures(delivery, 0, 40, 10.0, loads)

    assert [s["load"] for s in figures["slices"]] == [False, True, True, True]  # 29.5 s + 1 s reaches slice 4
    assert figures["with_load"]["slices"] == 3 and figures["without_load"]["slices"] == 1
    assert figures["with_load"]["median_p99_ms"] == 10.0 and figures["with_load"]["max_p99_ms"] == 100.0
    assert figures["median_p99_ratio"] == 1.0
    assert figures["pooled_p99_ratio"] == 10.0


def test_cpu_is_split_between_the_seconds_holding_a_load_and_the_others() -> None:
    samples: list[tuple[int, dict[str, float | None]]] = [
        (0, {"node": 0.0}),
        (1000, {"node": 0.2}),
        (2000, {"node": 1.1}),
        (3000, {"node": 1.3}),
    ]
    loads = [{"start_ms": 1200, "end_ms": 1500, "tasks": 5}]  # + 1 s of backlog: reaches into [2000, 3000)

    assert cpu_by_load(samples, loads) == {"node": {"during_loads": 0.55, "outside_loads": 0.2}}


def test_creates_are_grouped_by_the_slice_they_were_sent_in_as_the_fires_are() -> None:
    # the same 4 slices and loads as the fires above: slices 2-4 hold a load
    loads = [{"start_ms": 12_000, "end_ms": 14_000, "tasks": 5}, {"start_ms": 28_000, "end_ms": 29_500, "tasks": 5}]
    window = LoadSlices(0, 40, 10.0, loads)
    creates = [Create(at, 5.0, 0.5, 201) for at in range(0, 10_000, 100)]  # slice 1: 100 at 5 ms
    creates += [Create(at, 20.0 if at % 1000 else 80.0, 1.0, 201) for at in range(10_000, 40_000, 100)]
    creates += [Create(15_000, 3.0, 0.1, 503), Create(16_000, 30_000.0, 0.2, 0, "TimeoutError")]

    figures = create_figures(CreateRun(creates, skipped=2), 10.0, window)

    assert [window.holds_load(index) for index in range(4)] == [False, True, True, True]
    assert figures["sent"] == 402 and figures["answered_201"] == 400 and figures["skipped_in_flight_cap"] == 2
    assert figures["by_status"] == {"201": 400, "503": 1, "TimeoutError": 1}
    with_load, without = figures["by_load"]["with_load"], figures["by_load"]["without_load"]
    assert without == {"n": 100, "p50": 5.0, "p99": 5.0, "max": 5.0}
    assert with_load == {"n": 300, "p50": 20.0, "p99": 80.0, "max": 80.0}  # 30 of 300 at 80 ms: above the 99th
    assert figures["by_load"]["p99_ratio"] == 16.0
    assert figures["latency"]["max"] == 80.0  # the 201s only: the timeout's 30 s is counted, not timed


def test_creates_without_a_load_have_no_ratio() -> None:
    figures = create_figures(CreateRun([Create(0, 5.0, 0.0, 201)]), 1.0, LoadSlices(0, 10, 10.0, []))

    assert figures["by_load"]["with_load"] == {"n": 0, "p50": None, "p99": None, "max": None}
    assert figures["by_load"]["p99_ratio"] is None


@pytest.fixture
async def stand_in_api() -> AsyncIterator[tuple[str, list[bytes], list[int]]]:
    """POST /v1/tasks answering 201, 503 for payload i == 3, and holding i 0-3 for 300 ms; with the bodies
    received and, for each, how many requests were unanswered when it came (itself included)."""
    bodies: list[bytes] = []
    open_at_receipt: list[int] = []
    unanswered = 0

    async def create(request: web.Request) -> web.Response:
        nonlocal unanswered
        assert request.headers["Authorization"] == "Bearer key"
        unanswered += 1
        open_at_receipt.append(unanswered)
        try:
            body = await request.read()
            bodies.append(body)
            index = orjson.loads(body)["payload"]["i"]
            if index < 4:
                await asyncio.sleep(0.3)
            return web.json_response({"id": str(index + 1)}, status=503 if index == 3 else 201)
        finally:
            unanswered -= 1

    app = web.Application()
    app.router.add_post("/v1/tasks", create)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", bodies, open_at_receipt
    await runner.cleanup()


async def test_paced_creates_are_sent_open_loop_and_skipped_over_the_in_flight_cap(
    stand_in_api: tuple[str, list[bytes], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 40 creates due over 800 ms at 50/s, at most 4 unanswered: the first 4 are held 300 ms
    base_url, bodies, open_at_receipt = stand_in_api
    monkeypatch.setattr("benchmarks.cycle_load_tail.CREATES_IN_FLIGHT", 4)
    body_of = task_bodies({"url": "http://127.0.0.1:9/cb"}, "paced", lambda _: 4_000_000_000_000)
    start_ms = now_ms() + 50

    run = await paced_creates(base_url, "key", body_of, 50.0, start_ms, start_ms + 800)

    assert run.skipped > 0 and len(run.creates) + run.skipped == 40 == len(bodies) + run.skipped
    assert max(open_at_receipt) <= 4  # never a fifth while 4 were unanswered
    sent = [create.scheduled_ms for create in run.creates]
    assert sent[:4] == [start_ms + 20 * k for k in range(4)] and len(sent) > 4  # sends went on once answered
    assert set(sent) <= {start_ms + 20 * k for k in range(40)}
    assert [create.status for create in run.creates].count(503) == 1
    assert all(create.status == 201 for create in run.creates if create.status != 503)
    assert min(create.latency_ms for create in run.creates[:4]) >= 300  # scheduled send to full answer
