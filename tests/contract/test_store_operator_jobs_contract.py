"""Operator jobs: created once per id, claimed by one node at a time under a lease, their progress written
only under the claim that holds them, cancelled at once when never claimed."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.operator_jobs import OperatorJob
from tjobs.stores.operator_job_store import operator_jobs_of

pytestmark = pytest.mark.asyncio

LEASE_MS = 30_000


def _job(job_id: str, created_at_ms: int = 1_000, app_id: str = "app-a") -> OperatorJob:
    params = {"filters": {"task_name_prefix": "order-"}, "dead_before_ms": 900}
    return OperatorJob(job_id, "redrive", app_id, params, 40, "alice", created_at_ms, created_at_ms)


async def test_a_job_is_created_once_per_id_and_listed_newest_first(store: TaskStore) -> None:
    jobs = operator_jobs_of(store)
    first, created = await jobs.create_operator_job(_job("job_1", 1_000))
    again, created_again = await jobs.create_operator_job(_job("job_1", 5_000))
    assert created and not created_again and again == first
    assert (first.state, first.processed, first.claims, first.position, first.params["dead_before_ms"]) == (
        "queued",
        0,
        0,
        None,
        900,
    )
    await jobs.create_operator_job(_job("job_2", 2_000))
    await jobs.create_operator_job(_job("job_3", 3_000, app_id="app-b"))
    assert [job.id for job in await jobs.list_operator_jobs("app-a", 10)] == ["job_2", "job_1"]
    assert [job.id for job in await jobs.list_operator_jobs(None, 2)] == ["job_3", "job_2"]
    assert await jobs.get_operator_job("job_9") is None


async def test_a_claim_takes_the_oldest_open_job_and_no_second_node_gets_it_while_its_lease_holds(
    store: TaskStore,
) -> None:
    jobs = operator_jobs_of(store)
    await jobs.create_operator_job(_job("job_old", 1_000))
    await jobs.create_operator_job(_job("job_new", 2_000))

    # Given two nodes claiming at once
    a, b = await asyncio.gather(
        jobs.claim_operator_job("node-a", 10_000, LEASE_MS), jobs.claim_operator_job("node-b", 10_000, LEASE_MS)
    )
    # Then each got a different job, the older one first
    assert a is not None and b is not None and {a.id, b.id} == {"job_old", "job_new"}
    assert (a.state, a.claims, a.lease_until_ms) == ("running", 1, 10_000 + LEASE_MS)
    # and while the leases hold, there is nothing to claim
    assert await jobs.claim_operator_job("node-c", 10_000 + LEASE_MS - 1, LEASE_MS) is None
    # once a lease ran out, the job goes to the next claim, which fences the first node's writes
    taken = await jobs.claim_operator_job("node-c", 10_000 + LEASE_MS + 1, LEASE_MS)
    assert taken is not None and taken.owner == "node-c" and taken.claims == 2


async def test_progress_is_written_only_under_the_claim_that_holds_the_job(store: TaskStore) -> None:
    jobs = operator_jobs_of(store)
    await jobs.create_operator_job(_job("job_1"))
    claimed = await jobs.claim_operator_job("node-a", 10_000, LEASE_MS)
    assert claimed is not None
    step = replace(claimed, processed=10, failed=1, position=[1_700, 42], errors=["1-2: gone"], updated_at_ms=11_000)
    saved = await jobs.save_operator_job(replace(step, lease_until_ms=11_000 + LEASE_MS))
    assert saved is not None and (saved.processed, saved.failed, saved.position, saved.errors) == (
        10,
        1,
        [1_700, 42],
        ["1-2: gone"],
    )
    # another node claims it after the lease ran out: the first node's next write is refused
    resumed = await jobs.claim_operator_job("node-b", 11_000 + LEASE_MS + 1, LEASE_MS)
    assert resumed is not None and resumed.position == [1_700, 42] and resumed.processed == 10
    assert await jobs.save_operator_job(replace(step, processed=20)) is None
    finished = replace(resumed, state="done", processed=40, finished_at_ms=50_000, updated_at_ms=50_000)
    done = await jobs.save_operator_job(finished)
    assert done is not None and done.finished and done.finished_at_ms == 50_000
    assert await jobs.save_operator_job(finished) is None  # a finished job is never written again
    assert await jobs.claim_operator_job("node-c", 10**12, LEASE_MS) is None


async def test_a_cancel_ends_an_unclaimed_job_at_once_and_flags_a_running_one(store: TaskStore) -> None:
    jobs = operator_jobs_of(store)
    await jobs.create_operator_job(_job("job_queued", 1_000))
    await jobs.create_operator_job(_job("job_running", 500))
    running = await jobs.claim_operator_job("node-a", 10_000, LEASE_MS)
    assert running is not None and running.id == "job_running"

    queued = await jobs.cancel_operator_job("job_queued", 12_000)
    assert queued is not None and (queued.state, queued.cancel_requested, queued.finished_at_ms) == (
        "cancelled",
        True,
        12_000,
    )
    flagged = await jobs.cancel_operator_job("job_running", 12_000)
    assert flagged is not None and (flagged.state, flagged.cancel_requested) == ("running", True)
    # the node running it reads the flag with its next write
    saved = await jobs.save_operator_job(replace(running, processed=5, updated_at_ms=13_000))
    assert saved is not None and saved.cancel_requested
    assert await jobs.cancel_operator_job("job_none", 12_000) is None
