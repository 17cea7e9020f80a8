"""Changing a task while it fires: a fire is not a user edit.

Given a running node whose tasks fire every second,
when their owner pauses, resumes or edits them at the same time,
then a request that did not pass a ``version`` never answers 409, one that did conflicts only with
another user edit (never with a fire), and no change undoes a fire's progress.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from testkit import RunningNode
from tests.e2e.test_fire_path import client_for
from tests.receiver import Receiver

TASKS = 200
EVERY_MS = 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def register_firing_tasks(client: httpx.AsyncClient, receiver: Receiver, count: int) -> list[dict[str, Any]]:
    start = now_ms() + 1000
    body = {
        "tasks": [
            {
                "name": f"tick-{i}",
                "schedule": {"kind": "interval", "every_ms": EVERY_MS, "start_at_ms": start},
                "callback": {"url": receiver.url("/hook")},
            }
            for i in range(count)
        ]
    }
    created = await client.post("/v1/tasks/batch", json=body)
    assert created.status_code == 200, created.text
    assert created.json()["created"] == count
    return [item["task"] for item in created.json()["items"]]


async def flows_of(client: httpx.AsyncClient, task: dict[str, Any]) -> list[Any]:
    return list((await client.get(f"/v1/tasks/{task['id']}/flows")).json()["items"])


async def wait_until_fired(
    client: httpx.AsyncClient, task: dict[str, Any], fires: int, timeout_s: float = 15
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        current = (await client.get(f"/v1/tasks/{task['id']}")).json()
        if current["fire_count"] >= fires:
            return dict(current)
        assert time.monotonic() < deadline, f"task {task['id']} fired {current['fire_count']} times, not {fires}"
        await asyncio.sleep(0.05)


async def test_concurrent_pauses_and_unversioned_updates_of_firing_tasks_never_conflict(
    running: RunningNode, receiver: Receiver
) -> None:
    client, _ = await client_for(running)
    client.timeout = httpx.Timeout(30.0)  # 300 concurrent requests on a small shared machine
    async with client:
        tasks = await register_firing_tasks(client, receiver, TASKS)
        await receiver.wait_for(TASKS, timeout_s=15)  # every task is firing now
        await asyncio.sleep(0.9)  # the next second's fires are landing while the changes arrive

        renames = await asyncio.gather(
            *(client.patch(f"/v1/tasks/{t['id']}", json={"name": f"renamed-{t['name']}"}) for t in tasks[: TASKS // 2])
        )
        pauses = await asyncio.gather(*(client.post(f"/v1/tasks/{t['id']}/pause") for t in tasks))

        statuses = [r.status_code for r in (*renames, *pauses)]
        conflicts = statuses.count(409)
        print(
            f"unversioned changes of firing tasks: {conflicts} conflicts of {len(statuses)} "
            f"({[r.status_code for r in pauses].count(409)} of {TASKS} pauses)"
        )
        assert conflicts == 0, f"{conflicts} of {len(statuses)} unversioned changes answered 409"
        assert set(statuses) == {200}, [r.text for r in (*renames, *pauses) if r.status_code != 200][:3]
        assert all(r.json()["status"] == "paused" for r in pauses)
        assert all(r.json()["name"].startswith("renamed-") for r in pauses[: TASKS // 2])

        # Paused means no fire commits after the pause answered (a flow is committed before it is
        # sent), and every fire that committed before it is still counted.
        sample = tasks[:20]
        flows_at_pause = [len(await flows_of(client, t)) for t in sample]
        await asyncio.sleep(1.5 * EVERY_MS / 1000)
        for task, flows in zip(sample, flows_at_pause, strict=True):
            stored = (await client.get(f"/v1/tasks/{task['id']}")).json()
            assert len(await flows_of(client, task)) == flows
            assert stored["fire_count"] == flows


async def test_a_versioned_update_conflicts_with_another_edit_but_not_with_a_fire(
    running: RunningNode, receiver: Receiver
) -> None:
    client, _ = await client_for(running)
    async with client:
        [task] = await register_firing_tasks(client, receiver, 1)
        read = await wait_until_fired(client, task, 1)
        await wait_until_fired(client, task, read["fire_count"] + 1)  # a fire after the client's read

        edited = await client.patch(f"/v1/tasks/{task['id']}", json={"name": "edited", "version": read["version"]})
        assert edited.status_code == 200, edited.text
        assert edited.json()["version"] == read["version"] + 1
        assert edited.json()["fire_count"] > read["fire_count"]  # the fire's progress is kept

        lost = await client.patch(f"/v1/tasks/{task['id']}", json={"name": "stale", "version": read["version"]})
        assert lost.status_code == 409
        assert lost.json()["error"]["code"] == "version_conflict"

        paused = await client.post(f"/v1/tasks/{task['id']}/pause")
        assert paused.status_code == 200
        assert paused.json()["name"] == "edited"
