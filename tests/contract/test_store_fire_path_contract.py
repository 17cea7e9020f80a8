"""The fire path of the storage contract (:class:`tjobs.stores.contracts.FirePath`), proven on every
backend: memory, SQLite, MariaDB. Loading due tasks, the fire transaction (one per server), delivery
outcomes, leases on stale flows, the database clock."""

from __future__ import annotations

import asyncio
import gc
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from sharding import Topology, shard_of_task_id
from tests.contract.backends import (
    IDS,
    NOW_MS,
    TOPOLOGY,
    drop_databases,
    intent_of,
    interval_planner,
    make_task,
    manual_flow,
    run_in_thread,
    wipe,
)
from tjobs.errors import Fenced
from tjobs.model import FireIntent, FireOutcome, FirePlan, Flow, FlowKind, FlowStatus, FlowUpdate, Task, TaskStatus
from tjobs.settings import StorageSettings
from tjobs.stores import sql_flow_updates
from tjobs.stores.base import TaskStore
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

APPS = ("app-a", "app-b")


async def dump(store: TaskStore) -> dict[str, Any]:
    """Every task and flow the store holds for the test apps, through the public API."""
    tasks: list[Task] = []
    for app_id in APPS:
        for shard in store.topology.shards():
            tasks += await store.list_tasks(app_id, shard, None, 10_000)
    flows = {task.id: await store.list_flows(task.id, 10_000) for task in tasks}
    return {"tasks": sorted(tasks, key=lambda t: t.id), "flows": flows}


# ---- loading ------------------------------------------------------------------------------------


async def test_load_due_returns_active_due_tasks_in_order_and_pages(store: TaskStore) -> None:
    shard = 2
    tasks = [make_task(shard=shard) for _ in range(9)]
    specs = [  # (next_run_at offset, status)
        (30, TaskStatus.ACTIVE),
        (10, TaskStatus.ACTIVE),
        (10, TaskStatus.ACTIVE),
        (-5_000, TaskStatus.ACTIVE),
        (20, TaskStatus.PAUSED),
        (40, TaskStatus.COMPLETED),
        (1_000, TaskStatus.ACTIVE),
    ]
    for i, (offset, status) in enumerate(specs):
        await store.insert_task(replace(tasks[i], next_run_at_ms=NOW_MS + offset, status=status))
    await store.insert_task(replace(tasks[8], next_run_at_ms=None))
    await store.insert_task(make_task(shard=shard + 1, next_run_at_ms=NOW_MS))  # another shard
    before = await dump(store)

    due = await store.load_due(shard, NOW_MS + 1_000, 100)
    expected = [
        (NOW_MS - 5_000, tasks[3].id),
        (NOW_MS + 10, tasks[1].id),
        (NOW_MS + 10, tasks[2].id),
        (NOW_MS + 30, tasks[0].id),
    ]
    assert [(d.next_run_at_ms, d.task_id) for d in due] == expected
    assert all(d.version == 1 and d.app_id == "app-a" for d in due)

    pages: list[tuple[int, int]] = []
    after: tuple[int, int] | None = None
    while True:
        page = await store.load_due(shard, NOW_MS + 1_000, 1, after)
        if not page:
            break
        pages += [(d.next_run_at_ms, d.task_id) for d in page]
        after = (page[-1].next_run_at_ms, page[-1].task_id)
    assert pages == expected
    assert await store.count_active(shard) == 6  # the one with no next run is active too
    assert await dump(store) == before  # invariant 3 (docs/design.md): loading changes nothing


