"""Child tasks over HTTP on every backend (README "Child tasks"): a task names the tasks its flows
trigger when they end; each bad entry is a 422 naming it, a cycle is refused at create and edit."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Tenant, task_body

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _task(tenant: Tenant, **extra: Any) -> dict[str, Any]:
    created = await tenant.client.post("/v1/tasks", json=task_body(**extra))
    assert created.status_code == 201, created.text
    task: dict[str, Any] = created.json()
    return task


def _refusal(answer: Any) -> tuple[int, str, str]:
    error = answer.json()["error"]
    return answer.status_code, error["field"], error["code"]


async def test_a_task_names_its_children_and_shows_them(tenant: Tenant) -> None:
    b = await _task(tenant, name="b")
    c = await _task(tenant, name="c")
    a = await _task(tenant, name="a", children={"on_success": [b["id"], c["id"]], "on_failure": [c["id"]]})

    shown = (await tenant.client.get(f"/v1/tasks/{a['id']}")).json()

    assert a["children"] == {"on_success": [b["id"], c["id"]], "on_failure": [c["id"]]}
    assert shown["children"] == a["children"]
    assert b["children"] is None
    cleared = await tenant.client.patch(f"/v1/tasks/{a['id']}", json={"children": None})
    assert cleared.status_code == 200 and cleared.json()["children"] is None


async def test_children_of_no_task_of_the_app_are_refused_naming_the_entry(tenant_factory: Any) -> None:
    tenant = await tenant_factory("children-a")
    other = await tenant_factory("children-b")
    theirs = await _task(other, name="theirs")
    mine = await _task(tenant, name="mine")

    foreign = await tenant.client.post("/v1/tasks", json=task_body(children={"on_success": [mine["id"], theirs["id"]]}))
    missing = await tenant.client.post("/v1/tasks", json=task_body(children={"on_failure": ["123456789"]}))
    self_named = await tenant.client.patch(f"/v1/tasks/{mine['id']}", json={"children": {"on_success": [mine["id"]]}})
    too_many = await tenant.client.post(
        "/v1/tasks", json=task_body(children={"on_success": [str(i) for i in range(1, 18)]})
    )
    not_ids = await tenant.client.post("/v1/tasks", json=task_body(children={"on_success": ["abc"]}))
    unknown = await tenant.client.post("/v1/tasks", json=task_body(children={"after": [mine["id"]]}))

    assert _refusal(foreign) == (422, "children.on_success[1]", "unknown_task")
    assert _refusal(missing) == (422, "children.on_failure[0]", "unknown_task")
    assert _refusal(self_named) == (422, "children.on_success[0]", "self_child")
    assert too_many.status_code == 422 and "children.on_success" in too_many.json()["error"]["field"]
    assert not_ids.status_code == 422 and "children.on_success" in not_ids.json()["error"]["field"]
    assert unknown.status_code == 422 and "children" in unknown.json()["error"]["field"]


async def test_an_edit_closing_a_cycle_is_refused(tenant: Tenant) -> None:
    c = await _task(tenant, name="c")
    b = await _task(tenant, name="b", children={"on_success": [c["id"]]})
    a = await _task(tenant, name="a", children={"on_failure": [b["id"]]})

    cycle = await tenant.client.patch(f"/v1/tasks/{c['id']}", json={"children": {"on_success": [a["id"]]}})
    diamond = await tenant.client.patch(f"/v1/tasks/{a['id']}", json={"children": {"on_success": [b["id"], c["id"]]}})

    assert _refusal(cycle) == (422, "children.on_success[0]", "cycle")
    assert f"{c['id']} -> {a['id']} -> {b['id']} -> {c['id']}" in cycle.json()["error"]["message"]
    assert diamond.status_code == 200
    assert (await tenant.client.get(f"/v1/tasks/{c['id']}")).json()["children"] is None
