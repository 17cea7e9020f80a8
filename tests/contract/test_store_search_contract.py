"""The store's searches: per shard, one ordered read of the matching items strictly after a position."""

from __future__ import annotations

import pytest

from sharding import shard_of_task_id
from tests.contract.backends import NOW_MS, make_task
from tjobs.model import Flow, FlowKind, FlowStatus, FlowUpdate, Task, TaskStatus
from tjobs.specs import CallbackSpec, CronSpec, ScheduleKind
from tjobs.stores.base import TaskStore
from tjobs.stores.queries import NO_ANSWER, FlowQuery, TaskQuery

pytestmark = pytest.mark.asyncio


async def add_flow(store: TaskStore, task: Task, at_ms: int, status: FlowStatus = FlowStatus.PENDING) -> Flow:
    flow = Flow(task.id, at_ms, task.app_id, FlowKind.MANUAL, FlowStatus.PENDING, 0, at_ms, at_ms, at_ms)
    await store.insert_manual_flow(task.id, flow)
    if status is not FlowStatus.PENDING:
        attempts = 0 if status is FlowStatus.CANCELLED else 1
        await store.record_flow_updates([FlowUpdate(task.id, at_ms, status, attempts, None)], at_ms)
    elif at_ms % 2:  # odd instants: retrying (attempted once, pending)
        await store.record_flow_updates([FlowUpdate(task.id, at_ms, status, 1, at_ms + 1000)], at_ms)
    return flow


async def test_flows_come_newest_first_per_shard_after_the_position(store: TaskStore) -> None:
    a, b = make_task(app_id="app-a", shard=1), make_task(app_id="app-a", shard=1)
    other = make_task(app_id="app-b", shard=1)
    for task in (a, b, other):
        await store.insert_task(task)
    for at in (NOW_MS, NOW_MS + 20, NOW_MS + 40):
        await add_flow(store, a, at)
        await add_flow(store, b, at)
        await add_flow(store, other, at)

    found = await store.search_flows(FlowQuery("app-a"), {1: None, 2: None}, 4)
    assert found[2] == []
    keys = [(f.scheduled_at_ms, f.task_id) for f in found[1]]
    assert keys == sorted(keys, reverse=True) and len(keys) == 4
    assert {f.app_id for f in found[1]} == {"app-a"}

    after = await store.search_flows(FlowQuery("app-a"), {1: keys[-1]}, 10)
    rest = [(f.scheduled_at_ms, f.task_id) for f in after[1]]
    assert rest == sorted(rest, reverse=True) and len(rest) == 2 and not set(rest) & set(keys)


async def test_flows_filter_by_status_retrying_task_and_time(store: TaskStore) -> None:
    task, twin = make_task(app_id="app-a", shard=3), make_task(app_id="app-a", shard=3)
    await store.insert_task(task)
    await store.insert_task(twin)
    await add_flow(store, task, NOW_MS + 1)  # pending, attempted once: retrying
    await add_flow(store, task, NOW_MS + 2)  # pending, never attempted
    await add_flow(store, task, NOW_MS + 4, FlowStatus.DEAD)
    await add_flow(store, task, NOW_MS + 6, FlowStatus.DELIVERED)
    await add_flow(store, twin, NOW_MS + 6, FlowStatus.DEAD)

    async def instants(query: FlowQuery) -> list[tuple[int, int]]:
        return [(f.scheduled_at_ms - NOW_MS, f.task_id) for f in (await store.search_flows(query, {3: None}, 10))[3]]

    assert await instants(FlowQuery("app-a", FlowStatus.DEAD)) == [(6, twin.id), (4, task.id)]
    assert await instants(FlowQuery("app-a", FlowStatus.PENDING)) == [(2, task.id), (1, task.id)]
    assert await instants(FlowQuery("app-a", FlowStatus.PENDING, retrying=True)) == [(1, task.id)]
    assert await instants(FlowQuery("app-a", task_id=twin.id)) == [(6, twin.id)]
    window = FlowQuery("app-a", from_ms=NOW_MS + 2, until_ms=NOW_MS + 6)
    assert await instants(window) == [(4, task.id), (2, task.id)]
    assert await instants(FlowQuery("app-b")) == []


async def test_tasks_come_newest_first_and_filter_by_status_kind_and_key(store: TaskStore) -> None:
    tasks = [make_task(app_id="app-a", shard=5, name=f"t{i}", key=None) for i in range(4)]
    keyed = make_task(app_id="app-a", key="order-7", name="keyed")
    cron = make_task(app_id="app-a", shard=5, name="cron")
    cron.schedule = CronSpec("0 9 * * *")
    paused = make_task(app_id="app-a", shard=5, name="paused", status=TaskStatus.PAUSED)
    for task in [*tasks, keyed, cron, paused, make_task(app_id="app-b", shard=5)]:
        await store.insert_task(task)

    newest = (await store.search_tasks(TaskQuery("app-a"), {5: None}, 3))[5]
    everyone = sorted((t.id for t in [*tasks, keyed, cron, paused] if shard_of_task_id(t.id) == 5), reverse=True)
    assert [t.id for t in newest] == everyone[:3]
    after = (await store.search_tasks(TaskQuery("app-a"), {5: ("", newest[-1].id)}, 10))[5]
    assert [t.id for t in after] == everyone[3:]

    kinds = await store.search_tasks(TaskQuery("app-a", kind=ScheduleKind.CRON), {5: None}, 10)
    assert [t.id for t in kinds[5]] == [cron.id]
    statuses = await store.search_tasks(TaskQuery("app-a", status=TaskStatus.PAUSED), {5: None}, 10)
    assert [t.id for t in statuses[5]] == [paused.id]
    shard = shard_of_task_id(keyed.id)
    by_key = await store.search_tasks(TaskQuery("app-a", key="order-7"), {shard: None}, 10)
    assert [t.id for t in by_key[shard]] == [keyed.id]