async def test_load_due_skipping_a_span_reads_below_and_above_it_and_pages_across_it(store: TaskStore) -> None:
    # The cycle load reads the overdue tasks and the new cycle [old horizon, new horizon) in one
    # statement, leaving out [now, old horizon), loaded before.
    shard = 3
    offsets = [-5_000, -1, 0, 50, 99, 100, 100, 100, 150, 199, 200, 300]
    tasks = [make_task(shard=shard, next_run_at_ms=NOW_MS + offset) for offset in offsets]
    for task in tasks:
        await store.insert_task(task)
    await store.insert_task(make_task(shard=shard, next_run_at_ms=NOW_MS - 10, status=TaskStatus.PAUSED))
    await store.insert_task(make_task(shard=shard, next_run_at_ms=NOW_MS + 120, status=TaskStatus.PAUSED))
    await store.insert_task(make_task(shard=shard + 1, next_run_at_ms=NOW_MS - 10))  # another shard
    await store.insert_task(make_task(shard=shard + 1, next_run_at_ms=NOW_MS + 120))
    skip = (NOW_MS, NOW_MS + 100)  # from included, until not

    def kept(task: Task) -> bool:
        offset = (task.next_run_at_ms or 0) - NOW_MS
        return offset < 200 and not 0 <= offset < 100

    expected = sorted((t.next_run_at_ms or 0, t.id) for t in tasks if kept(t))
    assert [at - NOW_MS for at, _ in expected] == [-5_000, -1, 100, 100, 100, 150, 199]
    before = await dump(store)

    due = await store.load_due(shard, NOW_MS + 200, 100, skip=skip)
    assert [(d.next_run_at_ms, d.task_id) for d in due] == expected

    for size in (1, 2, 3):  # pages that end below the span, inside the tie at +100 and above
        pages: list[tuple[int, int]] = []
        after: tuple[int, int] | None = None
        while True:
            page = await store.load_due(shard, NOW_MS + 200, size, after, skip=skip)
            assert len(page) <= size
            pages += [(d.next_run_at_ms, d.task_id) for d in page]
            if len(page) < size:
                break
            after = (page[-1].next_run_at_ms, page[-1].task_id)
        assert pages == expected, size

    # an `after` inside the skipped span: the span still left out
    inside = await store.load_due(shard, NOW_MS + 200, 100, (NOW_MS + 50, tasks[3].id), skip=skip)
    assert [(d.next_run_at_ms, d.task_id) for d in inside] == expected[2:]
    # nothing above the span before before_ms: the overdue ones only
    overdue = await store.load_due(shard, NOW_MS + 100, 100, skip=skip)
    assert [(d.next_run_at_ms, d.task_id) for d in overdue] == expected[:2]
    # no skip: every due task, as before
    assert len(await store.load_due(shard, NOW_MS + 200, 100)) == 10
    assert await dump(store) == before  # invariant 3 (docs/design.md): loading changes nothing


# ---- the fire transaction -----------------------------------------------------------------------


async def test_fire_inserts_the_flow_and_advances_the_task(store: TaskStore) -> None:
    task = await store.insert_task(make_task(next_run_at_ms=NOW_MS))
    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS + 3, interval_planner)

    assert outcome.committed
    advanced = replace(task, next_run_at_ms=NOW_MS + 60_000, version=2, fire_count=1, updated_at_ms=NOW_MS + 3)
    assert outcome.task == advanced
    assert outcome.flows == [
        Flow(task.id, NOW_MS, "app-a", FlowKind.SCHEDULED, FlowStatus.PENDING, 0, NOW_MS + 3, NOW_MS + 3, NOW_MS + 3)
    ]
    assert await store.get_task(task.id) == advanced
    assert await store.list_flows(task.id, 10) == outcome.flows


async def test_fire_that_completes_a_task(store: TaskStore) -> None:
    task = await store.insert_task(make_task(max_fires=1))
    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
    stored = await store.get_task(task.id)
    assert outcome.task == stored
    assert stored is not None and stored.status is TaskStatus.COMPLETED and stored.next_run_at_ms is None
    assert await store.count_active(shard_of_task_id(stored.id)) == 0


async def test_a_fire_batch_is_freed_by_reference_counting_not_left_to_the_cyclic_collector(store: TaskStore) -> None:
    """Nothing of a committed batch (its intents, outcomes, tasks, flows) is left in a reference cycle.
    A node firing thousands a second would otherwise leave every batch to the cyclic collector: young
    collections every second or so, and middle ones that stop the event loop for hundreds of
    milliseconds (the AMQP fire bench's late slices, docs/benchmarks.md, issue 14)."""
    tasks = [await store.insert_task(make_task(next_run_at_ms=NOW_MS)) for _ in range(3)]
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        outcomes = await store.commit_fires([intent_of(task) for task in tasks], NOW_MS + 3, interval_planner)
        assert all(outcome.committed for outcome in outcomes)
        del outcomes
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if isinstance(o, FireOutcome | FireIntent | Task | Flow)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


@pytest.mark.parametrize("change", ["stale_version", "paused", "deleted", "moved", "completed"])
async def test_failed_compare_and_set_fires_nothing(store: TaskStore, change: str) -> None:
    task = await store.insert_task(make_task())
    intent = intent_of(task)
    if change == "stale_version":
        await store.update_task(replace(task, name="edited"), 1)  # same instant, version 2
    elif change == "paused":
        await store.update_task(replace(task, status=TaskStatus.PAUSED), 1)
    elif change == "deleted":
        await store.delete_task(task.id)
    elif change == "moved":
        await store.update_task(replace(task, next_run_at_ms=NOW_MS + 1), 1)
        intent = FireIntent(task.id, NOW_MS, 2)  # right version, old instant
    else:
        await store.update_task(replace(task, status=TaskStatus.COMPLETED), 1)
        intent = FireIntent(task.id, NOW_MS, 2)
    before = await dump(store)

    [outcome] = await store.commit_fires([intent], NOW_MS, interval_planner)

    assert outcome.task is None and outcome.flows == [] and not outcome.committed
    assert await dump(store) == before


