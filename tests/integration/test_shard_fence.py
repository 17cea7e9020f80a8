"""Fencing by shard-map epoch on MariaDB (tjobs/stores/shard_fence.py): a logical database whose fence
admits only a later epoch than the writer's refuses the fire transaction and the registration, and
nothing is written; the other databases of the same server go on.

Every other write to a logical database passes the fence as well (edits, deletes, manual flows, flow
outcomes, re-drives, the compensator's leases, purges: tjobs/stores/sql_fenced.py), each refused
under an older epoch with nothing changed, and passing under the epoch the fence admits.

A move sets the fence of the copy it leaves to RETIRED and of the copy it fills to the new epoch; the
tests set fences directly, as the mover will.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

import pytest

from sharding import shard_of_task_id
from sharding.shard_map import ShardMap
from testkit.mariadb_template import fresh_mariadb, release_mariadb
from tests.contract.backends import NOW_MS, intent_of, interval_planner, make_task, mariadb_settings
from tjobs.api.deps import error_headers
from tjobs.errors import StaleShardMap
from tjobs.model import Flow, FlowKind, FlowStatus, FlowUpdate, Task
from tjobs.settings import StorageSettings
from tjobs.stores.contracts.runs import RunWrite
from tjobs.stores.shard_fence import RETIRED_EPOCH, read_fence, write_fence
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.mariadb


@pytest.fixture
async def store(mysql_url: str) -> AsyncIterator[SQLAlchemyTaskStore]:
    settings: StorageSettings = await fresh_mariadb(mariadb_settings(mysql_url))  # as migrated, in ~0.1 s
    sql_store = SQLAlchemyTaskStore(settings)
    await sql_store.start()
    sql_store.use_shard_map(sql_store.seed_shard_map())  # epoch 1, as a node routes
    try:
        yield sql_store
    finally:
        await sql_store.close()
        release_mariadb(settings)


async def set_fence(store: SQLAlchemyTaskStore, database_index: int, epoch: int) -> None:
    home = store.layout.databases[database_index]
    async with store._write(home.engine_url) as conn:
        await write_fence(conn, home, epoch)


def shard_in(store: SQLAlchemyTaskStore, database_index: int) -> int:
    return store.topology.shards_of_database(database_index)[0]


async def test_a_retired_database_refuses_the_fire_and_the_other_databases_still_fire(
    store: SQLAlchemyTaskStore,
) -> None:
    moved_away = make_task(shard=shard_in(store, 1))
    staying = make_task(shard=shard_in(store, 2))
    for task in (moved_away, staying):
        await store.insert_task(task)
    await set_fence(store, 1, RETIRED_EPOCH)

    with pytest.raises(StaleShardMap, match="_01 refused a write under shard-map epoch 1"):
        await store.commit_fires([intent_of(moved_away)], NOW_MS, interval_planner)  # its server's only intent
    fired = await store.commit_fires([intent_of(staying)], NOW_MS, interval_planner)

    assert await store.get_flow(moved_away.id, NOW_MS) is None
    stored = await store.get_task(moved_away.id)
    assert stored is not None and stored.version == moved_away.version  # not advanced
    assert fired[0].error is None and len(fired[0].flows) == 1


async def test_a_retired_database_in_a_servers_fire_batch_does_not_hold_back_the_others_on_that_server(
    store: SQLAlchemyTaskStore,
) -> None:
    """At a move's cut-over the copy it leaves refuses writes before every node has the new map; the
    fires of the other logical databases of the same server, committed in the same batch, go through
    at once instead of waiting for the refused transaction's retry."""
    moved_away = make_task(shard=shard_in(store, 1))
    staying = [make_task(shard=shard_in(store, index)) for index in (0, 2, 3)]
    for task in (moved_away, *staying):
        await store.insert_task(task)
    await set_fence(store, 1, RETIRED_EPOCH)

    outcomes = await store.commit_fires(
        [intent_of(t) for t in (staying[0], moved_away, *staying[1:])], NOW_MS, interval_planner
    )

    refused = outcomes[1]
    assert isinstance(refused.error, StaleShardMap) and refused.task is None and not refused.flows
    assert "_01 refused a write under shard-map epoch 1" in str(refused.error)
    for outcome in (outcomes[0], *outcomes[2:]):
        assert outcome.error is None and outcome.task is not None and len(outcome.flows) == 1, outcome
    assert await store.get_flow(moved_away.id, NOW_MS) is None
    stored = await store.get_task(moved_away.id)
    assert stored is not None and stored.version == moved_away.version  # not advanced
    for task in staying:
        flow = await store.get_flow(task.id, NOW_MS)
        assert flow is not None


async def test_a_registration_into_a_retired_database_is_refused_and_writes_nothing(
    store: SQLAlchemyTaskStore,
) -> None:
    await set_fence(store, 1, RETIRED_EPOCH)
    task = make_task(shard=shard_in(store, 1))

    with pytest.raises(StaleShardMap, match="retry after the map reloads"):
        await store.insert_task(task)
    # A batch answers per item (TaskStore.insert_tasks): one transaction per server, so the fence of the
    # retired database refuses the server's whole share, each item with StaleShardMap, and nothing is written.
    retired, same_server = make_task(shard=shard_in(store, 1)), make_task(shard=shard_in(store, 2))
    results = await store.insert_tasks([retired, same_server])
    assert [type(result) for result in results] == [StaleShardMap, StaleShardMap], results

    assert await store.get_task(task.id) is None
    assert await store.get_task(retired.id) is None and await store.get_task(same_server.id) is None
    assert error_headers(StaleShardMap("moving")) == {"retry-after": "1"}  # the API's 503 says when


