"""A manual flow's own payload (a trigger's override) on every backend: stored with the flow, so every
read of it returns it — the lease that re-drives it after a restart included — and kept through
delivery outcomes; a flow without one has none (its callback carries the task's payload)."""

from __future__ import annotations

from tests.contract.backends import NOW_MS, make_task
from tjobs.model import Flow, FlowKind, FlowStatus, FlowUpdate
from tjobs.stores.base import TaskStore

OVERRIDE = '{"order":7,"note":"only this once"}'


async def test_a_manual_flows_payload_is_stored_with_it_and_read_back_everywhere(store: TaskStore) -> None:
    shard = 6
    task = await store.insert_task(make_task(shard=shard))
    with_override, without = NOW_MS - 20, NOW_MS - 10
    for at_ms, payload_json in ((with_override, OVERRIDE), (without, None)):
        flow = Flow(task.id, at_ms, task.app_id, FlowKind.MANUAL, FlowStatus.PENDING, 0, at_ms, at_ms, at_ms)
        flow.payload_json = payload_json
        inserted = await store.insert_manual_flow(task.id, flow)
        assert inserted.payload_json == payload_json

    read = await store.get_flow(task.id, with_override)
    plain = await store.get_flow(task.id, without)
    assert read is not None and read.payload_json == OVERRIDE
    assert plain is not None and plain.payload_json is None
    # a 503 and its retry later: the outcome keeps the payload
    await store.record_flow_updates(
        [FlowUpdate(task.id, with_override, FlowStatus.PENDING, 1, NOW_MS - 5, 503, "HTTP 503")], NOW_MS
    )
    leased = await store.lease_stale_flows(shard, NOW_MS, 10_000, 10)
    assert {f.scheduled_at_ms: f.payload_json for f, _ in leased} == {with_override: OVERRIDE, without: None}
    listed = await store.list_flows(task.id, 10)
    assert [f.payload_json for f in listed] == [None, OVERRIDE]
