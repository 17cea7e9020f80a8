"""Child tasks over HTTP on every backend (README "Child tasks"): a task names the tasks its flows
trigger when they end; each bad entry is a 422 naming it, a cycle is refused at create and edit; a flow
ending delivered triggers its success children, one ending dead its failure children, once each, at the
parent's instant, with the parent's result (a run's, or the answer's body) as payload."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, replace
from typing import Any

import orjson
import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_job_runs_api import ACCEPTED
from tests.api.test_tenancy import wait_status
from tests.receiver import Receiver, Reply
from tjobs.model import ChildTrigger, FlowStatus, FlowUpdate

pytestmark = pytest.mark.asyncio(loop_scope="session")


@dataclass
class Family:
    parent: dict[str, Any]
    ok: dict[str, Any]  # its on_success child
    ko: dict[str, Any]  # its on_failure child


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


async def _parent_and_children(tenant: Tenant, receiver: Receiver, tag: str, **parent_callback: Any) -> Family:
    ok = await _task(tenant, name="ok", callback={"url": receiver.url(f"/{tag}-ok")})
    ko = await _task(tenant, name="ko", callback={"url": receiver.url(f"/{tag}-ko")})
    parent = await _task(
        tenant,
        name="parent",
        callback={"url": receiver.url(f"/{tag}-parent"), **parent_callback},
        children={"on_success": [ok["id"]], "on_failure": [ko["id"]]},
    )
    return Family(parent, ok, ko)


async def _child_flow(tenant: Tenant, child: dict[str, Any], at_ms: int) -> dict[str, Any]:
    flow = await wait_status(tenant.client, f"{child['id']}-{at_ms}", "delivered")
    return flow


async def test_a_delivered_flow_triggers_its_success_children_with_the_answer_as_payload(
    tenant: Tenant, receiver: Receiver
) -> None:
    tag = f"answer-{secrets.token_hex(4)}"
    receiver.script(f"/{tag}-parent", Reply(200, body=b'{"rows": 3}', headers={"content-type": "application/json"}))
    family = await _parent_and_children(tenant, receiver, tag)

    parent = (await tenant.client.post(f"/v1/tasks/{family.parent['id']}/trigger")).json()
    child = await _child_flow(tenant, family.ok, parent["scheduled_at_ms"])

    [sent] = receiver.for_path(f"/{tag}-ok")
    assert orjson.loads(sent.body)["payload"] == {"rows": 3}
    assert child["kind"] == "manual" and child["payload"] == {"rows": 3}
    assert receiver.for_path(f"/{tag}-ko") == []


async def test_a_runs_result_is_its_childs_payload_once_and_a_dead_flow_triggers_the_failure_children(
    tenant: Tenant, receiver: Receiver
) -> None:
    tag = f"run-{secrets.token_hex(4)}"
    receiver.script(f"/{tag}-parent", ACCEPTED, Reply(500))
    family = await _parent_and_children(tenant, receiver, tag, max_attempts=1)

    ran = (await tenant.client.post(f"/v1/tasks/{family.parent['id']}/trigger")).json()
    await wait_status(tenant.client, ran["id"], "running")
    report = {"status": "succeeded", "attempt": 1, "result": {"file": "s3://b/k"}}
    ended = await tenant.client.post(f"/v1/flows/{ran['id']}/report", json=report)
    again = await tenant.client.post(f"/v1/flows/{ran['id']}/report", json=report)
    child = await _child_flow(tenant, family.ok, ran["scheduled_at_ms"])
    failed = (await tenant.client.post(f"/v1/tasks/{family.parent['id']}/trigger")).json()
    await wait_status(tenant.client, failed["id"], "dead")
    on_failure = await _child_flow(tenant, family.ko, failed["scheduled_at_ms"])

    assert ended.json()["status"] == "delivered" and again.json()["repeated"] is True
    assert child["payload"] == {"file": "s3://b/k"}
    assert [orjson.loads(r.body)["payload"] for r in receiver.for_path(f"/{tag}-ok")] == [{"file": "s3://b/k"}]
    shown = (await tenant.client.get(f"/v1/flows/{ran['id']}")).json()
    assert shown["child_flows"] == [child["id"]] and child["child_flows"] == []
    assert on_failure["payload"] is None and len(receiver.for_path(f"/{tag}-ko")) == 1
    flows = (await tenant.client.get(f"/v1/tasks/{family.ok['id']}/flows")).json()["items"]
    assert [f["id"] for f in flows] == [child["id"]]


async def test_an_ending_told_twice_or_from_two_nodes_triggers_each_child_once(
    tenant: Tenant, receiver: Receiver, api_node: RunningNode
) -> None:
    tag = f"twice-{secrets.token_hex(4)}"
    family = await _parent_and_children(tenant, receiver, tag)
    parent = (await tenant.client.post(f"/v1/tasks/{family.parent['id']}/trigger")).json()
    child = await _child_flow(tenant, family.ok, parent["scheduled_at_ms"])

    # the same ending told again (a retried write's hook, another node's): the child's key holds it
    trigger = ChildTrigger(tenant.app.id, (int(family.ok["id"]),), '{"again": true}')
    ending = FlowUpdate(int(family.parent["id"]), parent["scheduled_at_ms"], FlowStatus.DELIVERED, 1, None)
    told = replace(ending, children=trigger)
    await asyncio.gather(api_node.node.child_flows.ended(told), api_node.node.child_flows.ended(told))
    await asyncio.sleep(0.3)

    flows = (await tenant.client.get(f"/v1/tasks/{family.ok['id']}/flows")).json()["items"]
    assert [f["id"] for f in flows] == [child["id"]] and child["payload"] is None
    assert len(receiver.for_path(f"/{tag}-ok")) == 1


async def test_a_child_whose_trigger_was_lost_with_its_node_is_triggered_by_the_compensator(
    tenant: Tenant, receiver: Receiver, api_node: RunningNode
) -> None:
    # Given the node dies between writing the parent's ending and inserting its child (no trigger runs)
    tag = f"crash-{secrets.token_hex(4)}"
    receiver.script(f"/{tag}-parent", Reply(200, body=b'{"n": 1}', headers={"content-type": "application/json"}))
    family = await _parent_and_children(tenant, receiver, tag)
    child_flows = api_node.node.child_flows
    tasks = child_flows._tasks
    child_flows._tasks = None  # the trigger never runs, as on a node killed right after the write
    try:
        parent = (await tenant.client.post(f"/v1/tasks/{family.parent['id']}/trigger")).json()
        await wait_status(tenant.client, parent["id"], "delivered")
        await asyncio.sleep(0.5)
        lost = await tenant.client.get(f"/v1/flows/{family.ok['id']}-{parent['scheduled_at_ms']}")
    finally:
        child_flows._tasks = tasks

    # When the compensator's pass comes (a restarted node's, or another owner's)
    child = await _child_flow(tenant, family.ok, parent["scheduled_at_ms"])

    # Then the child runs once with the parent's result, and the parent no longer shows a pending trigger
    assert lost.status_code == 404
    assert child["payload"] == {"n": 1} and len(receiver.for_path(f"/{tag}-ok")) == 1
    shown = (await tenant.client.get(f"/v1/flows/{parent['id']}")).json()
    assert shown["next_attempt_at"] is None and shown["child_flows"] == [child["id"]]


def _json_reply(body: bytes) -> Reply:
    return Reply(200, body=body, headers={"content-type": "application/json"})


async def _flow_or_none(tenant: Tenant, task: dict[str, Any], at_ms: int) -> dict[str, Any] | None:
    answer = await tenant.client.get(f"/v1/flows/{task['id']}-{at_ms}")
    return answer.json() if answer.status_code == 200 else None


async def test_a_child_of_two_parents_runs_once_when_both_succeeded_with_both_results(
    tenant: Tenant, receiver: Receiver
) -> None:
    # Given a root whose success triggers A and B, and A and B both naming C on their success
    tag = f"join-{secrets.token_hex(4)}"
    receiver.script(f"/{tag}-a", _json_reply(b'{"a": 1}'))
    receiver.script(f"/{tag}-b", _json_reply(b'{"b": 2}'))
    c = await _task(tenant, name="c", callback={"url": receiver.url(f"/{tag}-c")})
    a = await _task(tenant, name="a", callback={"url": receiver.url(f"/{tag}-a")}, children={"on_success": [c["id"]]})
    b = await _task(tenant, name="b", callback={"url": receiver.url(f"/{tag}-b")}, children={"on_success": [c["id"]]})
    root = await _task(tenant, name="root", callback={"url": receiver.url(f"/{tag}-root")})
    await tenant.client.patch(f"/v1/tasks/{root['id']}", json={"children": {"on_success": [a["id"], b["id"]]}})

    # When the root runs
    ran = (await tenant.client.post(f"/v1/tasks/{root['id']}/trigger")).json()
    child = await _child_flow(tenant, c, ran["scheduled_at_ms"])
    await asyncio.sleep(0.3)

    # Then C ran once, at the root's instant, with each parent's result by its id, and shows its parent flows
    both = {a["id"]: {"a": 1}, b["id"]: {"b": 2}}
    assert child["payload"] == both
    assert [orjson.loads(r.body)["payload"] for r in receiver.for_path(f"/{tag}-c")] == [both]
    ordered = sorted((a["id"], b["id"]), key=int)
    assert child["parent_flows"] == [f"{parent}-{ran['scheduled_at_ms']}" for parent in ordered]
    a_flow = (await tenant.client.get(f"/v1/flows/{a['id']}-{ran['scheduled_at_ms']}")).json()
    assert a_flow["parent_flows"] == [ran["id"]] and a_flow["child_flows"] == [child["id"]]


async def test_a_joined_child_does_not_run_after_a_failed_parent_until_its_flow_is_redriven_and_delivered(
    tenant: Tenant, receiver: Receiver
) -> None:
    # Given A (one attempt, failing first) and B, both naming C on success; A names K on failure
    tag = f"join-dead-{secrets.token_hex(4)}"
    receiver.script(f"/{tag}-a", Reply(500), _json_reply(b'{"a": "late"}'))
    receiver.script(f"/{tag}-b", _json_reply(b'{"b": 2}'))
    c = await _task(tenant, name="c", callback={"url": receiver.url(f"/{tag}-c")})
    k = await _task(tenant, name="k", callback={"url": receiver.url(f"/{tag}-k")})
    a = await _task(
        tenant,
        name="a",
        callback={"url": receiver.url(f"/{tag}-a"), "max_attempts": 1},
        children={"on_success": [c["id"]], "on_failure": [k["id"]]},
    )
    b = await _task(tenant, name="b", callback={"url": receiver.url(f"/{tag}-b")}, children={"on_success": [c["id"]]})
    root = await _task(tenant, name="root", callback={"url": receiver.url(f"/{tag}-root")})
    await tenant.client.patch(f"/v1/tasks/{root['id']}", json={"children": {"on_success": [a["id"], b["id"]]}})

    # When the root runs: A dies, B succeeds
    at_ms = (await tenant.client.post(f"/v1/tasks/{root['id']}/trigger")).json()["scheduled_at_ms"]
    await wait_status(tenant.client, f"{a['id']}-{at_ms}", "dead")
    await wait_status(tenant.client, f"{b['id']}-{at_ms}", "delivered")
    failure_child = await _child_flow(tenant, k, at_ms)
    await asyncio.sleep(0.5)
    held = await _flow_or_none(tenant, c, at_ms)

    # Then C does not run at that instant; once A's flow is redriven and delivered, it does, once
    redriven = await tenant.client.post(f"/v1/flows/{a['id']}-{at_ms}/redrive")
    child = await _child_flow(tenant, c, at_ms)
    await asyncio.sleep(0.3)

    assert held is None and failure_child["payload"] is None and redriven.status_code == 200
    assert child["payload"] == {a["id"]: {"a": "late"}, b["id"]: {"b": 2}}
    assert len(receiver.for_path(f"/{tag}-c")) == 1


async def test_a_paused_parent_is_left_out_and_an_active_one_without_a_flow_holds_the_child(
    tenant: Tenant, receiver: Receiver
) -> None:
    # Given A naming C and D on success; P (paused) also names C, E (active, never at A's instant) names D
    tag = f"join-paused-{secrets.token_hex(4)}"
    receiver.script(f"/{tag}-a", _json_reply(b'{"a": 1}'))
    c = await _task(tenant, name="c", callback={"url": receiver.url(f"/{tag}-c")})
    d = await _task(tenant, name="d", callback={"url": receiver.url(f"/{tag}-d")})
    paused = await _task(tenant, name="p", children={"on_success": [c["id"]]})
    assert (await tenant.client.post(f"/v1/tasks/{paused['id']}/pause")).json()["status"] == "paused"
    await _task(tenant, name="e", children={"on_success": [d["id"]]})
    a = await _task(
        tenant, name="a", callback={"url": receiver.url(f"/{tag}-a")}, children={"on_success": [c["id"], d["id"]]}
    )

    # When A runs
    at_ms = (await tenant.client.post(f"/v1/tasks/{a['id']}/trigger")).json()["scheduled_at_ms"]
    child = await _child_flow(tenant, c, at_ms)
    await asyncio.sleep(0.3)

    # Then C runs with A's result alone (P left out); D waits for E's flow at that instant, which never comes
    assert child["payload"] == {a["id"]: {"a": 1}}
    assert await _flow_or_none(tenant, d, at_ms) is None and receiver.for_path(f"/{tag}-d") == []


async def test_a_task_shows_the_tasks_naming_it_as_their_child_as_they_are_now(tenant: Tenant) -> None:
    # Given C named by A on success and B on failure, and by D until D's edit dropped it, and by E, deleted
    c = await _task(tenant, name="c")
    a = await _task(tenant, name="a", children={"on_success": [c["id"]]})
    b = await _task(tenant, name="b", children={"on_failure": [c["id"]]})
    d = await _task(tenant, name="d", children={"on_success": [c["id"]]})
    e = await _task(tenant, name="e", children={"on_success": [c["id"]]})
    assert (await tenant.client.patch(f"/v1/tasks/{d['id']}", json={"children": None})).status_code == 200
    assert (await tenant.client.delete(f"/v1/tasks/{e['id']}")).status_code == 204

    # When C and A are read
    shown = (await tenant.client.get(f"/v1/tasks/{c['id']}")).json()
    root = (await tenant.client.get(f"/v1/tasks/{a['id']}")).json()
    listed = (await tenant.client.get("/v1/tasks")).json()["items"]

    # Then C's parents are A and B, per relation; A has none; a listing does not read them
    assert shown["parents"] == {"on_success": [a["id"]], "on_failure": [b["id"]]}
    assert root["parents"] is None
    assert all("parents" not in item for item in listed)


async def test_parents_are_read_only_a_create_or_edit_naming_them_is_refused(tenant: Tenant) -> None:
    c = await _task(tenant, name="c")

    created = await tenant.client.post("/v1/tasks", json=task_body(parents={"on_success": [c["id"]]}))
    edited = await tenant.client.patch(f"/v1/tasks/{c['id']}", json={"parents": None})

    assert created.status_code == 422 and created.json()["error"]["field"] == "parents"
    assert edited.status_code == 422 and edited.json()["error"]["field"] == "parents"