async def test_a_fence_closing_inside_the_transaction_rolls_it_back(store: TaskStore) -> None:
    # Given due tasks on two shards, and a fence that closes while the transaction is open
    first = await store.insert_task(make_task(shard=1))
    second = await store.insert_task(make_task(shard=9))  # another table (and DB, on MariaDB)
    before = await dump(store)
    asked: list[int] = []

    def fence_closed() -> bool:
        asked.append(1)
        return False

    # When the batch commits, it is rolled back and Fenced is raised
    with pytest.raises(Fenced):
        await store.commit_fires([intent_of(first), intent_of(second)], NOW_MS, interval_planner, fence_closed)

    # Then the fence was asked, nothing was written, and the same intents still commit once it opens
    assert asked
    assert await dump(store) == before
    outcomes = await store.commit_fires([intent_of(first), intent_of(second)], NOW_MS, interval_planner, lambda: True)
    assert [o.committed for o in outcomes] == [True, True]


async def test_a_replayed_intent_never_duplicates_a_flow(store: TaskStore) -> None:
    task = await store.insert_task(make_task())
    intent = intent_of(task)
    first = await store.commit_fires([intent, intent], NOW_MS, interval_planner)
    assert [o.committed for o in first] == [True, False]
    again = await store.commit_fires([intent], NOW_MS + 10, interval_planner)
    assert not again[0].committed
    assert len(await store.list_flows(task.id, 10)) == 1


async def test_an_existing_flow_is_not_duplicated_but_the_task_still_advances(store: TaskStore) -> None:
    # A manual fire already recorded a flow at exactly the scheduled instant
    task = await store.insert_task(make_task())
    manual = await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS))
    other = await store.insert_task(make_task(shard=shard_of_task_id(task.id)))  # same shard, no clash

    outcomes = await store.commit_fires([intent_of(task), intent_of(other)], NOW_MS + 1, interval_planner)

    assert outcomes[0].committed and outcomes[0].flows == []  # only flows this transaction wrote
    assert outcomes[1].committed and len(outcomes[1].flows) == 1
    assert await store.list_flows(task.id, 10) == [manual]
    assert (await store.get_task(task.id)) == outcomes[0].task
    assert outcomes[0].task is not None and outcomes[0].task.version == 2


async def test_a_batch_spanning_every_shard_and_database(store: TaskStore) -> None:
    tasks = []
    for shard in store.topology.shards():
        for i in range(3):
            task = make_task(shard=shard, next_run_at_ms=NOW_MS + i, name=f"{i}")
            tasks.append(await store.insert_task(task))
    stale = tasks[5]
    await store.update_task(replace(stale, name="edited"), 1)
    intents = [intent_of(t) for t in reversed(tasks)]
    intents.append(FireIntent(IDS.mint(0, NOW_MS), NOW_MS, 1))  # no such task

    outcomes = await store.commit_fires(intents, NOW_MS + 100, interval_planner)

    assert [o.intent for o in outcomes] == intents  # one outcome per intent, in order
    committed = {o.intent.task_id for o in outcomes if o.committed}
    assert committed == {t.id for t in tasks} - {stale.id}
    for task in tasks:
        flows = await store.list_flows(task.id, 10)
        stored = await store.get_task(task.id)
        assert stored is not None
        if task.id == stale.id:
            assert flows == [] and stored.version == 2 and stored.fire_count == 0
        else:
            assert [f.scheduled_at_ms for f in flows] == [task.next_run_at_ms]
            assert (stored.version, stored.fire_count) == (2, 1)
            assert stored.next_run_at_ms == (task.next_run_at_ms or 0) + 60_000


async def test_a_batch_advances_a_table_holding_one_of_its_tasks_as_one_holding_several(store: TaskStore) -> None:
    """The advance of a table's only task (one plain UPDATE) and of several (CASE per column) store the
    same rows: next run, status (a task completing among them), version, fire count, updated_at."""
    alone = await store.insert_task(make_task(shard=3, next_run_at_ms=NOW_MS, name="alone"))
    last = await store.insert_task(make_task(shard=5, next_run_at_ms=NOW_MS, name="last", max_fires=1))
    pair = [await store.insert_task(make_task(shard=9, next_run_at_ms=NOW_MS + i, name=f"p{i}")) for i in range(2)]
    completing = await store.insert_task(make_task(shard=9, next_run_at_ms=NOW_MS, name="c", max_fires=1))
    fired = [alone, last, *pair, completing]

    outcomes = await store.commit_fires([intent_of(t) for t in fired], NOW_MS + 7, interval_planner)

    assert all(o.committed for o in outcomes)
    for task, outcome in zip(fired, outcomes, strict=True):
        stored = await store.get_task(task.id)
        assert stored == outcome.task
        assert stored is not None and (stored.version, stored.fire_count, stored.updated_at_ms) == (2, 1, NOW_MS + 7)
        if task in (last, completing):
            assert stored.status is TaskStatus.COMPLETED and stored.next_run_at_ms is None
        else:
            assert stored.status is TaskStatus.ACTIVE
            assert stored.next_run_at_ms == (task.next_run_at_ms or 0) + 60_000


