"""Fixed-delay schedules on every backend (README "Fixed delay"): the fire transaction parks the task
at the latest its flow can end plus the delay; the flow's final outcome (delivered, or dead) sets the
next run to its end plus the delay in the outcome's own write, unless a pause, an edit or a later fire
moved the task first."""

from __future__ import annotations

from dataclasses import replace

from tests.contract.backends import NOW_MS, intent_of, make_task
from tjobs.firing.planner import FirePlanner, FirePolicy, park_ms
from tjobs.model import FlowStatus, FlowUpdate, Reschedule, Task, TaskStatus
from tjobs.specs import FixedDelaySpec
from tjobs.stores.base import TaskStore

DELAY_MS = 30_000
POLICY = FirePolicy(misfire_threshold_ms=60_000, catch_up_max=10, max_age_ms=3_600_000, timeout_ms=2_000)
PLANNER = FirePlanner(POLICY)


def _fixed_delay_task(shard: int) -> Task:
    task = make_task(shard=shard)
    return replace(task, schedule=FixedDelaySpec(DELAY_MS, start_at_ms=NOW_MS))


async def _fire(store: TaskStore, task: Task, now_ms: int) -> Task:
    [outcome] = await store.commit_fires([intent_of(task)], now_ms, PLANNER)
    assert outcome.task is not None and len(outcome.flows) == 1
    return outcome.task


def _final(fired: Task, status: FlowStatus, ended_ms: int) -> FlowUpdate:
    """The final outcome of the flow ``fired`` (the task as its fire left it) made, ending at ``ended_ms``."""
    assert fired.next_run_at_ms is not None
    moved = Reschedule(fired.app_id, fired.next_run_at_ms, fired.version, ended_ms + DELAY_MS)
    return FlowUpdate(
        fired.id, NOW_MS, status, 1, None, 200 if status is FlowStatus.DELIVERED else 500, None, None, None, None, moved
    )


async def test_the_fire_parks_the_task_at_its_flows_bound_plus_the_delay(store: TaskStore) -> None:
    task = await store.insert_task(_fixed_delay_task(shard=4))
    fired = await _fire(store, task, NOW_MS + 5)

    parked = park_ms(task, FixedDelaySpec(DELAY_MS, NOW_MS), NOW_MS, NOW_MS + 5, POLICY)
    assert parked == NOW_MS + 3_600_000 + 2_000 + 5_000 + DELAY_MS
    stored = await store.get_task(task.id)
    assert stored is not None and (stored.next_run_at_ms, stored.version) == (parked, task.version + 1)
    assert fired.next_run_at_ms == parked and stored.status is TaskStatus.ACTIVE


async def test_the_final_outcome_sets_the_next_run_a_delay_after_the_end(store: TaskStore) -> None:
    task = await store.insert_task(_fixed_delay_task(shard=5))
    fired = await _fire(store, task, NOW_MS)

    await store.record_flow_updates([_final(fired, FlowStatus.DELIVERED, NOW_MS + 300)], NOW_MS + 300)

    stored = await store.get_task(task.id)
    assert stored is not None and stored.next_run_at_ms == NOW_MS + 300 + DELAY_MS
    assert stored.version == fired.version  # the change told to the wheel keeps the fire's version
    flow = await store.get_flow(task.id, NOW_MS)
    assert flow is not None and flow.status is FlowStatus.DELIVERED
    # the next fire from there is the task's usual fire
    again = await _fire(store, stored, NOW_MS + 300 + DELAY_MS)
    assert again.fire_count == 2


async def test_a_dead_outcome_also_sets_the_next_run(store: TaskStore) -> None:
    task = await store.insert_task(_fixed_delay_task(shard=6))
    fired = await _fire(store, task, NOW_MS)

    await store.record_flow_updates([_final(fired, FlowStatus.DEAD, NOW_MS + 90_000)], NOW_MS + 90_000)

    stored = await store.get_task(task.id)
    assert stored is not None and stored.next_run_at_ms == NOW_MS + 90_000 + DELAY_MS


async def test_a_pause_meanwhile_wins_over_the_outcome(store: TaskStore) -> None:
    task = await store.insert_task(_fixed_delay_task(shard=7))
    fired = await _fire(store, task, NOW_MS)
    paused = await store.update_task(replace(fired, status=TaskStatus.PAUSED, next_run_at_ms=None), fired.version)

    await store.record_flow_updates([_final(fired, FlowStatus.DELIVERED, NOW_MS + 300)], NOW_MS + 300)

    stored = await store.get_task(task.id)
    assert stored is not None and (stored.status, stored.next_run_at_ms) == (TaskStatus.PAUSED, None)
    assert stored.version == paused.version
    flow = await store.get_flow(task.id, NOW_MS)
    assert flow is not None and flow.status is FlowStatus.DELIVERED  # the outcome itself is recorded


async def test_an_edit_meanwhile_wins_over_the_outcome(store: TaskStore) -> None:
    task = await store.insert_task(_fixed_delay_task(shard=8))
    fired = await _fire(store, task, NOW_MS)
    # an edit that kept the parked instant still moved the version: the outcome changes nothing
    edited = await store.update_task(replace(fired, name="edited"), fired.version)
    moved = await store.update_task(replace(edited, next_run_at_ms=NOW_MS + 7_000), edited.version)

    await store.record_flow_updates([_final(fired, FlowStatus.DELIVERED, NOW_MS + 300)], NOW_MS + 300)

    stored = await store.get_task(task.id)
    assert stored is not None and (stored.next_run_at_ms, stored.version) == (NOW_MS + 7_000, moved.version)


async def test_a_second_outcome_of_the_flow_moves_nothing_again(store: TaskStore) -> None:
    task = await store.insert_task(_fixed_delay_task(shard=9))
    fired = await _fire(store, task, NOW_MS)
    await store.record_flow_updates([_final(fired, FlowStatus.DELIVERED, NOW_MS + 300)], NOW_MS + 300)

    # a duplicate final outcome (a compensator's re-drive answered later) finds the task moved
    await store.record_flow_updates([_final(fired, FlowStatus.DELIVERED, NOW_MS + 9_000)], NOW_MS + 9_000)

    stored = await store.get_task(task.id)
    assert stored is not None and stored.next_run_at_ms == NOW_MS + 300 + DELAY_MS


async def test_outcomes_of_several_tasks_in_one_write_each_move_their_own(store: TaskStore) -> None:
    tasks = [await store.insert_task(_fixed_delay_task(shard=10)) for _ in range(3)]
    fired = [await _fire(store, task, NOW_MS) for task in tasks]
    plain = await store.insert_task(make_task(shard=10, name="plain"))
    paused = await store.update_task(replace(fired[1], status=TaskStatus.PAUSED, next_run_at_ms=None), fired[1].version)

    await store.record_flow_updates(
        [
            _final(fired[0], FlowStatus.DELIVERED, NOW_MS + 100),
            _final(fired[1], FlowStatus.DELIVERED, NOW_MS + 200),
            _final(fired[2], FlowStatus.DEAD, NOW_MS + 300),
        ],
        NOW_MS + 300,
    )

    stored = [await store.get_task(task.id) for task in tasks]
    assert [t.next_run_at_ms if t else -1 for t in stored] == [NOW_MS + 100 + DELAY_MS, None, NOW_MS + 300 + DELAY_MS]
    assert stored[1] is not None and stored[1].version == paused.version
    untouched = await store.get_task(plain.id)
    assert untouched is not None and untouched.next_run_at_ms == plain.next_run_at_ms
