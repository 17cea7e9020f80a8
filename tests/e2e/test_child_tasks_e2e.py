"""Child tasks on a real node process (README "Child tasks"): a scheduled parent whose receiver accepts a
run and reports it succeeded with a result; the node triggers the parent's success child at the parent's
instant, and the child's receiver gets the result as its payload, exactly once (a repeated final report
triggers nothing more). And a fan-in across a node killed -9 between its two parents' ends: the join is
in the store, so the next node runs the child once, with both results."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import orjson

from testkit.node_process import node_process
from tests.e2e.test_job_runs_e2e import ACCEPTED, NODE_SETTINGS, _app_client, _flow_until
from tests.receiver import Receiver, Reply


async def test_a_parents_result_reaches_its_child_as_payload_exactly_once(tmp_path: Path) -> None:
    async with Receiver() as receiver:
        receiver.script("/parent", ACCEPTED)
        with node_process(settings=NODE_SETTINGS, work_dir=tmp_path / "node") as node:
            async with await _app_client(node.base_url, node.admin_key) as client:
                child = {
                    "name": "load",
                    "schedule": {"kind": "delay", "delay_ms": 86_400_000},
                    "callback": {"url": receiver.url("/child")},
                }
                child_id = (await client.post("/v1/tasks", json=child)).json()["id"]
                parent = {
                    "name": "export",
                    "schedule": {"kind": "delay", "delay_ms": 200},
                    "callback": {"url": receiver.url("/parent"), "run_timeout_ms": 60_000},
                    "children": {"on_success": [child_id]},
                }
                created = await client.post("/v1/tasks", json=parent)
                [request] = await receiver.wait_for(1, path="/parent", timeout_s=15)
                await _flow_until(client, request.flow_id, "running")
                report = {"status": "succeeded", "attempt": request.attempt, "result": {"rows": 120}}
                ended = await client.post(f"/v1/flows/{request.flow_id}/report", json=report)
                again = await client.post(f"/v1/flows/{request.flow_id}/report", json=report)
                [sent] = await receiver.wait_for(1, path="/child", timeout_s=15)
                instant = request.flow_id.partition("-")[2]
                child_flow = await _flow_until(client, f"{child_id}-{instant}", "delivered")
                await asyncio.sleep(1.0)  # room for a second trigger, if there were one
                shown = (await client.get(f"/v1/tasks/{created.json()['id']}")).json()

    assert ended.json()["status"] == "delivered" and again.json()["repeated"] is True
    assert orjson.loads(sent.body)["payload"] == {"rows": 120} and sent.flow_id == child_flow["id"]
    assert child_flow["kind"] == "manual" and child_flow["payload"] == {"rows": 120}
    assert len(receiver.for_path("/child")) == 1
    assert shown["children"] == {"on_success": [child_id], "on_failure": []}


def _task(name: str, url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "schedule": {"kind": "delay", "delay_ms": 86_400_000}, "callback": {"url": url}, **extra}


async def test_a_joined_child_runs_once_with_both_results_though_the_node_died_between_its_parents(
    tmp_path: Path,
) -> None:
    data = f"sqlite+aiosqlite:///{tmp_path / 'data'}"
    async with Receiver(ACCEPTED) as receiver:
        receiver.script("/root", Reply(200))
        receiver.script("/c", Reply(200))
        # Given root -> a, b -> c, with a and b runs accepted by their receivers
        with node_process(storage_urls=[data], settings=NODE_SETTINGS, work_dir=tmp_path / "first") as first:
            async with await _app_client(first.base_url, first.admin_key) as client:
                api_key = client.headers["authorization"]
                c = (await client.post("/v1/tasks", json=_task("c", receiver.url("/c")))).json()["id"]
                ids = {}
                for name in ("a", "b"):
                    body = _task(name, receiver.url(f"/{name}"), children={"on_success": [c]})
                    body["callback"]["run_timeout_ms"] = 120_000
                    ids[name] = (await client.post("/v1/tasks", json=body)).json()["id"]
                root = _task("root", receiver.url("/root"), children={"on_success": [ids["a"], ids["b"]]})
                root["schedule"] = {"kind": "delay", "delay_ms": 100}
                assert (await client.post("/v1/tasks", json=root)).status_code == 201
                [a] = await receiver.wait_for(1, path="/a", timeout_s=15)
                [b] = await receiver.wait_for(1, path="/b", timeout_s=15)
                await _flow_until(client, b.flow_id, "running")
                # When a's run succeeds on the first node, which is then killed while b's run is live
                report = {"status": "succeeded", "attempt": a.attempt, "result": {"part": "a"}}
                assert (await client.post(f"/v1/flows/{a.flow_id}/report", json=report)).status_code == 200
                await asyncio.sleep(1.0)  # the first node's look at b: still running, so no child yet
                early = receiver.for_path("/c")
            os.kill(first.pid, signal.SIGKILL)

        # And b's run reports its success to the next node
        with node_process(storage_urls=[data], settings=NODE_SETTINGS, work_dir=tmp_path / "second") as second:
            headers = {"authorization": api_key}
            async with httpx.AsyncClient(base_url=second.base_url, headers=headers, timeout=10) as client:
                report = {"status": "succeeded", "attempt": b.attempt, "result": {"part": "b"}}
                assert (await client.post(f"/v1/flows/{b.flow_id}/report", json=report)).status_code == 200
                [sent] = await receiver.wait_for(1, path="/c", timeout_s=15)
                instant = a.flow_id.partition("-")[2]
                child = await _flow_until(client, f"{c}-{instant}", "delivered")
                await asyncio.sleep(1.5)  # room for a second trigger (the compensator's pass), if there were one

    # Then c ran once, at the root's instant, with both parents' results
    both = {ids["a"]: {"part": "a"}, ids["b"]: {"part": "b"}}
    assert early == [] and orjson.loads(sent.body)["payload"] == both and sent.flow_id == child["id"]
    assert len(receiver.for_path("/c")) == 1
    assert sorted(child["parent_flows"]) == sorted([a.flow_id, b.flow_id])
