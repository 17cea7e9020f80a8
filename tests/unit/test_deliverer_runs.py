"""The deliverer starts a job run (README "Job runs"): a 202 with ``tjobs-run: accepted`` leaves the flow
``running`` with its run and deadline; a plain 202, or a run answer to a flow with several destinations,
is a delivery as before. On the memory store with the transport twin and a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.delivery_fakes import APP, CLOCK, SETTINGS, NoJitter, delivered_all, stored_flow
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.model import Flow, FlowRun, FlowStatus, RunStatus, Task, parse_flow_id
from tjobs.stores.memory import MemoryTaskStore

RUN = Answer(202, headers={"Tjobs-Run": "Accepted"})
NODE_RUN_TIMEOUT_MS = 600_000


@pytest.fixture
def store() -> MemoryTaskStore:
    return MemoryTaskStore()


@pytest.fixture
async def transport() -> RecordingTransport:
    return RecordingTransport(SETTINGS, CLOCK)


@pytest.fixture
async def deliverer(store: MemoryTaskStore, transport: RecordingTransport) -> AsyncIterator[Deliverer]:
    clock = ManualClock(CLOCK.now_ms())
    limiter = AppLimiter(SETTINGS.global_max_in_flight)
    built = Deliverer(
        store, transport, limiter, SETTINGS, clock, NoJitter(), flush_batch=1, run_timeout_ms=NODE_RUN_TIMEOUT_MS
    )
    await built.start()
    yield built
    await built.stop(1.0)


async def _deliver(store: MemoryTaskStore, deliverer: Deliverer, task: Task, flow: Flow) -> Flow:
    deliverer.submit(CallbackJob(task, flow, APP))
    await delivered_all(deliverer)
    stored = await store.get_flow(*parse_flow_id(flow.id))
    assert stored is not None
    return stored


async def test_a_202_accepting_a_run_leaves_the_flow_running_until_the_nodes_run_timeout(
    store: MemoryTaskStore, deliverer: Deliverer, transport: RecordingTransport
) -> None:
    transport.script(then=RUN)
    task, flow = await stored_flow(store)

    stored = await _deliver(store, deliverer, task, flow)

    assert (stored.status, stored.attempts, stored.last_status_code) == (FlowStatus.RUNNING, 1, 202)
    [exchange] = transport.exchanges
    started_ms = exchange.result.answered_ms
    assert stored.run == FlowRun(RunStatus.RUNNING, 1, started_ms, started_ms + NODE_RUN_TIMEOUT_MS)
    assert stored.next_attempt_at_ms == started_ms + NODE_RUN_TIMEOUT_MS  # the compensator's sweep finds it then
    assert stored.attempt_log is not None and stored.attempt_log.records[0].status_code == 202


async def test_the_tasks_run_timeout_wins(
    store: MemoryTaskStore, deliverer: Deliverer, transport: RecordingTransport
) -> None:
    transport.script(then=RUN)
    task, flow = await stored_flow(store)
    task = replace(task, callback=replace(task.callback, run_timeout_ms=5_000))

    stored = await _deliver(store, deliverer, task, flow)

    assert stored.run is not None and stored.run.deadline_ms == stored.run.started_at_ms + 5_000


async def test_a_plain_202_is_a_delivery(
    store: MemoryTaskStore, deliverer: Deliverer, transport: RecordingTransport
) -> None:
    transport.script(then=Answer(202))
    task, flow = await stored_flow(store)

    stored = await _deliver(store, deliverer, task, flow)

    assert (stored.status, stored.run) == (FlowStatus.DELIVERED, None)


async def test_a_multicast_flow_never_runs(
    store: MemoryTaskStore, deliverer: Deliverer, transport: RecordingTransport
) -> None:
    transport.script(then=RUN)
    task, flow = await stored_flow(store)
    urls = ("https://a.example/hook", "https://b.example/hook")
    task = replace(task, callback=replace(task.callback, urls=urls))

    stored = await _deliver(store, deliverer, task, flow)

    assert (stored.status, stored.run) == (FlowStatus.DELIVERED, None)
