"""The target directory's cache and the budget of a re-driven flow naming targets (memory store)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from sharding import Topology
from tests.delivery_fakes import APP, stored_flow
from tjobs.clock import ManualClock
from tjobs.delivery.ssrf import TargetGuard
from tjobs.hot_tier.local import LocalHotTier
from tjobs.model import Flow, FlowStatus, FlowUpdate, Task
from tjobs.service.targets import TargetDirectory, TargetService
from tjobs.service.tasks import TaskService
from tjobs.settings import Settings
from tjobs.specs import CallbackSpec
from tjobs.stores.memory import MemoryTaskStore
from tjobs.targets.model import NatsTarget, RetryPolicy, Target

NOW_MS = 1_800_000_000_000


def nats(version: int = 1, **retry: int) -> Target:
    return Target(
        APP.id, "orders", NatsTarget(("nats://127.0.0.1:4222",), "orders.fire"), version, RetryPolicy(**retry)
    )


class CountingStore(MemoryTaskStore):
    def __init__(self) -> None:
        super().__init__(Topology.parse("1x1x4"))
        self.reads = 0

    async def get_target(self, app_id: str, name: str) -> Target | None:
        self.reads += 1
        await asyncio.sleep(0)
        return await super().get_target(app_id, name)


async def test_the_directory_reads_a_target_once_per_ttl_and_shares_the_read_of_concurrent_callers() -> None:
    store, clock = CountingStore(), ManualClock(NOW_MS)
    directory = TargetDirectory(store, clock, ttl_ms=5000)
    await store.put_target(nats(), None)

    found = await asyncio.gather(*(directory.get(APP.id, "orders") for _ in range(10)))
    assert found == [nats()] * 10 and store.reads == 1
    assert directory.cached(APP.id, "orders") == nats()

    await store.put_target(nats(version=2), 1)  # changed through another node
    clock.advance(4999)
    assert (await directory.get(APP.id, "orders")) == nats()  # still this node's entry
    clock.advance(1)
    assert directory.cached(APP.id, "orders") is None
    assert (await directory.get(APP.id, "orders")) == nats(version=2) and store.reads == 2

    assert await store.delete_target(APP.id, "orders")
    directory.forget(APP.id, "orders")
    assert await directory.get(APP.id, "orders") is None
    assert await directory.get(APP.id, "orders") is None and store.reads == 4  # a miss is never cached


async def test_a_redriven_flow_naming_targets_gets_a_fresh_budget_from_their_retry_policy() -> None:
    store, clock = MemoryTaskStore(), ManualClock(NOW_MS)
    settings = Settings(storage={"urls": ["memory://"]})
    directory = TargetDirectory(store, clock)
    targets = TargetService(store, directory, settings, clock, TargetGuard())
    sent: list[Task] = []
    tasks = TaskService(
        store,
        LocalHotTier(),
        settings,
        clock,
        store.topology,
        flow_sink=lambda task, flow: sent.append(task),
        targets=targets,
    )
    await store.put_target(nats(max_attempts=20, max_age_s=600), None)
    await store.put_app(APP)
    task, flow = await stored_flow(store)
    await store.edit_task(replace(task, callback=CallbackSpec((), targets=("orders",))), {"callback"})
    await store.record_flow_updates(
        [FlowUpdate(flow.task_id, flow.scheduled_at_ms, FlowStatus.DEAD, 3, None, None, "gave up")], NOW_MS
    )

    [(_, redriven, error)] = await tasks.redrive(APP, [flow.id])

    assert error is None and isinstance(redriven, Flow)
    [fresh] = sent
    assert fresh.callback.max_attempts == 3 + 20  # the target's 20 more, not the node's 8
    age_s = fresh.callback.max_age_s
    assert age_s is not None and age_s >= 600 and age_s - 600 == max(0, (NOW_MS - flow.scheduled_at_ms) // 1000)