async def test_a_name_prefix_reads_by_code_point_and_only_that_prefix(store: TaskStore) -> None:
    names = ["order-1", "order-1 ", "order-10", "order-2", "order-é", "order-\U0001f600", "orders", "order", "Order-1"]
    for name in names:
        await store.insert_task(make_task(app_id="app-a", shard=7, name=name))
    found = (await store.search_tasks(TaskQuery("app-a", name_prefix="order-"), {7: None}, 100))[7]
    expected = sorted(n for n in names if n.startswith("order-"))  # code point order, no space padding
    assert [t.name for t in found] == expected

    first = (await store.search_tasks(TaskQuery("app-a", name_prefix="order-"), {7: None}, 2))[7]
    after = (first[-1].name, first[-1].id)
    rest = (await store.search_tasks(TaskQuery("app-a", name_prefix="order-"), {7: after}, 100))[7]
    assert [t.name for t in first + rest] == expected
    assert (await store.search_tasks(TaskQuery("app-a", name_prefix="order-1 "), {7: None}, 9))[7][0].name == (
        "order-1 "
    )


async def test_flows_filter_by_task_name_target_last_answer_and_when_they_last_changed(store: TaskStore) -> None:
    orders = make_task(app_id="app-a", shard=4, name="order-close-1")
    other = make_task(app_id="app-a", shard=4, name="refund-poll")
    orders.callback = CallbackSpec((), targets=("orders-mq",))
    for task in (orders, other):
        await store.insert_task(task)
    await store.insert_task(make_task(app_id="app-b", shard=4, name="order-close-1"))
    for task, at, code in ((orders, 1, 503), (orders, 2, None), (other, 3, 404), (other, 4, 200)):
        await add_flow(store, task, NOW_MS + at)
        await store.record_flow_updates([FlowUpdate(task.id, NOW_MS + at, FlowStatus.DEAD, 1, None, code)], NOW_MS + at)

    async def found(query: FlowQuery) -> list[int]:
        return [f.scheduled_at_ms - NOW_MS for f in (await store.search_flows(query, {4: None}, 10))[4]]

    assert await found(FlowQuery("app-a", task_name_prefix="order-")) == [2, 1]
    assert await found(FlowQuery("app-a", task_name_prefix="order-close-1")) == [2, 1]
    assert await found(FlowQuery("app-a", task_name_prefix="zzz")) == []
    assert await found(FlowQuery("app-a", target="orders-mq")) == [2, 1]
    assert await found(FlowQuery("app-a", target="other-mq")) == []
    assert await found(FlowQuery("app-a", answer=(500, 599))) == [1]
    assert await found(FlowQuery("app-a", answer=NO_ANSWER)) == [2]
    assert await found(FlowQuery("app-a", answer=(404, 404))) == [3]
    assert await found(FlowQuery("app-a", task_ids=(other.id, 12345))) == [4, 3]
    assert await found(FlowQuery("app-a", changed_before_ms=NOW_MS + 3)) == [2, 1]
    both = FlowQuery("app-a", FlowStatus.DEAD, task_name_prefix="order", answer=(500, 599), from_ms=NOW_MS)
    assert await found(both) == [1]


async def test_a_flow_count_stops_at_each_shards_cap(store: TaskStore) -> None:
    task, elsewhere = make_task(app_id="app-a", shard=6), make_task(app_id="app-a", shard=7)
    for each in (task, elsewhere):
        await store.insert_task(each)
    for at in range(5):
        await add_flow(store, task, NOW_MS + at, FlowStatus.DEAD)
    await add_flow(store, elsewhere, NOW_MS, FlowStatus.DEAD)

    assert await store.count_flows(FlowQuery("app-a", FlowStatus.DEAD), {6: 100, 7: 100, 8: 100}) == {6: 5, 7: 1, 8: 0}
    assert await store.count_flows(FlowQuery("app-a", FlowStatus.DEAD), {6: 3, 7: 3}) == {6: 3, 7: 1}
    window = FlowQuery("app-a", from_ms=NOW_MS + 1, until_ms=NOW_MS + 3)
    assert await store.count_flows(window, {6: 100}) == {6: 2}


async def test_task_names_answer_the_tasks_that_exist(store: TaskStore) -> None:
    named, gone = make_task(app_id="app-a", name="nightly"), make_task(app_id="app-a", name="gone")
    await store.insert_task(named)
    assert await store.task_names([named.id, gone.id, 0]) == {named.id: "nightly"}
