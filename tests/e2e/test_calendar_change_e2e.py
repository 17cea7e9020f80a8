"""A calendar change applies to every task naming the calendar without rewriting the task (issue 30 item
4, README "Calendars"): on the node it is written through at once, on another node of the same store
within that node's calendar refresh (``scheduler.calendar_refresh_s``, ``CalendarService.refresh_s``).
Real nodes firing a task every second on an SQLite store, callbacks to the real receiver.

What is asserted of the instants a change makes excluded is bounded by when the firing node can know it:

* through the firing node itself, every instant due after the PUT was answered (the write updates the
  node's copy before it answers; an instant due earlier may have been fired with the old rules);
* through another node, every instant due after the PUT was answered plus the firing node's refresh
  interval plus :data:`READ_SLACK_MS` (its refresh pass reads the calendars every ``refresh_s``; the read
  itself takes a moment).

After a change back, the task fires again from the first instant after the excluded period: its next
run was computed while the instants before it were excluded (README "Calendars"); the instants between
the change back and the period's end are asserted neither way.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from testkit import RunningNode, run_node
from tests.e2e.test_fire_path import client_for, now_ms
from tests.receiver import Receiver
from tjobs.settings import Settings

READ_SLACK_MS = 1000  # a refresh pass's read of every calendar on a loaded machine, and the fire's own commit
# the nodes' scheduler.calendar_refresh_s (the product's default is 5 s): each wait on node B's refresh below
# is bounded by it, so a short one makes the cross-node case seconds long instead of half a minute
CALENDAR_REFRESH_S = 0.5
NOTHING_AHEAD = {"dates": ["2001-01-01"]}  # a calendar that excludes nothing to come


def wall(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def excluding(from_ms: int, to_ms: int) -> dict[str, Any]:
    return {"periods": [{"from": wall(from_ms), "to": wall(to_ms)}]}


async def put_calendar(client: httpx.AsyncClient, body: dict[str, Any]) -> int:
    """PUT the calendar ``switch``; when the answer came."""
    answer = await client.put("/v1/calendars/switch", json=body)
    assert answer.status_code in (200, 201), answer.text
    return now_ms()


async def create_every_second(client: httpx.AsyncClient, receiver: Receiver) -> tuple[dict[str, Any], int]:
    start = (now_ms() // 1000 + 2) * 1000
    schedule = {"kind": "interval", "every_ms": 1000, "start_at_ms": start, "calendar": "switch"}
    created = await client.post(
        "/v1/tasks",
        json={"name": "switched", "schedule": schedule, "callback": {"url": receiver.url("/hook")}, "payload": {}},
    )
    assert created.status_code == 201, created.text
    return created.json(), start


async def flow_instants(client: httpx.AsyncClient, task_id: str) -> list[int]:
    answer = await client.get(f"/v1/tasks/{task_id}/flows", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    return sorted(f["scheduled_at_ms"] for f in answer.json()["items"])


async def wait_for_flows_at(client: httpx.AsyncClient, task_id: str, instants: list[int], timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not set(instants) <= set(await flow_instants(client, task_id)):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no flows at {instants}: {await flow_instants(client, task_id)}")
        await asyncio.sleep(0.1)


async def sleep_until(at_ms: int) -> None:
    await asyncio.sleep(max(0, at_ms - now_ms()) / 1000)


async def task_as_written(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """What an edit changes: ``version`` (moves on each edit, never on a fire) and the definition.
    ``updated_at`` and ``next_run_at`` move on every fire, so they are not compared."""
    task = (await client.get(f"/v1/tasks/{task_id}")).json()
    return {k: task[k] for k in ("version", "schedule", "callback", "payload", "misfire_policy", "status")}


def check_excluded(flows: list[int], received: list[int], excluded: range) -> None:
    assert not [at for at in flows if at in excluded], (flows, excluded)
    assert not [at for at in received if at in excluded], (received, excluded)


@pytest.mark.timing
@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
async def test_a_calendar_changed_to_exclude_the_coming_instants_stops_the_task_s_flows_and_changed_back_lets_it_fire(
    running: RunningNode, receiver: Receiver
) -> None:
    client, _ = await client_for(running)
    async with client:
        await put_calendar(client, NOTHING_AHEAD)
        task, start = await create_every_second(client, receiver)
        written = await task_as_written(client, task["id"])
        await wait_for_flows_at(client, task["id"], [start, start + 1000], timeout_s=10)

        await sleep_until(now_ms() // 1000 * 1000 + 1400)  # after a fire: the task's next run is computed
        off_from = now_ms() // 1000 * 1000 + 1000
        off_to = off_from + 5000
        before = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert before["next_run_at_ms"] == off_from, before  # the change comes after the instant was computed
        answered = await put_calendar(client, excluding(off_from, off_to))
        assert answered < off_from, "the PUT was answered after the period began: too slow a machine to tell"
        await sleep_until(off_from + 1500)
        back = await put_calendar(client, NOTHING_AHEAD)  # changed back inside the period
        await wait_for_flows_at(client, task["id"], [off_to, off_to + 1000], timeout_s=10)

        flows = await flow_instants(client, task["id"])
        assert [at for at in flows if at < off_from] == list(range(start, off_from, 1000))  # none lost before
        received = [int(r.headers["tjobs-scheduled-at"]) for r in receiver.for_path("/hook")]
        check_excluded(flows, received, range(off_from, back, 1))  # nothing while the node knew them excluded
        assert await task_as_written(client, task["id"]) == written  # the task was never rewritten


@contextlib.asynccontextmanager
async def two_nodes(settings: Settings) -> AsyncIterator[tuple[RunningNode, RunningNode]]:
    """Node A (calendars written through it) and node B (the task created and fired through it) on one
    store, each reading the calendars again every :data:`CALENDAR_REFRESH_S`. With the embedded coordinator
    each owns every shard: A's cycle is a day long, so its wheel loaded nothing of a task created after it
    started (the test checks A fired nothing)."""
    refresh = {"calendar_refresh_s": CALENDAR_REFRESH_S}
    long_cycle = settings.scheduler.model_copy(update={"cycle_s": 86_400, "load_lead_s": 30, **refresh})
    short_refresh = settings.scheduler.model_copy(update=refresh)
    async with (
        run_node(settings.model_copy(update={"scheduler": long_cycle, "node_id": "a"})) as a,
        run_node(settings.model_copy(update={"scheduler": short_refresh, "node_id": "b"})) as b,
    ):
        yield a, b


async def wait_for_preview(client: httpx.AsyncClient, check: Any, timeout_s: float) -> int:
    """Poll the preview of an every-second schedule naming ``switch`` until ``check(answer)``; when."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    schedule = {"kind": "interval", "every_ms": 1000, "start_at_ms": 0, "calendar": "switch"}
    while True:
        answer = await client.post("/v1/schedules:preview", json={"schedule": schedule, "count": 30})
        if check(answer):
            return now_ms()
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the preview never changed: {answer.status_code} {answer.text}")
        await asyncio.sleep(0.05)


