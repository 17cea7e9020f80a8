"""The pool bench's accounting: each fire must reach one executor, one per zone, or every executor."""

from __future__ import annotations

import argparse
import asyncio
from types import SimpleNamespace
from typing import cast

import aiohttp
import pytest
from aiohttp import web

from benchmarks.pool_fire import PoolDestination, account_pool, bench, destinations_of, spread, summarise
from testkit.node_process import node_process
from testkit.sink import NO_EXECUTOR, CallbackRecords, SinkProcess

T0_MS = 1_800_000_000_000
ZONES = {"e0": "z0", "e1": "z1", "e2": "z0"}


def records_of(*rows: tuple[int, int, int, int, str | None]) -> CallbackRecords:
    """Rows of (receive ms after T0, task id, flow index, attempt, executor id); scheduled = the task's
    instant, which is task id × 10 ms after T0."""
    records = CallbackRecords()
    for recv_ms, task_id, flow, attempt, executor_id in rows:
        executor = NO_EXECUTOR
        if executor_id is not None:
            if executor_id not in records.executor_ids:
                records.executor_ids.append(executor_id)
            executor = records.executor_ids.index(executor_id)
        records.append((T0_MS + recv_ms) * 1000, task_id, T0_MS + task_id * 10, flow, attempt, executor)
    return records


INSTANTS = {task_id: T0_MS + task_id * 10 for task_id in (1, 2, 3)}


def test_broadcast_counts_missing_and_repeated_executor_pairs() -> None:
    # Given three fires broadcast to three executors: fire 1 reaches all, fire 2 misses e2 and reaches
    # e0 twice (a retry of its flow), fire 3 reaches all but e1 gets a second flow of it too
    records = records_of(
        (15, 1, 0, 1, "e0"),
        (20, 1, 0, 1, "e1"),
        (30, 1, 0, 1, "e2"),
        (25, 2, 1, 1, "e0"),
        (40, 2, 1, 1, "e1"),
        (90, 2, 1, 2, "e0"),
        (31, 3, 2, 1, "e2"),
        (32, 3, 2, 1, "e0"),
        (35, 3, 2, 1, "e1"),
        (60, 3, 3, 1, "e1"),
    )
    delivery = account_pool(INSTANTS, records, destinations_of("all", ZONES))
    pairs = delivery.pairs
    # Then the unit is (fire, executor): 9 expected, 8 delivered, 1 missing
    assert (delivery.destinations, pairs.registered, pairs.delivered, pairs.missing) == (3, 9, 8, 1)
    # And repeats count per pair: e0's retry of fire 2 (same flow), e1's second flow of fire 3
    assert (pairs.same_flow, pairs.extra_flows, pairs.tasks_with_extra_flows, pairs.retried) == (1, 1, 1, 1)
    # And lateness is each pair's first receipt minus the instant, over every pair
    assert pairs.lateness_ms == (1.0, 2.0, 5.0, 5.0, 5.0, 10.0, 20.0, 20.0)
    # And per fire, all three were delivered
    assert (delivery.fires.delivered, delivery.fires.missing) == (3, 0)
    assert delivery.per_executor == {"e0": 4, "e1": 4, "e2": 2}
    assert pairs.unexpected == 0 and pairs.scheduled_mismatch == 0


def test_one_counts_a_fire_once_whichever_executor_got_it() -> None:
    # Given fires spread over the executors, fire 3 failed over from e2 to e0 (same flow, attempt 2)
    records = records_of(
        (11, 1, 0, 1, "e0"),
        (22, 2, 1, 1, "e1"),
        (33, 3, 2, 1, "e2"),
        (80, 3, 2, 2, "e0"),
    )
    delivery = account_pool(INSTANTS, records, destinations_of("one", ZONES))
    # Then each fire is one pair, as the fire bench counts it: the failover is a same-flow duplicate
    pairs = delivery.pairs
    assert (delivery.destinations, pairs.registered, pairs.delivered, pairs.missing) == (1, 3, 3, 0)
    assert (pairs.same_flow, pairs.extra_flows, pairs.retried) == (1, 0, 1)
    assert pairs.lateness_ms == (1.0, 2.0, 3.0)
    assert pairs.lateness_ms == delivery.fires.lateness_ms
    assert delivery.per_executor == {"e0": 2, "e1": 1, "e2": 1}


def test_one_per_zone_expects_a_callback_in_each_zone() -> None:
    # Given zones z0 (e0, e2) and z1 (e1): fire 1 reaches both, fire 2 only z0, fire 3 only z1, twice
    # (a retry of its flow)
    records = records_of(
        (12, 1, 0, 1, "e0"),
        (13, 1, 0, 1, "e1"),
        (24, 2, 1, 1, "e2"),
        (35, 3, 2, 1, "e1"),
        (36, 3, 2, 2, "e1"),
    )
    delivery = account_pool(INSTANTS, records, destinations_of("one_per_zone", ZONES))
    # Then the unit is (fire, zone): fire 2 misses z1, fire 3 misses z0
    pairs = delivery.pairs
    assert (delivery.destinations, pairs.registered, pairs.delivered, pairs.missing) == (2, 6, 4, 2)
    assert (pairs.same_flow, pairs.extra_flows) == (1, 0)
    assert delivery.per_executor == {"e0": 1, "e1": 3, "e2": 1}