async def test_a_planner_returning_none_changes_nothing(store: TaskStore) -> None:
    task = await store.insert_task(make_task())
    before = await dump(store)
    [outcome] = await store.commit_fires([intent_of(task)], NOW_MS, lambda _t, _i, _n: None)
    assert not outcome.committed and outcome.flows == []
    assert await dump(store) == before


async def test_a_plan_with_no_flow_advances_the_task_alone(store: TaskStore) -> None:
    """An instant the task's calendar came to exclude (tjobs/firing/planner.py): no flow, the task moves on;
    alone in its batch and beside a fire of another task of the same table."""
    lone, other, excluded = [await store.insert_task(make_task(shard=5)) for _ in range(3)]

    def no_flow(task: Task, intent: FireIntent, now_ms: int) -> FirePlan | None:
        if task.id == other.id:
            return interval_planner(task, intent, now_ms)
        return FirePlan([], intent.scheduled_at_ms + 60_000, TaskStatus.ACTIVE, 0)

    [outcome] = await store.commit_fires([intent_of(lone)], NOW_MS, no_flow)
    outcomes = await store.commit_fires([intent_of(other), intent_of(excluded)], NOW_MS, no_flow)
    assert outcome.committed and outcome.flows == [] and [len(o.flows) for o in outcomes] == [1, 0]
    for task in (lone, excluded):
        assert await store.get_task(task.id) == replace(
            task, next_run_at_ms=NOW_MS + 60_000, version=2, fire_count=0, updated_at_ms=NOW_MS
        )
        assert await store.list_flows(task.id, 10) == []


async def test_a_failing_planner_rolls_the_whole_transaction_back(store: TaskStore) -> None:
    shard = 7
    good = await store.insert_task(make_task(shard=shard))
    bad = await store.insert_task(make_task(shard=shard, name="bad"))
    before = await dump(store)

    def planner(task: Task, intent: FireIntent, now_ms: int) -> FirePlan | None:
        if task.name == "bad":
            raise RuntimeError("planner bug")
        return interval_planner(task, intent, now_ms)

    with pytest.raises(RuntimeError, match="planner bug"):
        await store.commit_fires([intent_of(good), intent_of(bad)], NOW_MS, planner)
    assert await dump(store) == before


async def test_a_task_fired_twice_in_one_batch_follows_its_own_advance(store: TaskStore) -> None:
    task = await store.insert_task(make_task())
    second = FireIntent(task.id, NOW_MS + 60_000, 2)
    outcomes = await store.commit_fires([intent_of(task), second], NOW_MS + 60_000, interval_planner)
    assert [o.committed for o in outcomes] == [True, True]
    stored = await store.get_task(task.id)
    assert stored is not None and (stored.version, stored.fire_count) == (3, 2)
    assert [f.scheduled_at_ms for f in await store.list_flows(task.id, 10)] == [NOW_MS + 60_000, NOW_MS]


# ---- one server's transaction failing (a batch over several servers) ---------------------------
#
# Shards 1 and 5 live on instance 0, shards 9 and 13 on instance 1 (topology 2x2x4). ``split_store``
# puts the two instances on two servers: the memory twin's instances, SQLite's files, and MariaDB
# reached through two URLs (two engines, so two transactions, even on one physical server).


def _other_address(url: str) -> str | None:
    """The same MariaDB server under another host name: a second engine URL for the store."""
    parsed = make_url(url)
    swap = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}.get(parsed.host or "")
    return None if swap is None else parsed.set(host=swap).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def two_server_mariadb_settings(mysql_url: str) -> Iterator[StorageSettings]:
    other = _other_address(mysql_url)
    if other is None:
        pytest.skip(f"no second address for {mysql_url}: use 127.0.0.1 or localhost")
    settings = StorageSettings(
        urls=[mysql_url, other], topology=TOPOLOGY, database_prefix=f"tjobsct2_{secrets.token_hex(4)}"
    )
    run_in_thread(lambda: migrate(settings))
    yield settings
    run_in_thread(lambda: drop_databases(settings))