def previews_none_in(from_ms: int, to_ms: int) -> Any:
    def check(answer: httpx.Response) -> bool:
        if answer.status_code != 200:
            return False
        instants = [i["at_ms"] for i in answer.json()["instants"]]
        return not [at for at in instants if from_ms <= at < to_ms]

    return check


def previews_some_in(from_ms: int, to_ms: int) -> Any:
    def check(answer: httpx.Response) -> bool:
        return answer.status_code == 200 and any(from_ms <= i["at_ms"] < to_ms for i in answer.json()["instants"])

    return check


@pytest.mark.timing
@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
async def test_a_calendar_changed_through_one_node_applies_to_another_node_s_firing_and_preview_within_its_refresh(
    node_settings: Settings, receiver: Receiver
) -> None:
    async with two_nodes(node_settings) as (a, b):
        assert b.node.calendars.refresh_s == CALENDAR_REFRESH_S  # the bound below is B's own refresh
        refresh_ms = math.ceil(b.node.calendars.refresh_s * 1000)
        bound_ms = refresh_ms + READ_SLACK_MS
        _, key = await a.create_app("calendars")
        auth = {"authorization": f"Bearer {key}"}
        async with (
            httpx.AsyncClient(base_url=a.base_url, headers=auth) as via_a,
            httpx.AsyncClient(base_url=b.base_url, headers=auth) as via_b,
        ):
            answered = await put_calendar(via_a, NOTHING_AHEAD)
            known = await wait_for_preview(via_b, lambda r: r.status_code == 200, timeout_s=bound_ms / 1000 + 5)
            assert known - answered <= bound_ms, ("B learnt of a new calendar late", known - answered)
            task, start = await create_every_second(via_b, receiver)
            written = await task_as_written(via_b, task["id"])
            await wait_for_flows_at(via_b, task["id"], [start, start + 1000], timeout_s=10)

            off_from = (now_ms() // 1000 + 2) * 1000
            # long enough for B to learn the change (bound), fire some excluded instants, learn the change back
            # (bound again) and still list instants of the period in its preview
            off_to = off_from + 2 * math.ceil(bound_ms / 1000) * 1000 + 6000
            answered = await put_calendar(via_a, excluding(off_from, off_to))
            applied = await wait_for_preview(via_b, previews_none_in(off_from, off_to), timeout_s=bound_ms / 1000 + 5)
            assert applied - answered <= bound_ms, ("B's preview applied the change late", applied - answered)

            await sleep_until(max(answered + bound_ms, off_from) + 3000)
            back = await put_calendar(via_a, NOTHING_AHEAD)  # changed back inside the period
            back_applied = await wait_for_preview(via_b, previews_some_in(back, off_to), timeout_s=bound_ms / 1000 + 5)
            assert back_applied - back <= bound_ms, ("B's preview applied the change back late", back_applied - back)
            await wait_for_flows_at(via_b, task["id"], [off_to, off_to + 1000], timeout_s=bound_ms / 1000 + 10)

            flows = await flow_instants(via_b, task["id"])
            assert [at for at in flows if at < off_from] == list(range(start, off_from, 1000))
            received = [int(r.headers["tjobs-scheduled-at"]) for r in receiver.for_path("/hook")]
            # B may have fired instants until it read the change; none after that and before the change back
            check_excluded(flows, received, range(max(off_from, answered + bound_ms + 1), back, 1))
            assert len(range(max(off_from, answered + bound_ms + 1), back, 1000)) >= 1  # at least one instant checked
            assert await task_as_written(via_b, task["id"]) == written
        assert a.node.runner.stats.fires_committed == 0, "node A fired: the test did not watch B's calendars"
        assert b.node.runner.stats.fires_committed > 0
