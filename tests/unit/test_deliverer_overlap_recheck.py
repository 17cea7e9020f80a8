"""A retry's flow found ended elsewhere (``Deliverer._still_open``: delivered, dead or cancelled by another
node, a run report or a DELETE) ends its delivery here: a fire of its task waiting behind it in the overlap
gate (pool route ``overlap: queue_one``) goes, and nothing stays in flight. Found by reading the code
(2026-12-05): the read dropped the flow from the active set without telling the gate, so the waiting fire was
never sent and stayed in flight for good, marked busy on every compensator pass."""

from __future__ import annotations

import dataclasses

from tests import delivery_fakes
from tests.delivery_fakes import (
    APP,
    delivered_all,
    node,
    queue_one_pair,
    scripted,
    stored,
)
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.pool_dispatcher import PoolDispatcher
from tjobs.model import Flow, FlowStatus
from tjobs.stores.memory import MemoryTaskStore

store, clock, deliverers = delivery_fakes.store, delivery_fakes.clock, delivery_fakes.deliverers  # the fixtures


class EndedElsewhere:
    """The store's flow read, except that the flows named in :attr:`ended` read ``delivered``: another node
    (or a run report it took) ended them after this node's attempt."""

    def __init__(self, store: MemoryTaskStore) -> None:
        self.store = store
        self.ended: set[str] = set()

    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None:
        flow = await self.store.get_flow(task_id, scheduled_at_ms)
        if flow is not None and flow.id in self.ended:
            return dataclasses.replace(flow, status=FlowStatus.DELIVERED)
        return flow


async def test_a_fire_queued_behind_a_flow_its_retry_found_ended_elsewhere_goes(
    store: MemoryTaskStore, clock: ManualClock, deliverers: list[Deliverer]
) -> None:
    # Given a pool task whose overlap is queue_one, its first flow's attempt 1 answered 500 and its second flow
    # waiting behind it in the task's overlap gate
    registry, task, first, second = await queue_one_pair(store, clock)
    reader = EndedElsewhere(store)
    transport = scripted(500, then=200, clock=clock)
    # When the first flow is ended elsewhere before its retry (the retry's read finds it delivered)
    reader.ended.add(first.id)
    deliverer = await node(
        deliverers, store, transport, clock, status_reader=reader, pools=PoolDispatcher(registry, transport)
    )
    deliverer.submit(CallbackJob(task, first, APP))
    await transport.wait_for(1)
    deliverer.submit(CallbackJob(task, second, APP))
    # Then the first's retry is not sent, the second goes once and is delivered, and nothing stays in flight
    await delivered_all(deliverer)
    sent = [(r.flow_id, int(r.headers["tjobs-attempt"])) for r in transport.requests]
    assert sent == [(first.id, 1), (second.id, 1)]
    assert (await stored(store, second.id)).status is FlowStatus.DELIVERED