@pytest.fixture(params=["memory", "sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
async def split_store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    """A store whose instances 0 and 1 commit in separate transactions."""
    if request.param == "memory":
        yield MemoryTaskStore(Topology.parse(TOPOLOGY))
        return
    name = "sqlite_store_settings" if request.param == "sqlite" else "two_server_mariadb_settings"
    settings: StorageSettings = request.getfixturevalue(name)
    await wipe(settings)
    sql_store = SQLAlchemyTaskStore(settings)
    await sql_store.start()
    try:
        yield sql_store
    finally:
        await sql_store.close()


async def _assert_each_outcome_is_what_the_store_holds(
    store: TaskStore, before: dict[int, Task], outcomes: list[FireOutcome]
) -> None:
    """Committed: the task advanced and its flows are stored. Failed: nothing of it was written."""
    for outcome in outcomes:
        task_id = outcome.intent.task_id
        stored = await store.get_task(task_id)
        flows = await store.list_flows(task_id, 10)
        if outcome.committed:
            assert outcome.error is None and stored == outcome.task
            assert flows == outcome.flows != []
        else:
            assert outcome.failed and outcome.flows == []
            assert stored == before[task_id] and flows == []


async def test_a_transaction_that_fails_on_one_server_keeps_the_commits_of_the_others(
    split_store: TaskStore,
) -> None:
    store = split_store
    # Given due tasks on both servers, and a planner that fails on one task of server 1 (shard 9)
    tasks = [await store.insert_task(make_task(shard=shard, name=f"s{shard}")) for shard in (1, 5, 9, 13)]
    bad = await store.insert_task(make_task(shard=9, name="bad"))
    before = {t.id: t for t in [*tasks, bad]}
    failure = RuntimeError("server 1 went away")

    def planner(task: Task, intent: FireIntent, now_ms: int) -> FirePlan | None:
        if task.name == "bad":
            raise failure
        return interval_planner(task, intent, now_ms)

    # When one batch commits them all
    intents = [intent_of(t) for t in [*tasks, bad]]
    outcomes = await store.commit_fires(intents, NOW_MS, planner)

    # Then server 0's fires are committed and reported; the failed transaction's intents carry the
    # error and wrote nothing (shard 13 shares a server with shard 9 on MariaDB, not on SQLite)
    assert [o.intent for o in outcomes] == intents
    by_name = {before[o.intent.task_id].name: o for o in outcomes}
    assert by_name["s1"].committed and by_name["s5"].committed
    assert by_name["bad"].error is failure and by_name["s9"].error is failure
    assert by_name["s13"].committed or by_name["s13"].error is failure
    await _assert_each_outcome_is_what_the_store_holds(store, before, outcomes)

    # And the failed intents, committed again alone, fire once each
    retried = await store.commit_fires([o.intent for o in outcomes if o.failed], NOW_MS + 5, interval_planner)
    assert all(o.committed for o in retried)
    for task in [*tasks, bad]:
        assert [f.scheduled_at_ms for f in await store.list_flows(task.id, 10)] == [NOW_MS]


async def test_a_fence_closing_before_one_servers_commit_rolls_back_only_that_transaction(
    split_store: TaskStore,
) -> None:
    store = split_store
    # Given due tasks on both servers, and a fence that closes for the first transaction to ask
    tasks = [await store.insert_task(make_task(shard=shard)) for shard in (1, 1, 9, 9)]
    before = {t.id: t for t in tasks}
    answers = iter([False])

    def fence() -> bool:
        return next(answers, True)

    # When the batch commits
    outcomes = await store.commit_fires([intent_of(t) for t in tasks], NOW_MS, interval_planner, fence)

    # Then one server's transaction is Fenced and wrote nothing, the other one's committed
    failed = [o for o in outcomes if o.failed]
    assert len(failed) == 2 and all(isinstance(o.error, Fenced) for o in failed)
    assert len({shard_of_task_id(o.intent.task_id) for o in failed}) == 1
    await _assert_each_outcome_is_what_the_store_holds(store, before, outcomes)


async def test_a_batch_that_fails_on_every_server_raises_and_writes_nothing(split_store: TaskStore) -> None:
    store = split_store
    tasks = [await store.insert_task(make_task(shard=shard)) for shard in (1, 9)]
    before = await dump(store)

    def planner(_task: Task, _intent: FireIntent, _now_ms: int) -> FirePlan | None:
        raise RuntimeError("planner bug")

    with pytest.raises(RuntimeError, match="planner bug"):
        await store.commit_fires([intent_of(t) for t in tasks], NOW_MS, planner)
    assert await dump(store) == before


# ---- delivery outcomes --------------------------------------------------------------------------


async def test_flow_updates_never_touch_a_terminal_flow(store: TaskStore) -> None:
    task = await store.insert_task(make_task())
    for offset, status in (
        (1, FlowStatus.PENDING),
        (2, FlowStatus.DELIVERED),
        (3, FlowStatus.PENDING),
        (4, FlowStatus.SENDING),
        (5, FlowStatus.DEAD),
    ):
        await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + offset, status))

    updates = [
        FlowUpdate(task.id, NOW_MS + 1, FlowStatus.PENDING, 1, NOW_MS + 1_000, 503, "busy"),
        FlowUpdate(task.id, NOW_MS + 2, FlowStatus.PENDING, 9, NOW_MS + 1_000, 500, "late retry"),
        FlowUpdate(task.id, NOW_MS + 3, FlowStatus.PENDING, 1, NOW_MS + 1_000, 503, "busy"),
        FlowUpdate(task.id, NOW_MS + 3, FlowStatus.DELIVERED, 2, None, 200, None),  # later wins
        FlowUpdate(task.id, NOW_MS + 4, FlowStatus.DELIVERED, 1, None, 204, None),
        FlowUpdate(task.id, NOW_MS + 4, FlowStatus.PENDING, 2, NOW_MS, None, "after terminal: ignored"),
        FlowUpdate(task.id, NOW_MS + 5, FlowStatus.DELIVERED, 3, None, 200, None),
        FlowUpdate(task.id, NOW_MS + 99, FlowStatus.DELIVERED, 3, None, 200, None),  # no such flow
        FlowUpdate(task.id, NOW_MS + 1, FlowStatus.PENDING, 1, NOW_MS + 1_000, 503, "x" * 900),
    ]
    await store.record_flow_updates(updates, NOW_MS + 50)

    flows = {f.scheduled_at_ms - NOW_MS: f for f in await store.list_flows(task.id, 10)}
    assert (flows[1].status, flows[1].attempts, flows[1].last_status_code) == (FlowStatus.PENDING, 1, 503)
    assert flows[1].last_error == "x" * 500 and flows[1].updated_at_ms == NOW_MS + 50
    assert (flows[2].status, flows[2].attempts, flows[2].updated_at_ms) == (FlowStatus.DELIVERED, 0, NOW_MS + 2)
    assert (flows[3].status, flows[3].attempts, flows[3].next_attempt_at_ms) == (FlowStatus.DELIVERED, 2, None)
    assert (flows[4].status, flows[4].last_status_code) == (FlowStatus.DELIVERED, 204)
    assert (flows[5].status, flows[5].attempts) == (FlowStatus.DEAD, 0)


