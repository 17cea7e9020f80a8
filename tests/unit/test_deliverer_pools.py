"""Flows whose callback names an executor pool, on the deliverer with the transport twin and the embedded
registry: which executors get each attempt, failover within a flow, broadcast, zones, shards, the
circuit breaker, and a pool with no executor (the flow waits, unspent, and dies only past max age).

Time is the test's: the deliverer's clock (which the breakers judge by) is a ManualClock, its backoff
draws no jitter (retries and waits for executors are due at once: their timers run on the event loop,
not on the clock), outcomes are written one by one, and a slow receiver is one held until released."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.delivery_fakes import APP, CLOCK, SETTINGS, NoJitter, delivered_all, settle, stored_flow, turns_until
from tjobs.clock import ManualClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.pool_dispatcher import PoolDispatcher
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.firing.compensator import Compensator
from tjobs.model import App, Flow, FlowStatus, Task, parse_flow_id
from tjobs.pools.breaker import BASE_MS as BREAKER_BASE_MS
from tjobs.pools.model import Executor
from tjobs.service.runs import RunService
from tjobs.settings import CompensatorSettings, RunSettings
from tjobs.specs import CallbackSpec
from tjobs.specs.pool import PoolRoute, parse_pool_route
from tjobs.stores.memory import MemoryTaskStore


class Rig:
    def __init__(self, store: MemoryTaskStore, registry: LocalCoordinator, clock: ManualClock) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.transport = RecordingTransport(SETTINGS, clock)
        self.dispatcher = PoolDispatcher(registry, self.transport)
        self.deliverer = Deliverer(
            store,
            self.transport,
            AppLimiter(SETTINGS.global_max_in_flight),
            SETTINGS,
            clock,
            NoJitter(),
            flush_batch=1,
            status_reader=store,
            pools=self.dispatcher,
        )

    async def executors(self, count: int, zones: tuple[str, ...] = ("z1",), pool: str = "workers") -> list[Executor]:
        made = [Executor(f"e{i}", f"http://10.0.0.{i}:8000", zones[i % len(zones)]) for i in range(count)]
        for executor in made:
            await self.registry.register_executor(APP.id, pool, executor)
        return made

    async def fire(self, route: dict[str, Any] | str, **callback: Any) -> Flow:
        task, flow = await stored_flow(self.store)
        spec = CallbackSpec((), pool=parse_pool_route(route), **callback)
        task = dataclasses.replace(task, callback=spec)
        self.deliverer.submit(CallbackJob(task, flow, APP))
        return flow

    async def stored(self, flow: Flow) -> Flow:
        found = await self.store.get_flow(*parse_flow_id(flow.id))
        assert found is not None
        return found

    async def settled(self) -> None:
        await delivered_all(self.deliverer)

    def executor_ids(self) -> list[str]:
        """The executor of every attempt made (refused ones included), in completion order."""
        return [e.request.headers["tjobs-executor-id"] for e in self.transport.exchanges]


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    made = Rig(MemoryTaskStore(), LocalCoordinator(4), ManualClock(CLOCK.now_ms()))
    await made.deliverer.start()
    yield made
    await made.deliverer.stop(1.0)


Fire = Callable[..., Awaitable[Flow]]
RUN = Answer(202, headers={"Tjobs-Run": "Accepted"})  # the attempt accepted as a job run


async def test_one_by_round_robin_sends_each_fire_to_one_executor_spreading_them_evenly(rig: Rig) -> None:
    await rig.executors(5)
    flows = [await rig.fire({"name": "workers", "path": "/jobs/run"}) for _ in range(10)]
    await rig.settled()
    assert len(rig.transport.requests) == 10  # one per fire
    assert Counter(rig.executor_ids()) == Counter({f"e{i}": 2 for i in range(5)})
    assert {r.url for r in rig.transport.requests} == {f"http://10.0.0.{i}:8000/jobs/run" for i in range(5)}
    assert {(await rig.stored(flow)).status for flow in flows} == {FlowStatus.DELIVERED}


async def test_one_fails_over_to_another_executor_within_the_same_flow(rig: Rig) -> None:
    executors = await rig.executors(3)
    for executor in executors[:2]:  # two are down: refused
        rig.transport.script(Answer.refused(), then=Answer.refused(), url=executor.address)
    flow = await rig.fire({"name": "workers", "strategy": "consistent_hash"})
    await rig.settled()
    ids = rig.executor_ids()
    assert ids[-1] == "e2" and len(set(ids)) == len(ids)  # never the same executor twice for the flow
    sent = [e.request for e in rig.transport.exchanges]
    assert {r.headers["webhook-id"] for r in sent} == {flow.id}
    assert [int(r.headers["tjobs-attempt"]) for r in sent] == list(range(1, len(ids) + 1))
    stored = await rig.stored(flow)
    assert (stored.status, stored.attempts) == (FlowStatus.DELIVERED, len(ids))
    assert stored.routes == tuple((n, "pool:workers", e) for n, e in enumerate(ids, start=1))  # who got which
    assert stored.attempt_log is not None  # each send's answer, with the executor that got it
    assert [(r.attempt, r.destination, r.executor) for r in stored.attempt_log.records] == [
        (n, "pool:workers", e) for n, e in enumerate(ids, start=1)
    ]
    assert [r.status_code for r in stored.attempt_log.records] == [None] * (len(ids) - 1) + [200]
    assert all(r.error for r in stored.attempt_log.records[:-1]) and stored.attempt_log.records[-1].error is None


@pytest.mark.parametrize("strategy", ["consistent_hash", "round_robin", "least_in_flight"])
async def test_the_retry_of_a_run_that_timed_out_goes_to_another_executor(rig: Rig, strategy: str) -> None:
    await rig.executors(2)
    rig.transport.script(then=RUN)  # every executor accepts each attempt as a run; none ever reports
    task, flow = await stored_flow(rig.store)
    spec = CallbackSpec((), pool=parse_pool_route({"name": "workers", "strategy": strategy}), run_timeout_ms=5_000)
    task = await rig.store.update_task(dataclasses.replace(task, callback=spec), task.version)
    # under round robin, without the route log an unrelated fire in between would hand the retry back to it
    fires = {"round_robin": 1}.get(strategy, 0)
    every = frozenset(rig.store.topology.shards())
    compensator = Compensator(
        rig.store,
        lambda: every,
        rig.deliverer.is_in_flight,
        lambda t, f: rig.deliverer.submit(CallbackJob(t, f, APP)),
        CompensatorSettings(interval_s=1.0, grace_s=0.0, batch=100),
        rig.clock,
        16_000,
    )
    rig.deliverer.submit(CallbackJob(task, flow, APP))
    await rig.settled()
    assert (await rig.stored(flow)).status is FlowStatus.RUNNING
    for _ in range(fires):
        await rig.fire("workers")
        await rig.settled()
    # past the run's deadline (its start is the answer's: the test's clock plus the send's own duration on the loop,
    # which under load is more than a millisecond): the compensator times it out and hands the retry over
    run = (await rig.stored(flow)).run
    assert run is not None and run.deadline_ms is not None
    rig.clock.advance(run.deadline_ms - rig.clock.now_ms() + 1)
    assert await compensator.run_once() >= 1
    await rig.settled()
    stored = await rig.stored(flow)
    assert stored.run is not None and (stored.status, stored.run.attempt) == (FlowStatus.RUNNING, 2)
    (_, _, first), (_, _, retry) = stored.routes
    assert {first, retry} == {"e0", "e1"}  # the retry went to the executor that did not time out


async def test_the_retry_of_a_run_reported_failed_goes_to_another_executor(rig: Rig) -> None:
    await rig.executors(2)
    rig.transport.script(then=RUN)
    task, flow = await stored_flow(rig.store)
    spec = CallbackSpec((), pool=parse_pool_route({"name": "workers", "strategy": "consistent_hash"}))
    task = await rig.store.update_task(dataclasses.replace(task, callback=spec), task.version)

    async def read_flow(_: App, flow_id: str) -> Flow:
        return await rig.stored(flow)

    runs = RunService(
        rig.store,
        RunSettings(),
        rig.clock,
        read_flow,
        flow_sink=lambda t, f: rig.deliverer.submit(CallbackJob(t, f, APP)),
    )
    rig.deliverer.submit(CallbackJob(task, flow, APP))
    await rig.settled()
    await runs.report(APP, flow.id, {"status": "failed", "attempt": 1, "message": "disk full"})
    await rig.settled()
    stored = await rig.stored(flow)
    assert stored.run is not None and (stored.status, stored.run.attempt) == (FlowStatus.RUNNING, 2)
    (_, _, first), (_, _, retry) = stored.routes
    assert {first, retry} == {"e0", "e1"}  # the retry went to the executor whose run did not fail


async def test_all_reaches_every_executor_and_drops_one_that_left_instead_of_retrying_it(rig: Rig) -> None:
    executors = await rig.executors(3)
    rig.transport.script(Answer(500), then=Answer(500), url=executors[1].address)
    rig.transport.hold = asyncio.Event()  # the receivers sit on the attempt until released
    flow = await rig.fire({"name": "workers", "mode": "all"})
    await rig.transport.wait_for(3)
    await rig.registry.deregister_executor(APP.id, "workers", "e1")  # it leaves before its retry
    rig.transport.hold.set()  # e1 answers 500: its retry is due at once
    await rig.settled()
    assert sorted(rig.executor_ids()) == ["e0", "e1", "e2"]  # each once: e1 is not retried
    stored = await rig.stored(flow)
    assert stored.status is FlowStatus.DELIVERED


async def test_all_retries_only_the_executors_that_did_not_answer_2xx(rig: Rig) -> None:
    executors = await rig.executors(3)
    rig.transport.script(Answer(503), url=executors[2].address)
    await rig.fire({"name": "workers", "mode": "all"})
    # e2's 503 opens its circuit: the flow waits for it, spending nothing, until its backoff has passed
    await turns_until(lambda: len(rig.transport.exchanges) == 3 and rig.dispatcher.waits >= 1, "waiting for e2")
    rig.clock.advance(BREAKER_BASE_MS)
    await rig.settled()
    assert Counter(rig.executor_ids()) == Counter({"e0": 1, "e1": 1, "e2": 2})


async def test_one_per_zone_sends_to_one_executor_in_each_zone(rig: Rig) -> None:
    await rig.executors(5, zones=("z1", "z2"))
    for _ in range(4):
        await rig.fire({"name": "workers", "mode": "one_per_zone"})
    await rig.settled()
    picked = rig.executor_ids()
    assert len(picked) == 8
    by_zone = Counter("z1" if int(e[1:]) % 2 == 0 else "z2" for e in picked)
    assert by_zone == Counter({"z1": 4, "z2": 4})


async def test_sharded_spreads_the_items_evenly_each_signed_with_its_index(rig: Rig) -> None:
    await rig.executors(2)
    route = {"name": "workers", "mode": "sharded", "shard_total": 4, "shard_params": ["a", "b", "c", "d"]}
    await rig.fire(route)
    await rig.settled()
    requests = rig.transport.requests
    assert sorted(int(r.headers["tjobs-shard-index"]) for r in requests) == [0, 1, 2, 3]
    assert {r.headers["tjobs-shard-total"] for r in requests} == {"4"}
    assert Counter(r.headers["tjobs-executor-id"] for r in requests) == Counter({"e0": 2, "e1": 2})
    for request in requests:
        assert request.body is not None
        Webhook(APP.secrets[0]).verify(request.body, dict(request.headers))  # signed with its shard
        shard = json.loads(request.body)["shard"]
        assert shard["index"] == int(request.headers["tjobs-shard-index"])
        assert shard["param"] == "abcd"[shard["index"]] == request.headers["tjobs-shard-param"]


async def test_sharded_items_of_an_executor_that_dies_mid_flow_go_to_a_live_one_on_retry(rig: Rig) -> None:
    executors = await rig.executors(3)
    rig.transport.script(Answer.refused(), then=Answer.refused(), url=executors[0].address)
    flow = await rig.fire({"name": "workers", "mode": "sharded", "shard_total": 6})
    await rig.settled()
    delivered = [r for r in rig.transport.requests if r.headers["tjobs-executor-id"] != "e0"]
    assert sorted(int(r.headers["tjobs-shard-index"]) for r in delivered) == list(range(6))  # each item once
    assert (await rig.stored(flow)).status is FlowStatus.DELIVERED


async def test_a_pool_without_executors_waits_without_spending_attempts_until_one_registers(rig: Rig) -> None:
    flow = await rig.fire("workers")
    await turns_until(lambda: rig.dispatcher.waits >= 2, "waited twice")  # each wait due at once (no jitter)
    await settle()  # its outcome written
    stored = await rig.stored(flow)
    assert rig.transport.requests == []
    assert (stored.status, stored.attempts) == (FlowStatus.PENDING, 0)
    assert stored.last_error == "no live executor in pool 'workers'"
    assert rig.dispatcher.waits >= 2
    await rig.executors(1)
    await rig.settled()
    assert [r.headers["tjobs-attempt"] for r in rig.transport.requests] == ["1"]
    assert (await rig.stored(flow)).status is FlowStatus.DELIVERED


async def test_a_pool_without_executors_past_max_age_is_dead_naming_why(rig: Rig) -> None:
    task, flow = await stored_flow(rig.store, overdue_ms=2000)
    task = dataclasses.replace(task, callback=CallbackSpec((), max_age_s=1, pool=PoolRoute("workers")))
    rig.deliverer.submit(CallbackJob(task, flow, APP))
    await rig.settled()
    stored = await rig.stored(flow)
    assert stored.status is FlowStatus.DEAD
    assert stored.last_error == "no live executor in pool 'workers' (max_age_s exceeded)"


async def test_an_executor_answering_503_is_skipped_while_its_circuit_is_open(rig: Rig) -> None:
    executors = await rig.executors(3)
    rig.transport.script(Answer(503), url=executors[0].address)
    for _ in range(7):
        await rig.fire("workers")
        await rig.settled()
    ids = rig.executor_ids()
    assert ids.count("e0") == 1  # once, then skipped for its backoff (1 s): the others took every fire
    assert rig.dispatcher.breakers.is_open((APP.id, "workers", "e0"), rig.clock.now_ms())


def test_a_task_in_a_pool_reads_back_from_its_stored_json() -> None:
    from tjobs.specs import callback_from_json, callback_to_json

    spec = CallbackSpec((), headers={"x": "1"}, pool=parse_pool_route({"name": "w", "mode": "all"}))
    stored = callback_to_json(spec)
    assert stored == {"method": "POST", "headers": {"x": "1"}, "pool": {"name": "w", "mode": "all"}}
    assert callback_from_json(stored) == spec
    _ = Task  # the stored task keeps this spec as its callback column


# ---- overlap policy --------------------------------------------------------------------------------


async def fires_of_one_task(rig: Rig, route: dict[str, Any], count: int) -> tuple[Task, list[Flow]]:
    task, first = await stored_flow(rig.store)
    task = dataclasses.replace(task, callback=CallbackSpec((), pool=parse_pool_route(route)))
    flows = [first]
    for later in range(1, count):
        at_ms = first.scheduled_at_ms + later
        flows.append(
            await rig.store.insert_manual_flow(
                task.id, dataclasses.replace(first, scheduled_at_ms=at_ms, next_attempt_at_ms=at_ms)
            )
        )
    return task, flows


async def test_skip_if_running_skips_a_fire_while_the_previous_one_runs(rig: Rig) -> None:
    await rig.executors(2)
    rig.transport.hold = asyncio.Event()  # a slow receiver: it answers when released
    task, (first, second) = await fires_of_one_task(rig, {"name": "workers", "overlap": "skip_if_running"}, 2)
    rig.deliverer.submit(CallbackJob(task, first, APP))
    await rig.transport.wait_for(1)  # the first is in its (slow) attempt
    rig.deliverer.submit(CallbackJob(task, second, APP))
    await settle()
    rig.transport.hold.set()
    await rig.settled()
    assert [r.headers["webhook-id"] for r in rig.transport.requests] == [first.id]
    skipped = await rig.stored(second)
    assert skipped.status is FlowStatus.SKIPPED and skipped.attempts == 0
    assert skipped.last_error == f"skipped: flow {first.id} of the task is still running"
    assert (await rig.stored(first)).status is FlowStatus.DELIVERED


async def test_queue_one_runs_the_next_fire_after_the_running_one_and_skips_a_third(rig: Rig) -> None:
    await rig.executors(2)
    rig.transport.hold = asyncio.Event()  # a slow receiver: it answers when released
    task, flows = await fires_of_one_task(rig, {"name": "workers", "overlap": "queue_one"}, 3)
    for flow in flows:
        rig.deliverer.submit(CallbackJob(task, flow, APP))
        await settle()
    assert len(rig.transport.requests) == 1  # the second waits while the first runs
    rig.transport.hold.set()
    await rig.settled()
    sent = [e.request.headers["webhook-id"] for e in rig.transport.exchanges]
    assert sent == [flows[0].id, flows[1].id]  # one after the other, never together
    statuses = [(await rig.stored(flow)).status for flow in flows]
    assert statuses == [FlowStatus.DELIVERED, FlowStatus.DELIVERED, FlowStatus.SKIPPED]


async def test_allow_lets_fires_of_one_task_overlap(rig: Rig) -> None:
    await rig.executors(2)
    rig.transport.hold = asyncio.Event()  # a slow receiver: it answers when released
    task, flows = await fires_of_one_task(rig, {"name": "workers"}, 2)
    for flow in flows:
        rig.deliverer.submit(CallbackJob(task, flow, APP))
    await rig.transport.wait_for(2)  # both in flight at once
    rig.transport.hold.set()
    await rig.settled()
    assert {(await rig.stored(flow)).status for flow in flows} == {FlowStatus.DELIVERED}
