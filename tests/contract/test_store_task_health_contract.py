"""A task's history a page at a time and a page of tasks' health, on every backend: older and newer pages
are keyset ranges of the flows' primary key (newest first either way), and the health of a page's tasks
is each task's newest flow and its window's flows counted by status, at most ``cap`` of them."""

from __future__ import annotations

from tests.contract.backends import NOW_MS, make_task
from tjobs.model import Flow, FlowKind, FlowStatus, TaskHealth
from tjobs.stores.base import TaskStore

DAY_MS = 86_400_000


async def _flow(store: TaskStore, task_id: int, at_ms: int, status: FlowStatus, attempts: int = 1) -> None:
    flow = Flow(task_id, at_ms, "app-a", FlowKind.MANUAL, status, attempts, None, at_ms, at_ms + 5)
    await store.insert_manual_flow(task_id, flow)


async def test_a_tasks_history_pages_older_and_newer_by_its_instants(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=1))
    instants = [NOW_MS - 1000 + 10 * n for n in range(10)]  # oldest first
    for at_ms in instants:
        await _flow(store, task.id, at_ms, FlowStatus.DELIVERED)

    def at(flows: list[Flow]) -> list[int]:
        return [f.scheduled_at_ms for f in flows]

    newest = await store.list_flows(task.id, 4)
    assert at(newest) == instants[:-5:-1]  # 9, 8, 7, 6
    older = await store.list_flows(task.id, 4, before_scheduled_at_ms=newest[-1].scheduled_at_ms)
    assert at(older) == [instants[5], instants[4], instants[3], instants[2]]
    newer = await store.list_flows(task.id, 4, after_scheduled_at_ms=older[0].scheduled_at_ms)
    assert at(newer) == [instants[9], instants[8], instants[7], instants[6]]  # just newer, newest first
    just_newer = await store.list_flows(task.id, 2, after_scheduled_at_ms=instants[1])
    assert at(just_newer) == [instants[3], instants[2]]  # the oldest two after it
    assert await store.list_flows(task.id, 4, after_scheduled_at_ms=instants[9]) == []
    assert at(await store.list_flows(task.id, 9, before_scheduled_at_ms=instants[1])) == [instants[0]]


async def test_the_health_of_a_page_counts_each_tasks_window_by_status_and_names_its_newest_flow(
    store: TaskStore,
) -> None:
    busy = await store.insert_task(make_task(shard=2))
    quiet = await store.insert_task(make_task(shard=7))
    never = await store.insert_task(make_task(shard=2))
    since_ms = NOW_MS - DAY_MS
    await _flow(store, busy.id, since_ms - 1, FlowStatus.DEAD)  # before the window: not counted
    for n, status in enumerate([FlowStatus.DELIVERED] * 5 + [FlowStatus.DEAD] * 2 + [FlowStatus.SKIPPED]):
        await _flow(store, busy.id, since_ms + n, status)
    await _flow(store, busy.id, NOW_MS, FlowStatus.PENDING, attempts=2)  # the newest: retrying
    await _flow(store, quiet.id, since_ms - 5, FlowStatus.DELIVERED)  # only before the window

    health = await store.task_health([busy.id, quiet.id, never.id, 999], since_ms, cap=100)

    assert health[busy.id] == TaskHealth(FlowStatus.PENDING, NOW_MS, NOW_MS + 5, 2, 5, 2, 1, 9)
    assert health[busy.id].success_rate == 5 / 7
    assert health[quiet.id] == TaskHealth(FlowStatus.DELIVERED, since_ms - 5, since_ms, 1, 0, 0, 0, 0)
    assert health[quiet.id].success_rate is None
    assert health[never.id] == TaskHealth() and health[999] == TaskHealth()


async def test_the_health_counts_only_the_newest_cap_flows_of_a_busy_task(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=4))
    since_ms = NOW_MS - DAY_MS
    for n in range(6):  # two dead ones first, then four delivered: the newest three are delivered
        await _flow(store, task.id, since_ms + n, FlowStatus.DEAD if n < 2 else FlowStatus.DELIVERED)

    (health,) = (await store.task_health([task.id], since_ms, cap=3)).values()

    assert (health.counted, health.delivered, health.dead) == (3, 3, 0)
    assert health.last_scheduled_at_ms == since_ms + 5