async def test_flow_updates_spread_over_many_shards_land_in_one_call(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MariaDB sends them as multi-statements; a tiny chunk size makes this one call several round trips.
    monkeypatch.setattr(sql_flow_updates, "MULTI_STATEMENT_PARAMS", 40)
    tasks = [await store.insert_task(make_task(shard=shard)) for shard in (0, 1, 5, 7, 8, 12, 15)]
    for task in tasks:
        for offset in (1, 2, 3):
            await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + offset))
    await store.insert_manual_flow(tasks[3].id, manual_flow(tasks[3], NOW_MS + 4, FlowStatus.DEAD))

    def outcome(index: int, offset: int) -> FlowUpdate:
        task_id, at_ms = tasks[index].id, NOW_MS + offset
        if offset == 1:
            return FlowUpdate(task_id, at_ms, FlowStatus.DELIVERED, 1, None, 204, None)
        if offset == 2:
            return FlowUpdate(task_id, at_ms, FlowStatus.PENDING, 1, NOW_MS + 500 + index, 503, f"busy {index}")
        return FlowUpdate(task_id, at_ms, FlowStatus.DEAD, 3, None, None, "refused")

    updates = [outcome(index, offset) for index in range(len(tasks)) for offset in (1, 2, 3, 4)]
    await store.record_flow_updates(updates, NOW_MS + 50)

    for index, task in enumerate(tasks):
        flows = {f.scheduled_at_ms - NOW_MS: f for f in await store.list_flows(task.id, 10)}
        assert (flows[1].status, flows[1].attempts, flows[1].last_status_code, flows[1].last_error) == (
            FlowStatus.DELIVERED,
            1,
            204,
            None,
        )
        assert (flows[2].status, flows[2].next_attempt_at_ms, flows[2].last_error) == (
            FlowStatus.PENDING,
            NOW_MS + 500 + index,
            f"busy {index}",
        )
        assert (flows[3].status, flows[3].attempts, flows[3].updated_at_ms) == (FlowStatus.DEAD, 3, NOW_MS + 50)
        assert set(flows) == ({1, 2, 3, 4} if index == 3 else {1, 2, 3})  # no flow 4 was made up
    untouched = await store.get_flow(tasks[3].id, NOW_MS + 4)
    assert untouched is not None and (untouched.attempts, untouched.updated_at_ms) == (0, NOW_MS + 4)


# ---- leases on stale flows ----------------------------------------------------------------------


