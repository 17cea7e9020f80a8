"""Quotas and stats read the stores' task counts, never the tasks.

Given a running node, when a new app registers its first task or reads its stats,
then no request counts the app's tasks shard by shard (the counts change with every write, and a read
is one statement per logical database over the app's count rows); the quota holds, counting tasks
other nodes stored once this node read the app's counts, and stats show every node's changes at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.contract.backends import make_task

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_new_apps_first_create_and_its_stats_count_no_shard_on_the_request(
    api_node: RunningNode,
    tenant_factory: Callable[..., Awaitable[Tenant]],
    admin: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = api_node.node.store
    per_shard_counts: list[Any] = []
    count_tasks = store.count_tasks

    async def counted(*args: Any, **kwargs: Any) -> int:
        per_shard_counts.append(args)
        return await count_tasks(*args, **kwargs)

    monkeypatch.setattr(store, "count_tasks", counted)
    tenant = await tenant_factory("first-create")
    created = await tenant.client.post("/v1/tasks", json=task_body(name="first"))
    assert created.status_code == 201, created.text
    stats = await tenant.client.get("/v1/stats")
    assert stats.status_code == 200 and stats.json()["active_tasks"] == 1  # its own create, at once
    assert (await admin.get(f"/v1/apps/{tenant.app.id}/stats")).status_code == 200
    assert per_shard_counts == []


async def test_the_quota_counts_tasks_another_node_stored_once_the_counts_were_read(
    api_node: RunningNode,
    tenant_factory: Callable[..., Awaitable[Tenant]],
) -> None:
    tenant = await tenant_factory("quota-elsewhere", max_active_tasks=3)
    for i in range(2):  # as another node would: straight into the store
        await api_node.node.store.insert_task(make_task(app_id=tenant.app.id, name=f"elsewhere-{i}"))
    await api_node.node.tasks.counts.refresh()

    assert (await tenant.client.post("/v1/tasks", json=task_body(name="here"))).status_code == 201
    over = await tenant.client.post("/v1/tasks", json=task_body(name="over"))
    assert over.status_code == 429 and over.json()["error"]["code"] == "quota_exceeded"

    stats = (await tenant.client.get("/v1/stats")).json()
    assert stats["active_tasks"] == 3
    assert stats["counted_at_ms"] is not None and stats["counted_at_ms"] <= time.time_ns() // 1_000_000


async def test_stats_show_a_task_another_node_stored_at_once(
    api_node: RunningNode,
    tenant_factory: Callable[..., Awaitable[Tenant]],
) -> None:
    tenant = await tenant_factory("stats-elsewhere")
    assert (await tenant.client.get("/v1/stats")).json()["paused_tasks"] == 0
    task = make_task(app_id=tenant.app.id, name="paused-elsewhere")
    task.status = task.status.PAUSED
    await api_node.node.store.insert_task(task)  # as another node would: straight into the store
    stats = (await tenant.client.get("/v1/stats")).json()
    assert (stats["paused_tasks"], stats["active_tasks"]) == (1, 0)


async def test_concurrent_creates_on_one_node_never_pass_the_quota_together(
    api_node: RunningNode,
    tenant_factory: Callable[..., Awaitable[Tenant]],
) -> None:
    # Given an app with a quota of 5 and no task yet
    tenant = await tenant_factory("quota-concurrent", max_active_tasks=5)
    # When it sends 20 creates and a batch of 3 at once to one node
    answers = await asyncio.gather(
        *(tenant.client.post("/v1/tasks", json=task_body(name=f"c-{i}")) for i in range(20)),
        tenant.client.post("/v1/tasks/batch", json={"tasks": [task_body(name=f"b-{i}") for i in range(3)]}),
    )
    # Then the tasks being stored count against the quota: 5 are stored, not 23
    assert (await api_node.node.tasks.counts.of(tenant.app.id)).active == 5
    assert {a.json()["error"]["code"] for a in answers if a.status_code == 429} == {"quota_exceeded"}