async def test_a_writer_under_an_older_epoch_is_refused_until_it_routes_by_the_newer_map(
    store: SQLAlchemyTaskStore,
) -> None:
    task = make_task(shard=shard_in(store, 3))
    await store.insert_task(task)
    await set_fence(store, 3, 3)  # the copy a move to epoch 3 filled

    with pytest.raises(StaleShardMap):
        await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)

    seeded = store.seed_shard_map()
    store.use_shard_map(ShardMap(3, seeded.servers, seeded.placement))
    fired = await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
    assert fired[0].error is None and len(fired[0].flows) == 1
    home = store.layout.databases[3]
    async with store._connect(home.engine_url) as conn:
        assert await read_fence(conn, home) == 3


# ---- every other write of a moving database passes the fence too --------------------------------

FAR_FUTURE_MS = NOW_MS + 10 * 365 * 86_400_000


@dataclass(frozen=True)
class Fired:
    """A task of logical database 1 fired once at NOW_MS: its pending flow, and a dead one."""

    task: Task
    pending: Flow
    dead: Flow


async def fire_in_database_1(store: SQLAlchemyTaskStore) -> Fired:
    task = make_task(shard=shard_in(store, 1), max_fires=None)
    await store.insert_task(task)
    (fired,) = await store.commit_fires([intent_of(task)], NOW_MS, interval_planner)
    assert fired.task is not None
    manual = Flow(task.id, NOW_MS - 1, task.app_id, FlowKind.MANUAL, FlowStatus.DEAD, 3, None, NOW_MS, NOW_MS)
    await store.insert_manual_flow(task.id, manual)
    return Fired(fired.task, fired.flows[0], manual)


Write = Callable[[SQLAlchemyTaskStore, Fired], Awaitable[object]]


def delivered(fired: Fired) -> FlowUpdate:
    return FlowUpdate(fired.task.id, fired.pending.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 200)


WRITES: dict[str, Write] = {
    "edit": lambda s, f: s.edit_task(replace(f.task, name="renamed"), {"name"}),
    "update": lambda s, f: s.update_task(replace(f.task, name="renamed"), f.task.version),
    "delete": lambda s, f: s.delete_task(f.task.id),
    "delete cancelling flows": lambda s, f: s.delete_task_cancelling_flows(f.task.id, NOW_MS),
    "delete the app's tasks": lambda s, f: s.delete_app_tasks(f.task.app_id, shard_of_task_id(f.task.id), 10, NOW_MS),
    "manual flow": lambda s, f: s.insert_manual_flow(
        f.task.id, replace(f.pending, scheduled_at_ms=NOW_MS + 7, kind=FlowKind.MANUAL)
    ),
    "flow outcome": lambda s, f: s.record_flow_updates(
        [FlowUpdate(f.task.id, f.pending.scheduled_at_ms, FlowStatus.DELIVERED, 1, None, 200)], NOW_MS
    ),
    "redrive": lambda s, f: s.redrive_flow(f.task.id, f.dead.scheduled_at_ms, NOW_MS),
    "compensator lease": lambda s, f: s.lease_stale_flows(shard_of_task_id(f.task.id), FAR_FUTURE_MS, 60_000, 10),
    "purge": lambda s, f: s.purge(shard_of_task_id(f.task.id), FAR_FUTURE_MS, 100),
    "run report": lambda s, f: s.decide_run(
        f.task.id, f.pending.scheduled_at_ms, lambda flow, task: RunWrite(FlowStatus.PENDING, delivered(f), NOW_MS, 0)
    ),
    "run transition": lambda s, f: s.write_run(FlowStatus.PENDING, delivered(f), NOW_MS, expected_attempts=0),
    "run log": lambda s, f: s.append_run_log(f.task.id, f.pending.scheduled_at_ms, '{"line": "a"}\n', 1, 10),
}


async def snapshot(store: SQLAlchemyTaskStore, fired: Fired) -> tuple[Task | None, list[Flow]]:
    return await store.get_task(fired.task.id), await store.list_flows(fired.task.id, 100)


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
async def test_a_write_under_an_older_epoch_is_refused_and_changes_nothing(
    store: SQLAlchemyTaskStore, write: str
) -> None:
    fired = await fire_in_database_1(store)
    before = await snapshot(store, fired)
    await set_fence(store, 1, 2)  # a move to epoch 2 filled this copy; the writer still holds epoch 1

    with pytest.raises(StaleShardMap, match="refused a write under shard-map epoch 1"):
        await WRITES[write](store, fired)

    assert await snapshot(store, fired) == before


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
async def test_the_same_write_passes_under_the_epoch_the_fence_admits(store: SQLAlchemyTaskStore, write: str) -> None:
    fired = await fire_in_database_1(store)
    before = await snapshot(store, fired)
    await set_fence(store, 1, 2)
    seeded = store.seed_shard_map()
    store.use_shard_map(ShardMap(2, seeded.servers, seeded.placement))

    await WRITES[write](store, fired)

    assert await snapshot(store, fired) != before  # each write changes the task or its flows


async def test_a_report_under_an_older_epoch_is_refused_before_its_flow_is_read(store: SQLAlchemyTaskStore) -> None:
    fired = await fire_in_database_1(store)
    await set_fence(store, 1, 2)
    decided: list[Flow | None] = []

    for scheduled_at_ms in (fired.pending.scheduled_at_ms, fired.pending.scheduled_at_ms + 1):  # its flow, none
        with pytest.raises(StaleShardMap, match="refused a write under shard-map epoch 1"):
            await store.decide_run(fired.task.id, scheduled_at_ms, lambda flow, task: decided.append(flow))

    assert decided == []