async def test_lease_stale_flows_hands_each_flow_to_one_caller_until_the_lease_ends(store: TaskStore) -> None:
    shard = 4
    task = await store.insert_task(make_task(shard=shard))
    gone = await store.insert_task(make_task(shard=shard, name="gone"))
    await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS - 300))  # stale
    await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS + 50_000))  # not yet due
    await store.insert_manual_flow(task.id, _ended(task, NOW_MS - 400))
    await store.insert_manual_flow(gone.id, manual_flow(gone, NOW_MS - 200, FlowStatus.SENDING))
    await store.delete_task(gone.id)

    leased = await store.lease_stale_flows(shard, NOW_MS, 10_000, 10)

    assert [(f.task_id, f.scheduled_at_ms) for f, _ in leased] == [(task.id, NOW_MS - 300), (gone.id, NOW_MS - 200)]
    assert all(f.next_attempt_at_ms == NOW_MS + 10_000 for f, _ in leased)
    assert leased[0][1] == task and leased[1][1] is None
    assert await store.lease_stale_flows(shard, NOW_MS + 9_999, 10_000, 10) == []
    again = await store.lease_stale_flows(shard, NOW_MS + 10_000, 10_000, 1)
    assert [(f.task_id, f.scheduled_at_ms) for f, _ in again] == [(task.id, NOW_MS - 300)]


async def test_a_lease_counts_no_attempt_on_the_flows_its_caller_says_it_holds(store: TaskStore) -> None:
    # A flow the caller's own deliverer holds (queued behind a slow app, say) has lost no attempt: the lease
    # moves it out of the next pass's way without counting one; the others are counted as before
    shard = 4
    task = await store.insert_task(make_task(shard=shard))
    held = await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS - 300))
    lost = await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS - 200))
    asked: list[str] = []

    def holds(flow_id: str) -> int | None:
        asked.append(flow_id)
        return NOW_MS if flow_id == held.id else None  # held, with no longer lease than the lease's own

    leased = await store.lease_stale_flows(shard, NOW_MS, 10_000, 10, held=holds)

    assert [(f.id, f.attempts, f.next_attempt_at_ms) for f, _ in leased] == [
        (held.id, 0, NOW_MS + 10_000),
        (lost.id, 1, NOW_MS + 10_000),
    ]
    assert sorted(asked) == sorted([held.id, lost.id])
    for flow, attempts in ((held, 0), (lost, 1)):
        stored = await store.get_flow(task.id, flow.scheduled_at_ms)
        assert stored is not None and (stored.attempts, stored.next_attempt_at_ms) == (attempts, NOW_MS + 10_000)


async def test_a_lease_holds_the_flows_its_caller_holds_until_the_instants_it_gives(store: TaskStore) -> None:
    # A flow queued behind a slow app past the grace is leased until about when its queue reaches it, so it is not
    # leased (written) again at every lease's end: three held flows at two instants past the lease, one not held
    shard = 6
    task = await store.insert_task(make_task(shard=shard))
    flows = [await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS - 400 + i)) for i in range(4)]
    until = {flows[0].id: NOW_MS + 90_000, flows[1].id: NOW_MS + 40_000, flows[2].id: NOW_MS + 90_000}

    leased = await store.lease_stale_flows(shard, NOW_MS, 10_000, 10, held=until.get)

    expected = [
        (flows[0].id, 0, NOW_MS + 90_000),
        (flows[1].id, 0, NOW_MS + 40_000),
        (flows[2].id, 0, NOW_MS + 90_000),
        (flows[3].id, 1, NOW_MS + 10_000),
    ]
    assert [(f.id, f.attempts, f.next_attempt_at_ms) for f, _ in leased] == expected
    for flow_id, attempts, next_attempt_at_ms in expected:
        stored = next(f for f in flows if f.id == flow_id)
        row = await store.get_flow(task.id, stored.scheduled_at_ms)
        assert row is not None and (row.attempts, row.next_attempt_at_ms) == (attempts, next_attempt_at_ms)
    # not due again until then: a lease when the short one ends finds only the not-held flow, one at the nearer held
    # instant that flow (leased again meanwhile) and the nearer held one, not the two held longer
    again = await store.lease_stale_flows(shard, NOW_MS + 10_000, 10_000, 10)
    assert [f.id for f, _ in again] == [flows[3].id]
    later = await store.lease_stale_flows(shard, NOW_MS + 40_000, 10_000, 10)
    assert [f.id for f, _ in later] == [flows[3].id, flows[1].id]


