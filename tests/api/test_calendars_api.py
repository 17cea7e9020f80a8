"""``/v1/calendars`` over HTTP, and schedules naming a calendar or carrying a jitter: created, previewed
and refused with the field named."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, refused_before_storage, task_body
from tests.api.test_tasks_api import assert_error

pytestmark = pytest.mark.asyncio(loop_scope="session")

DAY = 86_400_000
MONDAY = 1_893_974_400_000  # 2030-01-07T00:00:00Z
ICAL = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20300109\nEND:VEVENT\nEND:VCALENDAR\n"


async def test_a_calendar_is_put_read_listed_replaced_and_deleted(tenant: Tenant) -> None:
    created = await tenant.client.put("/v1/calendars/holidays", json={"weekdays": ["sat", "sun"], "ical": ICAL})
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["name"], body["weekdays"], body["dates"], body["version"]) == (
        "holidays",
        ["sat", "sun"],
        ["2030-01-09"],
        1,
    )
    replaced = await tenant.client.put("/v1/calendars/holidays", json={"dates": ["2030-01-08"]})
    assert replaced.status_code == 200 and replaced.json()["version"] == 2 and "weekdays" not in replaced.json()
    assert (await tenant.client.get("/v1/calendars/holidays")).json() == replaced.json()
    assert [c["name"] for c in (await tenant.client.get("/v1/calendars")).json()["items"]] == ["holidays"]
    assert (await tenant.client.delete("/v1/calendars/holidays")).status_code == 204
    assert_error(await tenant.client.get("/v1/calendars/holidays"), 404)
    assert_error(await tenant.client.delete("/v1/calendars/holidays"), 404)


async def test_another_apps_calendar_is_not_found(tenant_factory: Any) -> None:
    owner, other = await tenant_factory("owner"), await tenant_factory("other")
    assert (await owner.client.put("/v1/calendars/mine", json={})).status_code == 201
    assert_error(await other.client.get("/v1/calendars/mine"), 404)


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"dates": ["2030-02-30"]}, "dates[0]", "invalid_date"),
        ({"weekdays": ["someday"]}, "weekdays[0]", "invalid_choice"),
        ({"ranges": [{"from": "2030-01-02", "to": "2030-01-01"}]}, "ranges[0].to", "out_of_range"),
        (
            {"ical": "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20300101\nRRULE:FREQ=DAILY\nEND:VEVENT\n"},
            "ical",
            "unsupported_ical",
        ),
        ({"holidays": []}, "holidays", "unknown_field"),
    ],
)
@refused_before_storage
async def test_a_bad_calendar_is_a_422_naming_the_field(
    tenant: Tenant, body: dict[str, Any], field: str, code: str
) -> None:
    assert_error(await tenant.client.put("/v1/calendars/bad", json=body), 422, code, field)


async def test_a_name_that_cannot_be_a_calendars_is_a_422_when_put_and_a_404_when_read(tenant: Tenant) -> None:
    assert_error(await tenant.client.put("/v1/calendars/-bad", json={}), 422, None, "name")
    assert_error(await tenant.client.put(f"/v1/calendars/{'x' * 65}", json={}), 422, None, "name")
    assert_error(await tenant.client.get("/v1/calendars/-bad"), 404)
    assert_error(await tenant.client.delete("/v1/calendars/-bad"), 404)


async def test_a_task_skips_what_its_calendar_excludes_and_follows_a_change(tenant: Tenant) -> None:
    await tenant.client.put("/v1/calendars/weekends", json={"weekdays": ["sat", "sun"]})
    schedule = {
        "kind": "interval",
        "every_ms": DAY,
        "start_at_ms": MONDAY + 4 * DAY + 9 * 3_600_000,
        "calendar": "weekends",
    }
    preview = await tenant.client.post("/v1/schedules:preview", json={"schedule": schedule, "count": 3})
    assert preview.status_code == 200, preview.text
    assert [i["at_ms"] - MONDAY for i in preview.json()["instants"]] == [
        d * DAY + 9 * 3_600_000 for d in (4, 7, 8)
    ]  # Friday, then Monday and Tuesday
    task = await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule))
    assert task.status_code == 201, task.text
    assert task.json()["next_run_at_ms"] == MONDAY + 4 * DAY + 9 * 3_600_000
    await tenant.client.put("/v1/calendars/weekends", json={"weekdays": ["fri", "sat", "sun"]})
    preview = await tenant.client.post("/v1/schedules:preview", json={"schedule": schedule, "count": 1})
    assert preview.json()["instants"][0]["at_ms"] == MONDAY + 7 * DAY + 9 * 3_600_000  # the change applies at once


@pytest.mark.parametrize(
    ("schedule", "field", "code"),
    [
        ({"kind": "interval", "every_ms": 60_000, "calendar": "nope"}, "schedule.calendar", "unknown_calendar"),
        ({"kind": "interval", "every_ms": 60_000, "calendar": "no spaces"}, "schedule.calendar", None),
        ({"kind": "interval", "every_ms": 60_000, "calendar": 5}, "schedule.calendar", None),
        ({"kind": "interval", "every_ms": 60_000, "jitter_ms": 60_001}, "schedule.jitter_ms", "jitter_too_large"),
        ({"kind": "cron", "expr": "0 9 * * *", "jitter_ms": 3_600_001}, "schedule.jitter_ms", None),
        ({"kind": "interval", "every_ms": 60_000, "jitter_ms": -1}, "schedule.jitter_ms", None),
        ({"kind": "interval", "every_ms": 60_000, "jitter_ms": "1"}, "schedule.jitter_ms", None),
        ({"kind": "delay", "delay_ms": 60_000, "jitter_ms": 1}, "schedule.jitter_ms", None),
    ],
)
@refused_before_storage
async def test_a_bad_calendar_or_jitter_in_a_schedule_is_a_422_naming_it(
    tenant: Tenant, schedule: dict[str, Any], field: str, code: str | None
) -> None:
    assert_error(await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule)), 422, code, field)
    preview = await tenant.client.post("/v1/schedules:preview", json={"schedule": schedule})
    assert_error(preview, 422, code, field)


async def test_a_jittered_task_starts_at_its_first_instant_jittered_as_the_preview_shows(tenant: Tenant) -> None:
    schedule = {"kind": "interval", "every_ms": DAY, "start_at_ms": MONDAY + 9 * 3_600_000, "jitter_ms": 3_600_000}
    task = (await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule))).json()
    body = {"schedule": schedule, "count": 2, "task_id": int(task["id"])}
    instants = (await tenant.client.post("/v1/schedules:preview", json=body)).json()["instants"]
    assert instants[0]["at_ms"] == MONDAY + 9 * 3_600_000
    assert instants[0]["fires_at_ms"] == task["next_run_at_ms"]
    assert all(0 <= i["fires_at_ms"] - i["at_ms"] <= 3_600_000 for i in instants)
    assert_error(await tenant.client.post("/v1/schedules:preview", json={**body, "task_id": -1}), 422, None, "task_id")


async def test_the_consoles_schedule_preview_skips_what_the_apps_calendar_excludes(
    api_node: RunningNode, tenant: Tenant
) -> None:
    await tenant.client.put("/v1/calendars/weekdays-only", json={"weekdays": ["sat", "sun"]})
    schedule = {"kind": "interval", "every_ms": DAY, "start_at_ms": MONDAY + 4 * DAY, "calendar": "weekdays-only"}
    async with httpx.AsyncClient(base_url=api_node.base_url) as console:
        await signed_in(console, tenant)
        shown = await console.get(
            "/console/schedules/preview",
            params={"schedule": json.dumps(schedule), "count": 2, "from": "2030-01-07T00:00:00Z"},
        )
    assert shown.status_code == 200, shown.text[:2000]
    assert "2030-01-11" in shown.text and "2030-01-14" in shown.text  # Friday, then Monday
    assert "2030-01-12" not in shown.text and "2030-01-13" not in shown.text


async def test_the_consoles_task_page_lists_the_instants_its_apps_calendar_leaves(
    api_node: RunningNode, tenant: Tenant
) -> None:
    await tenant.client.put("/v1/calendars/weekdays-only", json={"weekdays": ["sat", "sun"]})
    schedule = {"kind": "interval", "every_ms": DAY, "start_at_ms": MONDAY + 4 * DAY, "calendar": "weekdays-only"}
    task = await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule))
    assert task.status_code == 201, task.text
    async with httpx.AsyncClient(base_url=api_node.base_url) as console:
        await signed_in(console, tenant)
        shown = await console.get(f"/console/tasks/{task.json()['id']}")
    assert shown.status_code == 200, shown.text[:2000]
    assert "2030-01-11 00:00:00 UTC" in shown.text and "2030-01-14 00:00:00 UTC" in shown.text  # Friday, Monday
    assert "2030-01-12 00:00:00 UTC" not in shown.text and "2030-01-13 00:00:00 UTC" not in shown.text


async def signed_in(console: httpx.AsyncClient, tenant: Tenant) -> None:
    """``console`` signed in to the console with the tenant's app key."""
    signin = await console.get("/console/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', signin.text)
    assert csrf is not None
    signed = await console.post(
        "/console/signin", data={"csrf": csrf.group(1), "next": "/console/", "key": tenant.api_key}
    )
    assert signed.status_code == 303, signed.text
