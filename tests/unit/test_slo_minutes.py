"""The service levels fold each app's fires and outcomes per minute; the recorder adds them to the store."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tjobs.clock import ManualClock
from tjobs.errors import StorageUnavailable
from tjobs.model import SloCounts, SloMinute
from tjobs.observability.slo import ServiceLevels
from tjobs.observability.slo_recorder import SloRecorder
from tjobs.stores.memory import MemoryTaskStore

pytestmark = pytest.mark.asyncio

MINUTE = 29_000_000  # epoch minutes


async def test_fires_outcomes_misses_and_throttles_fold_per_app_and_minute() -> None:
    clock = ManualClock(MINUTE * 60_000 + 1_000)
    slo = ServiceLevels(clock.now_ms)
    slo.observe_fire("a", 0.003)  # first lateness slot (<= 5 ms)
    slo.observe_fire("a", 2.0)  # the 2.5 s slot
    slo.observe_outcome("a", "delivered")
    slo.observe_outcome("a", "pending")  # not an outcome of its own
    slo.observe_misses("a", 3)
    clock.advance(60_000)
    slo.observe_outcome("a", "dead")
    slo.observe_throttled("b")

    taken = {(m.app_id, m.minute): m.counts for m in slo.minutes.take()}
    first = taken[("a", MINUTE)]
    assert (first.fires, first.delivered, first.dead, first.misses) == (2, 1, 0, 3)
    assert first.lateness[0] == 1 and first.lateness[8] == 1 and sum(first.lateness) == 2
    assert taken[("a", MINUTE + 1)].dead == 1 and taken[("b", MINUTE + 1)].throttled == 1
    assert slo.minutes.take() == []  # taken once
    assert slo.lateness.windows("a")["1h"]["count"] == 2  # the node's own windows still see the fires


class RefusingStore(MemoryTaskStore):
    refuse = True

    async def add_slo_minutes(self, node_id: str, minutes: Sequence[SloMinute]) -> None:
        if self.refuse:
            raise StorageUnavailable("down")
        await super().add_slo_minutes(node_id, minutes)


async def test_minutes_the_store_refused_go_with_the_next_pass() -> None:
    clock = ManualClock(MINUTE * 60_000)
    slo = ServiceLevels(clock.now_ms)
    store = RefusingStore()
    recorder = SloRecorder(store, slo.minutes, "node-1", clock)
    slo.observe_fire("a", 0.1)
    with pytest.raises(StorageUnavailable):
        await recorder.run_once()
    slo.observe_fire("a", 0.1)
    store.refuse = False
    assert await recorder.run_once() == 1
    assert (await store.sum_slo_minutes("a", MINUTE, MINUTE + 1)).fires == 2


async def test_the_recorder_adds_to_this_nodes_rows_and_purges_old_minutes() -> None:
    clock = ManualClock(MINUTE * 60_000)
    store = MemoryTaskStore()
    old = SloMinute("a", MINUTE - 9 * 1440, SloCounts(fires=5))
    await store.add_slo_minutes("node-2", [old])
    slo = ServiceLevels(clock.now_ms)
    slo.observe_fire("a", 0.1)
    await SloRecorder(store, slo.minutes, "node-1", clock).run_once()
    assert (await store.sum_slo_minutes(None, 0, MINUTE + 1)).fires == 1  # the 9-day-old row is gone


async def test_a_redriven_flow_is_counted_dead_once_and_the_memory_of_redrives_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("tjobs.observability.slo.MAX_REDRIVEN", 2)
    clock = ManualClock(MINUTE * 60_000)
    slo = ServiceLevels(clock.now_ms)
    for task_id in (1, 2, 3):
        slo.observe_outcome("a", "dead", (task_id, 0))
        slo.observe_redrive((task_id, 0))  # the third pushes the first out: at worst counted twice
    for task_id in (1, 2, 3):
        slo.observe_outcome("a", "pending", (task_id, 0))  # a retry of the re-drive is not its outcome
        slo.observe_outcome("a", "dead", (task_id, 0))
    slo.observe_outcome("a", "dead", (2, 0))  # once its outcome was seen, the flow is forgotten

    assert slo.outcome_counts[("a", "dead")] == 3 + 1 + 1  # three deaths, flow 1 (forgotten) and flow 2 again
    assert sum(m.counts.dead for m in slo.minutes.take()) == 5