async def test_shards_with_stale_flows_names_the_shards_a_lease_would_find_something_in(store: TaskStore) -> None:
    pending, sending, later, delivered, empty = 2, 5, 7, 9, 12
    for shard, offset, status in (
        (pending, -300, FlowStatus.PENDING),
        (sending, -1, FlowStatus.SENDING),
        (later, 50_000, FlowStatus.PENDING),
        (delivered, -400, FlowStatus.DELIVERED),
    ):
        task = await store.insert_task(make_task(shard=shard))
        flow = manual_flow(task, NOW_MS + offset, status)
        await store.insert_manual_flow(task.id, _ended(task, flow.scheduled_at_ms) if status.terminal else flow)
    shards = [pending, sending, later, delivered, empty]

    assert await store.shards_with_stale_flows(shards, NOW_MS) == {pending, sending}
    assert await store.shards_with_stale_flows(shards, NOW_MS + 50_000) == {pending, sending, later}
    assert await store.shards_with_stale_flows([later, delivered, empty], NOW_MS) == set()
    assert await store.shards_with_stale_flows([], NOW_MS) == set()
    await store.lease_stale_flows(pending, NOW_MS, 10_000, 10)  # leased: due again when the lease ends
    assert await store.shards_with_stale_flows(shards, NOW_MS) == {sending}
    assert await store.shards_with_stale_flows(shards, NOW_MS + 10_000) == {pending, sending}


def _ended(task: Task, at_ms: int, status: FlowStatus = FlowStatus.DELIVERED, due_ms: int | None = None) -> Flow:
    """A flow of ``task`` at ``at_ms`` that ended ``status``; ``due_ms``: since when its children are due
    (README "Child tasks"); ``None``: none are."""
    return replace(manual_flow(task, at_ms, status), next_attempt_at_ms=due_ms)


async def test_an_ending_whose_children_are_due_is_leased_until_they_are_cleared(store: TaskStore) -> None:
    # Given endings that wrote the marker of their children due, and one that names none
    shard = 6
    task = await store.insert_task(make_task(shard=shard))
    await store.insert_manual_flow(task.id, _ended(task, NOW_MS - 500, FlowStatus.DELIVERED, NOW_MS - 100))
    await store.insert_manual_flow(task.id, _ended(task, NOW_MS - 400, FlowStatus.DEAD, NOW_MS - 90))
    await store.insert_manual_flow(task.id, _ended(task, NOW_MS - 300, FlowStatus.DELIVERED))
    await store.insert_manual_flow(task.id, _ended(task, NOW_MS - 200, FlowStatus.DELIVERED, NOW_MS + 50_000))

    # When a compensation pass looks, leases, and the children are triggered
    found = await store.shards_with_stale_flows([shard], NOW_MS)
    leased = await store.lease_stale_flows(shard, NOW_MS, 10_000, 10)
    await store.clear_children_due(task.id, NOW_MS - 500)
    await store.clear_children_due(task.id, NOW_MS - 123)  # no such flow: nothing

    # Then the two due endings were leased once (their attempts kept), and the cleared one never again
    assert found == {shard}
    assert [(f.scheduled_at_ms, f.status, f.attempts) for f, _ in leased] == [
        (NOW_MS - 500, FlowStatus.DELIVERED, 0),
        (NOW_MS - 400, FlowStatus.DEAD, 0),
    ]
    assert leased[0][1] == task
    assert await store.lease_stale_flows(shard, NOW_MS + 9_999, 10_000, 10) == []
    again = await store.lease_stale_flows(shard, NOW_MS + 10_000, 10_000, 10)
    assert [f.scheduled_at_ms for f, _ in again] == [NOW_MS - 400]
    cleared = await store.get_flow(task.id, NOW_MS - 500)
    assert cleared is not None and cleared.status is FlowStatus.DELIVERED and cleared.next_attempt_at_ms is None


async def test_clearing_the_children_due_leaves_an_open_flow_as_it_is(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=3))
    await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS - 100))  # a dead flow retried: open again

    await store.clear_children_due(task.id, NOW_MS - 100)

    flow = await store.get_flow(task.id, NOW_MS - 100)
    assert flow is not None and flow.status is FlowStatus.PENDING and flow.next_attempt_at_ms == NOW_MS - 100


async def test_concurrent_leases_never_share_a_flow(store: TaskStore) -> None:
    shard = 1
    task = await store.insert_task(make_task(shard=shard))
    for offset in range(30):
        await store.insert_manual_flow(task.id, manual_flow(task, NOW_MS - 1_000 + offset))
    results = await asyncio.gather(*(store.lease_stale_flows(shard, NOW_MS, 60_000, 7) for _ in range(6)))
    keys = [(f.task_id, f.scheduled_at_ms) for result in results for f, _ in result]
    assert len(keys) == len(set(keys)) == 30


# ---- the database clock -------------------------------------------------------------------------


async def test_ping_and_database_clock(store: TaskStore) -> None:
    import time

    await store.ping()
    skew_ms = abs(await store.database_now_ms() - time.time_ns() // 1_000_000)
    assert skew_ms < 5_000
