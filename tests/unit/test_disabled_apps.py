"""Every node learns which apps are disabled from the apps table; one leaving the set reloads the runner."""

from __future__ import annotations

import pytest

from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.model import DISABLED_AT, App, DeliveryMode, FireIntent, MisfirePolicy, Task, TaskStatus
from tjobs.service.disabled_apps import DisabledApps
from tjobs.specs import CallbackSpec, IntervalSpec
from tjobs.stores.memory import MemoryTaskStore

pytestmark = pytest.mark.asyncio

NOW_MS = 1_800_000_000_000


async def test_a_pass_reads_the_disabled_apps_and_an_enabled_one_reloads() -> None:
    store = MemoryTaskStore()
    await store.put_app(App("on", "on", "h1", ["s"]))
    await store.put_app(App("off", "off", "h2", ["s"], settings={DISABLED_AT: NOW_MS}))
    disabled = DisabledApps(store)
    reloads: list[int] = []

    async def reload() -> None:
        reloads.append(1)

    disabled.subscribe(reload)
    await disabled.run_once()
    assert "off" in disabled and "on" not in disabled and reloads == []

    await store.put_app(App("off", "off", "h2", ["s"]))  # enabled on another node
    await disabled.run_once()
    assert "off" not in disabled and reloads == [1]


async def test_the_planner_declines_the_fires_of_a_disabled_app() -> None:
    store = MemoryTaskStore()
    disabled = DisabledApps(store)
    await disabled.changed(App("off", "off", "h", ["s"], settings={DISABLED_AT: NOW_MS}))
    planner = FirePlanner(FirePolicy(60_000, 10), disabled_apps=disabled)
    task = Task(
        1,
        "off",
        "t",
        None,
        IntervalSpec(1000, NOW_MS),
        CallbackSpec(("https://e.example/",)),
        None,
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.ACTIVE,
        NOW_MS,
        1,
        0,
        NOW_MS,
        NOW_MS,
    )
    intent = FireIntent(1, NOW_MS, 1)
    assert planner(task, intent, NOW_MS) is None
    await disabled.changed(App("off", "off", "h", ["s"]))
    assert planner(task, intent, NOW_MS) is not None
