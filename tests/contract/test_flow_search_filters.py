"""The flow search as an operator uses it, on every store through :class:`SearchService`: by task name
(few tasks: read by their ids; many: each flow's task checked in its shard, the same flows either way),
a bounded count ("more than N" rather than counting everything) and a CSV export that is capped and
safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io

import pytest

from sharding import Topology
from tests.contract.backends import NOW_MS, TOPOLOGY, make_task
from tjobs.model import Flow, FlowKind, FlowStatus, Task
from tjobs.service import search as search_module
from tjobs.service.flow_export import EXPORT_COLUMNS, export_csv
from tjobs.service.flow_filters import FlowFilters
from tjobs.service.search import SearchService
from tjobs.stores.base import TaskStore

pytestmark = pytest.mark.asyncio


async def add_flows(
    store: TaskStore, task: Task, count: int, status: FlowStatus = FlowStatus.DEAD, first: int = 0
) -> None:
    for index in range(first, first + count):
        at = NOW_MS + index * 10 + task.id % 7
        await store.insert_manual_flow(task.id, Flow(task.id, at, task.app_id, FlowKind.MANUAL, status, 1, at, at, at))


@pytest.mark.parametrize("named_tasks_max", [100, 2], ids=["by task ids", "by each flow's task"])
async def test_a_search_by_task_name_finds_the_same_flows_however_many_tasks_match(
    store: TaskStore, named_tasks_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_module, "MAX_NAMED_TASKS", named_tasks_max)
    orders = [make_task(app_id="app-n", name=f"order-close-{i}") for i in range(3)]
    refund = make_task(app_id="app-n", name="refund-poll")
    for task in [*orders, refund]:
        await store.insert_task(task)
        await add_flows(store, task, 4)
    search = SearchService(store, Topology.parse(TOPOLOGY))

    page = await search.flows("app-n", FlowFilters(task_name_prefix="order-"), limit=5)
    seen = [flow.id for flow in page.items]
    while page.next_cursor is not None:
        page = await search.flows("app-n", FlowFilters(task_name_prefix="order-"), limit=5, cursor=page.next_cursor)
        seen += [flow.id for flow in page.items]

    assert len(seen) == len(set(seen)) == 12
    assert {int(flow_id.split("-")[0]) for flow_id in seen} == {task.id for task in orders}
    assert (await search.flows("app-n", FlowFilters(task_name_prefix="nothing"))).items == []
    names = await search.task_names({refund.id, orders[0].id})
    assert names == {refund.id: "refund-poll", orders[0].id: "order-close-0"}


async def test_a_count_is_exact_up_to_its_bound_and_says_more_past_it(store: TaskStore) -> None:
    tasks = [make_task(app_id="app-c") for _ in range(6)]
    for task in tasks:
        await store.insert_task(task)
        await add_flows(store, task, 5)
    await add_flows(store, tasks[0], 3, FlowStatus.DELIVERED, first=5)
    search = SearchService(store, Topology.parse(TOPOLOGY))
    dead = FlowFilters(status="dead")

    assert await search.count_flows("app-c", dead, 100) == search_module.FlowCount(30, False)
    assert await search.count_flows("app-c", dead, 30) == search_module.FlowCount(30, False)
    assert await search.count_flows("app-c", dead, 29) == search_module.FlowCount(29, True)
    assert await search.count_flows("app-c", FlowFilters(), 1000) == search_module.FlowCount(33, False)
    assert await search.count_flows("app-c", FlowFilters(task_id=tasks[1].id), 1000) == search_module.FlowCount(
        5, False
    )


async def test_an_export_is_capped_newest_first_and_never_starts_a_cell_with_a_formula(store: TaskStore) -> None:
    risky = make_task(app_id="app-x", name='=HYPERLINK("http://evil")')
    plain = make_task(app_id="app-x", name='nightly, "quoted"')
    for task in (risky, plain):
        await store.insert_task(task)
        await add_flows(store, task, 3)
    search = SearchService(store, Topology.parse(TOPOLOGY))

    text = b"".join([chunk async for chunk in export_csv(search, "app-x", FlowFilters(), max_rows=4)]).decode()
    rows = list(csv.reader(io.StringIO(text)))

    assert rows[0] == list(EXPORT_COLUMNS) and len(rows) == 5  # header + the newest 4
    scheduled = [row[3] for row in rows[1:]]
    assert scheduled == sorted(scheduled, reverse=True)
    names = {row[2] for row in rows[1:]}
    assert names <= {'\'=HYPERLINK("http://evil")', 'nightly, "quoted"'} and len(names) == 2
    assert all(not cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)
