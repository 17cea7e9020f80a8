"""A run's start is written at once (README "Job runs", docs/pools.md "Overlap"): the outcome that makes a flow
``running`` does not wait for the outcome flusher's interval (``callbacks.outcome_flush_ms``), so a node that
dies after its executor's ``202`` leaves the run in the store unless it dies within the write itself; a plain
delivery's outcome still waits for the interval (or a full batch), the fire path's batching unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.delivery_fakes import APP, CLOCK, SETTINGS, NoJitter, stored_flow
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.model import FlowStatus, parse_flow_id
from tjobs.stores.memory import MemoryTaskStore

RUN = Answer(202, headers={"tjobs-run": "accepted"})
FLUSH_INTERVAL_S = 30.0  # far longer than the test: anything written within it was written at once


@pytest.fixture
async def rig() -> AsyncIterator[tuple[MemoryTaskStore, RecordingTransport, Deliverer]]:
    store = MemoryTaskStore()
    transport = RecordingTransport(SETTINGS, CLOCK)
    deliverer = Deliverer(
        store,
        transport,
        AppLimiter(SETTINGS.global_max_in_flight),
        SETTINGS,
        CLOCK,
        NoJitter(),
        flush_interval_s=FLUSH_INTERVAL_S,
    )
    await deliverer.start()
    yield store, transport, deliverer
    await deliverer.stop(1.0)


async def _status_after(
    store: MemoryTaskStore, deliverer: Deliverer, transport: RecordingTransport, answer: Answer
) -> FlowStatus:
    transport.script(then=answer)
    task, flow = await stored_flow(store)
    deliverer.submit(CallbackJob(task, flow, APP))
    await transport.wait_for(1)
    await asyncio.sleep(0.2)
    stored = await store.get_flow(*parse_flow_id(flow.id))
    assert stored is not None
    return stored.status


async def test_a_runs_start_is_written_without_waiting_for_the_flush_interval(
    rig: tuple[MemoryTaskStore, RecordingTransport, Deliverer],
) -> None:
    store, transport, deliverer = rig
    assert await _status_after(store, deliverer, transport, RUN) is FlowStatus.RUNNING


async def test_a_deliverys_outcome_still_waits_for_the_flush_interval(
    rig: tuple[MemoryTaskStore, RecordingTransport, Deliverer],
) -> None:
    store, transport, deliverer = rig
    assert await _status_after(store, deliverer, transport, Answer(200)) is FlowStatus.PENDING
    assert deliverer.in_flight_count() == 1  # its outcome waits in the flusher
