"""Overlap judged cluster-wide (README "Job runs", docs/pools.md "Overlap"): a flow of a task that must not
overlap itself may be delivered by a node that does not own the task's shard (a manual trigger or a backfill
taken by its API, a run's retry taken by its report), and the owner fires the task's scheduled instants. Each
node judges a fire that its own gate lets go against the task's runs in the store too, so a run started on
one node holds the task's fires on every other, and a fire queued behind a run on one node is the task's
queued fire for all.

Two nodes (:class:`tests.unit.test_overlap_takeover.Rig`): ``owner`` owns every shard, ``other`` none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.unit.test_overlap_takeover import WATCH_S, Node, Rig
from tjobs.model import FlowStatus


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    made = Rig()
    yield made
    for node in made.nodes:
        await node.deliverer.stop(1.0)


async def _nodes(rig: Rig) -> tuple[Node, Node]:
    return await rig.node(rig.every), await rig.node()


async def test_a_manual_flow_on_another_node_is_skipped_while_the_owners_run_lives(rig: Rig) -> None:
    owner, other = await _nodes(rig)
    task, (scheduled, manual) = await rig.fires("skip_if_running", 2)
    await rig.fire(owner, task, scheduled)
    await rig.until(scheduled, FlowStatus.RUNNING)

    # When a manual flow of the task is delivered by the other node (its API took the trigger)
    await rig.fire(other, task, manual)

    # Then it is skipped, naming the owner's run
    skipped = await rig.until(manual, FlowStatus.SKIPPED, FlowStatus.RUNNING)
    assert skipped.status is FlowStatus.SKIPPED
    assert skipped.last_error == f"skipped: flow {scheduled.id} of the task is still running"
    assert rig.sent() == [scheduled.id]


async def test_the_owners_fires_are_skipped_while_a_run_another_node_started_lives(rig: Rig) -> None:
    owner, other = await _nodes(rig)
    task, (manual, scheduled, later) = await rig.fires("skip_if_running", 3)
    await rig.fire(other, task, manual)
    await rig.until(manual, FlowStatus.RUNNING)

    # When the owner fires the task while the other node's run lives
    await rig.fire(owner, task, scheduled)

    # Then the fire is skipped, naming that run
    skipped = await rig.until(scheduled, FlowStatus.SKIPPED, FlowStatus.RUNNING)
    assert skipped.status is FlowStatus.SKIPPED
    assert skipped.last_error == f"skipped: flow {manual.id} of the task is still running"

    # And once that run ended (reported to any node), the owner's next fire goes
    await rig.report(manual, status="succeeded")
    await asyncio.sleep(WATCH_S * 5)
    await rig.fire(owner, task, later)
    assert (await rig.until(later, FlowStatus.RUNNING, FlowStatus.SKIPPED)).status is FlowStatus.RUNNING
    assert rig.sent() == [manual.id, later.id]


async def test_a_fire_queued_on_one_node_is_the_tasks_queued_fire_on_every_node(rig: Rig) -> None:
    owner, other = await _nodes(rig)
    task, (scheduled, manual, later) = await rig.fires("queue_one", 3)
    await rig.fire(owner, task, scheduled)
    await rig.until(scheduled, FlowStatus.RUNNING)

    # When a manual flow waits behind the owner's run on the other node, and the owner fires again
    await rig.fire(other, task, manual)
    await asyncio.sleep(WATCH_S * 5)
    await rig.fire(owner, task, later)

    # Then the owner's fire is skipped (the task's one queued fire waits on the other node), nothing else sent
    skipped = await rig.until(later, FlowStatus.SKIPPED, FlowStatus.RUNNING)
    assert skipped.status is FlowStatus.SKIPPED
    assert (await rig.stored(manual)).status is FlowStatus.PENDING
    assert rig.sent() == [scheduled.id]

    # And once the run ended, the queued manual flow goes, once
    await rig.report(scheduled, status="succeeded")
    await rig.until(manual, FlowStatus.RUNNING)
    await asyncio.sleep(WATCH_S * 10)
    assert rig.sent() == [scheduled.id, manual.id]
