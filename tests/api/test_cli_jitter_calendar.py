"""The CLI's ``--jitter`` and ``--calendar`` (issue 30): ``tjobs schedule preview`` applies them as the API
does (the app's calendar, the jittered instant for a task id), ``tjobs task create|update`` put them in
the schedule, and a bad one is an error naming the flag or the field, never a traceback.

The CLI (a sync httpx client) runs in a worker thread so the node keeps serving in the test's loop.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tjobs.cli.main import app as cli

pytestmark = pytest.mark.asyncio(loop_scope="session")

DAY = 86_400_000
HOUR = 3_600_000
MONDAY = 1_893_974_400_000  # 2030-01-07T00:00:00Z


def env_of(api_node: RunningNode, tenant: Tenant) -> dict[str, str]:
    return {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "80"}


async def run(env: dict[str, str], *args: str) -> Result:
    def invoke() -> Result:
        return CliRunner().invoke(cli, list(args), env=env)

    return await asyncio.to_thread(invoke)


async def answered(env: dict[str, str], *args: str) -> Any:
    result = await run(env, *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in args else result.stdout


async def test_the_preview_skips_what_the_named_calendar_excludes(api_node: RunningNode, tenant: Tenant) -> None:
    await tenant.client.put("/v1/calendars/weekdays-only", json={"weekdays": ["sat", "sun"]})
    env = env_of(api_node, tenant)
    args = ["schedule", "preview", "--every", "1d", "--start", str(MONDAY + 4 * DAY), "-n", "2"]

    table = await answered(env, *args, "--calendar", "weekdays-only")

    assert "2030-01-11T00:00:00Z" in table and "2030-01-14T00:00:00Z" in table  # Friday, then Monday
    assert "2030-01-12" not in table and "2030-01-13" not in table
    plain = await answered(env, *args)
    assert "2030-01-12T00:00:00Z" in plain  # without the flag the weekend stays


async def test_the_preview_shows_when_a_jittered_task_fires(api_node: RunningNode, tenant: Tenant) -> None:
    start = MONDAY + 9 * HOUR
    schedule = {"kind": "interval", "every_ms": DAY, "start_at_ms": start, "jitter_ms": HOUR}
    task = (await tenant.client.post("/v1/tasks", json=task_body(schedule=schedule))).json()
    env = env_of(api_node, tenant)
    args = ["schedule", "preview", "--every", "1d", "--start", str(start), "--jitter", "1h", "-n", "3"]

    preview = await answered(env, *args, "--task-id", task["id"], "--json")
    table = await answered(env, *args, "--task-id", task["id"])

    instants = preview["instants"]
    assert preview["schedule"]["jitter_ms"] == HOUR
    assert instants[0]["fires_at_ms"] == task["next_run_at_ms"]  # where the task itself will fire
    assert all(0 <= i["fires_at_ms"] - i["at_ms"] <= HOUR for i in instants)
    fires_at = datetime.fromtimestamp(instants[0]["fires_at_ms"] / 1000, UTC).isoformat(timespec="milliseconds")
    assert "fires at" in table and fires_at.replace("+00:00", "Z") in table, table
    assert max(len(line) for line in table.splitlines()) <= 80, table
    assert "…" not in table, table


async def test_task_create_and_update_put_the_jitter_and_the_calendar_in_the_schedule(
    api_node: RunningNode, tenant: Tenant
) -> None:
    await tenant.client.put("/v1/calendars/quiet-days", json={"dates": ["2030-12-25"]})
    env = env_of(api_node, tenant)
    made = ["task", "create", "cli-jitter-calendar", "--callback", "http://127.0.0.1:9/j", "--every", "1h"]

    task = await answered(env, *made, "--jitter", "30s", "--calendar", "quiet-days", "--json")

    assert (task["schedule"]["jitter_ms"], task["schedule"]["calendar"]) == (30_000, "quiet-days")
    update = ["task", "update", task["id"], "--cron", "0 9 * * *", "--jitter", "5m", "--json"]
    updated = await answered(env, *update)
    assert updated["schedule"]["jitter_ms"] == 300_000 and "calendar" not in updated["schedule"]
    alone = await run(env, "task", "update", task["id"], "--jitter", "5m")
    assert alone.exit_code == 2 and "Invalid value for --jitter" in alone.output and "Traceback" not in alone.output


@pytest.mark.parametrize(
    ("flags", "code", "named"),
    [
        (["--jitter", "-5s"], 2, "Invalid value for --jitter"),
        (["--jitter", "soon"], 2, "Invalid value for --jitter"),
        (["--jitter", "2m"], 1, "schedule.jitter_ms"),  # more than the 1-minute period: the API names it
        (["--calendar", "no-such-calendar"], 1, "schedule.calendar"),
    ],
)
@pytest.mark.parametrize("command", ["preview", "create"])
async def test_a_bad_jitter_or_calendar_is_an_error_naming_it(
    api_node: RunningNode, tenant: Tenant, command: str, flags: list[str], code: int, named: str
) -> None:
    if command == "preview":
        args = ["schedule", "preview", "--every", "1m", *flags]
    else:
        args = ["task", "create", "cli-bad", "--callback", "http://127.0.0.1:9/b", "--every", "1m", *flags]

    result = await run(env_of(api_node, tenant), *args)

    assert result.exit_code == code, result.output
    assert named in result.output and "Traceback" not in result.output
    if code == 1:
        assert ("unknown_calendar" if "calendar" in named else "jitter_too_large") in result.output
