"""Fixed-delay schedules over HTTP (issue 30 item 2): a task registers with its first run one delay
ahead, the preview lists only that first run and says why, and bad input is a 4xx naming the field
(the delay's bounds, the fields a fixed delay does not take, catch_up, a backfill)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.api.conftest import Tenant, refused_before_storage, task_body
from tests.api.test_tasks_api import assert_error
from tjobs.client import fixed_delay

pytestmark = pytest.mark.asyncio(loop_scope="session")

DAY_MS = 86_400_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_a_fixed_delay_task_starts_one_delay_after_registration(tenant: Tenant) -> None:
    before = _now_ms()
    created = await tenant.client.post("/v1/tasks", json=task_body(schedule=fixed_delay(seconds=30)))
    assert created.status_code == 201, created.text
    task = created.json()
    assert task["schedule"]["kind"] == "fixed_delay" and task["schedule"]["delay_ms"] == 30_000
    start = task["schedule"]["start_at_ms"]
    assert before + 30_000 <= start <= _now_ms() + 30_000 and task["next_run_at_ms"] == start
    assert task["misfire_policy"] == "fire_now"
    listed = await tenant.client.get("/v1/tasks", params={"kind": "fixed_delay"})
    assert listed.status_code == 200, listed.text
    assert {t["schedule"]["kind"] for t in listed.json()["items"]} == {"fixed_delay"}
    assert task["id"] in {t["id"] for t in listed.json()["items"]}
    # read back and written back as it is stored
    again = await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"schedule": task["schedule"]})
    assert again.status_code == 200, again.text
    assert again.json()["next_run_at_ms"] == start


async def test_a_start_and_max_fires_are_taken(tenant: Tenant) -> None:
    start = _now_ms() + 3_600_000
    schedule = fixed_delay(minutes=5, start_at=start, max_fires=3)
    task = (await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule))).json()
    assert task["schedule"] == {"kind": "fixed_delay", "delay_ms": 300_000, "start_at_ms": start, "max_fires": 3}
    assert task["next_run_at_ms"] == start


@pytest.mark.parametrize("delay_ms", [0, 999, 366 * DAY_MS + 1, "60000", None])
@refused_before_storage
async def test_a_delay_out_of_bounds_is_a_422_naming_schedule_delay_ms(tenant: Tenant, delay_ms: Any) -> None:
    response = await tenant.client.post(
        "/v1/tasks", json=task_body(schedule={"kind": "fixed_delay", "delay_ms": delay_ms})
    )
    assert_error(response, 422, field="schedule.delay_ms")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"end_at_ms": 1}, "schedule.end_at_ms"),
        ({"jitter_ms": 1000}, "schedule.jitter_ms"),
        ({"calendar": "holidays"}, "schedule.calendar"),
        ({"every_ms": 1000}, "schedule.every_ms"),
    ],
)
@refused_before_storage
async def test_a_field_a_fixed_delay_does_not_take_is_a_422_naming_it(
    tenant: Tenant, extra: dict[str, Any], field: str
) -> None:
    schedule = {"kind": "fixed_delay", "delay_ms": 60_000, **extra}
    response = await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule))
    assert_error(response, 422, field=field)


async def test_catch_up_is_refused_with_a_fixed_delay_naming_misfire_policy(tenant: Tenant) -> None:
    schedule = fixed_delay(seconds=60)
    response = await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule, misfire_policy="catch_up"))
    assert_error(response, 422, code="invalid_combination", field="misfire_policy")
    # nor can an edit bring the two together, from either side
    interval = {"kind": "interval", "every_ms": 60_000}
    catching = await tenant.client.post("/v1/tasks", json=task_body(schedule=interval, misfire_policy="catch_up"))
    assert catching.status_code == 201, catching.text
    edit = await tenant.client.patch(f"/v1/tasks/{catching.json()['id']}", json={"schedule": schedule})
    assert_error(edit, 422, code="invalid_combination", field="misfire_policy")
    task = (await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule))).json()
    edit = await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"misfire_policy": "catch_up"})
    assert_error(edit, 422, code="invalid_combination", field="misfire_policy")
    skip = await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"misfire_policy": "skip"})
    assert skip.status_code == 200, skip.text


async def test_the_preview_shows_the_first_run_and_says_later_ones_follow_run_ends(tenant: Tenant) -> None:
    start = _now_ms() + 60_000
    body = {"schedule": fixed_delay(seconds=45, start_at=start), "count": 5}
    response = await tenant.client.post("/v1/schedules:preview", json=body)
    assert response.status_code == 200, response.text
    preview = response.json()
    assert [i["at_ms"] for i in preview["instants"]] == [start]
    assert preview["ended"] is False and "45000 ms after the previous run ends" in preview["note"]
    bad = await tenant.client.post("/v1/schedules:preview", json={"schedule": {"kind": "fixed_delay", "delay_ms": 5}})
    assert_error(bad, 422, field="schedule.delay_ms")


async def test_a_backfill_of_a_fixed_delay_task_is_a_422_naming_schedule_kind(tenant: Tenant) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body(schedule=fixed_delay(seconds=60)))).json()
    now = _now_ms()
    response = await tenant.client.post(
        f"/v1/tasks/{task['id']}/backfill", json={"from": now - 3_600_000, "to": now - 60_000}
    )
    assert_error(response, 422, code="not_backfillable", field="schedule.kind")