def test_callbacks_the_pool_did_not_route_are_unexpected() -> None:
    # Given a callback without an executor id, one from an executor not registered, one of an unknown task
    records = records_of((11, 1, 0, 1, None), (12, 1, 0, 1, "stranger"), (13, 9, 1, 1, "e0"), (14, 1, 0, 1, "e1"))
    delivery = account_pool(INSTANTS, records, destinations_of("all", ZONES))
    assert delivery.pairs.unexpected == 3
    assert (delivery.pairs.delivered, delivery.pairs.missing) == (1, 8)
    assert delivery.per_executor == {"e0": 0, "e1": 1, "e2": 0}


def test_spread_says_how_even_the_executors_shares_are() -> None:
    assert spread({"e0": 10, "e1": 10}) == {"min": 10, "max": 10, "mean": 10.0, "max_over_mean": 1.0}
    assert spread({"e0": 5, "e1": 15}) == {"min": 5, "max": 15, "mean": 10.0, "max_over_mean": 1.5}
    assert spread({})["max_over_mean"] is None


def test_an_unknown_route_is_refused() -> None:
    with pytest.raises(ValueError, match="sharded"):
        destinations_of("sharded", ZONES)


async def test_the_sink_records_which_executor_each_callback_reached() -> None:
    headers = {"webhook-id": "f", "tjobs-task-id": "1", "tjobs-scheduled-at": "2", "tjobs-attempt": "1"}
    async with SinkProcess() as sink, aiohttp.ClientSession() as session:
        for executor_id in ("e7", "e3", "e7", None):
            sent = {**headers, **({"tjobs-executor-id": executor_id} if executor_id else {})}
            async with session.post(f"{sink.callback_url}/{executor_id}", headers=sent) as response:
                assert response.status == 204
        records = await sink.records()
    assert records.executor_ids == ["e7", "e3"]
    assert list(records.executor) == [0, 1, 0, NO_EXECUTOR]
    assert CallbackRecords.from_bytes(records.to_bytes()) == records


async def test_heartbeats_do_not_wait_for_slow_answers_to_the_ones_before() -> None:
    # Given a node that answers no heartbeat until those of all three executors are in flight at once
    # (a loaded node: heartbeats sent one after another's answer would let the leases run out)
    all_in_flight = asyncio.Event()
    in_flight = 0

    async def register(request: web.Request) -> web.Response:
        return web.json_response(await request.json(), status=201)

    async def heartbeat(request: web.Request) -> web.Response:
        nonlocal in_flight
        in_flight += 1
        try:
            if in_flight >= 3:
                all_in_flight.set()
            await all_in_flight.wait()
        finally:  # a heartbeat the client gave up on is not in flight any more
            in_flight -= 1
        return web.json_response({"id": request.match_info["id"], "ttl_s": 2})

    app = web.Application()
    app.router.add_post("/v1/pools/{pool}/executors", register)
    app.router.add_put("/v1/pools/{pool}/executors/{id}/heartbeat", heartbeat)
    runner = web.AppRunner(app, handler_cancellation=True)  # a request the client gave up on ends
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    destination = PoolDestination("all", 3, ttl_s=2)
    sink = cast(SinkProcess, SimpleNamespace(callback_url="http://127.0.0.1:9/cb"))
    try:
        async with aiohttp.ClientSession() as session:
            await destination.callback(session, base_url, "key", sink)
        # Then the heartbeats of all three are sent though none was answered yet
        await asyncio.wait_for(all_in_flight.wait(), 30)
    finally:
        await destination.close()
        await runner.cleanup()


@pytest.mark.slow
async def test_tiny_runs_on_an_embedded_node_deliver_every_pair_once() -> None:
    # Given an embedded node (one for both runs: it takes long to start) and, per run, a pool of
    # executors at the sink that the bench keeps alive
    with node_process() as node:
        for route, executors in (("all", 3), ("one", 4)):
            args = argparse.Namespace(
                plain_url=False,
                route=route,
                executors=executors,
                zones=2,
                strategy="round_robin",
                tasks=80,
                window_s=1.0,
                lead_s=3.0,
                register_rate=None,
                concurrency=8,
                drain_timeout_s=10.0,
                verify_every=1,
            )
            # When 80 tasks fire over a second
            result, destination = await bench(args, (node.base_url, node.admin_key, (node.pid,)), lambda *_: None)
            assert isinstance(destination, PoolDestination)
            summary = summarise(result, destination)
            # Then every (fire, destination) pair got exactly one callback, signed
            expected_pairs = 80 * (executors if route == "all" else 1)
            assert summary["registered"] == 80 and summary["pool"]["pairs_expected"] == expected_pairs
            assert (summary["delivered"], summary["missing"]) == (expected_pairs, 0)
            assert (summary["duplicates"], summary["unexpected_callbacks"]) == (0, 0)
            assert summary["sink"]["signatures_failed"] == 0
            assert summary["sink"]["signatures_checked"] == expected_pairs
            pool = summary["pool"]
            assert (pool["fires_delivered"], pool["fires_missing"], pool["heartbeat_errors"]) == (80, 0, [])
            # And a broadcast gives each executor every fire; round robin shares them evenly
            share = 80 if route == "all" else 80 // executors
            assert pool["per_executor"] == {f"e{index}": share for index in range(executors)}
            assert summary["node_cpu_us_per_fire"] is not None
