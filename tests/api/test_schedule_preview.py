"""``POST /v1/schedules:preview`` over HTTP: the instants a task will fire at, and field-named errors."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from testkit import RunningNode
from tests.api.conftest import Tenant, refused_before_storage, task_body
from tests.api.test_tasks_api import assert_error
from tjobs.cli.main import app as cli
from tjobs.client import Client, SchedulePreview, cron

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_the_first_instant_is_where_a_task_with_that_schedule_starts(tenant: Tenant) -> None:
    schedule = {"kind": "cron", "expr": "*/5 * * * *", "timezone": "Europe/Paris"}
    preview = await tenant.client.post("/v1/schedules:preview", json={"schedule": schedule, "count": 3})
    assert preview.status_code == 200, preview.text
    task = (await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule))).json()
    body = preview.json()
    assert body["timezone"] == "Europe/Paris" and body["ended"] is False
    assert body["schedule"]["dst_gap"] == "skip"  # the canonical form, defaults filled in
    instants = body["instants"]
    assert len(instants) == 3 and instants[0]["at_ms"] == task["next_run_at_ms"]
    assert [b["at_ms"] - a["at_ms"] for a, b in itertools.pairwise(instants)] == [300_000, 300_000]
    assert instants[0]["at"].endswith("Z") and instants[0]["local"].endswith(instants[0]["utc_offset"])


async def test_a_spring_forward_gap_is_shown_with_its_policy_applied(tenant: Tenant) -> None:
    async def local(gap: str) -> list[str]:
        schedule = {"kind": "cron", "expr": "30 2 * * *", "timezone": "America/New_York", "dst_gap": gap}
        body = {"schedule": schedule, "count": 2, "from": "2030-03-09T00:00:00-05:00"}
        response = await tenant.client.post("/v1/schedules:preview", json=body)
        assert response.status_code == 200, response.text
        return [i["local"] for i in response.json()["instants"]]

    # 2030-03-10 02:00 EST -> 03:00 EDT
    assert await local("skip") == ["2030-03-09T02:30:00.000-05:00", "2030-03-11T02:30:00.000-04:00"]
    assert await local("shift") == ["2030-03-09T02:30:00.000-05:00", "2030-03-10T03:00:00.000-04:00"]


async def test_the_admin_key_may_preview_and_no_key_may_not(admin: httpx.AsyncClient, api_node: RunningNode) -> None:
    from_ms = 1_893_456_000_000  # 2030-01-01T00:00:00Z
    body = {"schedule": {"kind": "interval", "every_ms": 60_000}, "from": from_ms}
    answered = await admin.post("/v1/schedules:preview", json=body)
    assert answered.status_code == 200, answered.text
    assert from_ms <= answered.json()["instants"][0]["at_ms"] < from_ms + 60_000
    async with httpx.AsyncClient(base_url=api_node.base_url) as anonymous:
        assert (await anonymous.post("/v1/schedules:preview", json=body)).status_code == 401


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({}, "schedule", "missing"),
        ({"schedule": {"kind": "cron", "expr": "61 * * * *"}}, "schedule.expr", "invalid_cron"),
        ({"schedule": {"kind": "cron", "expr": "0 9 * * *", "timezone": "Mars/Base"}}, "schedule.timezone", None),
        ({"schedule": {"kind": "interval", "every_ms": 60_000}, "count": 0}, "count", None),
        ({"schedule": {"kind": "interval", "every_ms": 60_000}, "count": 101}, "count", None),
        ({"schedule": {"kind": "interval", "every_ms": 60_000}, "count": "5"}, "count", None),
        ({"schedule": {"kind": "interval", "every_ms": 60_000}, "from": "yesterday"}, "from", "invalid_instant"),
        ({"schedule": {"kind": "interval", "every_ms": 60_000}, "from": "2030-01-01T00:00:00"}, "from", None),
        ({"schedule": {"kind": "interval", "every_ms": 60_000}, "from": -1}, "from", "out_of_range"),
        ({"schedule": {"kind": "interval", "every_ms": 60_000}, "from": "9999-01-01T00:00:00Z"}, "from", "too_far"),
        ({"schedule": {"kind": "interval", "every_ms": 60_000}, "until": 1}, "until", "unknown_field"),
    ],
)
@refused_before_storage
async def test_bad_input_is_422_naming_the_field(tenant: Tenant, body: dict[str, Any], field: str, code: str) -> None:
    assert_error(await tenant.client.post("/v1/schedules:preview", json=body), 422, code, field)


async def test_the_sdk_and_the_cli_preview_at_80_columns(api_node: RunningNode, tenant: Tenant) -> None:
    schedule = cron("0 9 * * 1-5", timezone="Asia/Shanghai")

    def previews() -> tuple[SchedulePreview, str]:
        with Client(api_node.base_url, tenant.api_key) as sdk:
            answered = sdk.preview_schedule(schedule, count=3, from_="2030-01-01T00:00:00+08:00")
        env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "80"}
        args = ["schedule", "preview", "--cron", "0 9 * * 1-5", "--tz", "Asia/Shanghai", "-n", "3"]
        result = CliRunner().invoke(cli, [*args, "--from", "2030-01-01T00:00:00+08:00"], env=env)
        assert result.exit_code == 0, result.output
        return answered, result.stdout

    answered, table = await asyncio.to_thread(previews)
    assert [i.local.isoformat() for i in answered.instants] == [
        "2030-01-01T09:00:00+08:00",
        "2030-01-02T09:00:00+08:00",
        "2030-01-03T09:00:00+08:00",
    ]
    assert "2030-01-01T01:00:00Z" in table and "2030-01-03T09:00:00+08:00" in table
    assert max(len(line) for line in table.splitlines()) <= 80
