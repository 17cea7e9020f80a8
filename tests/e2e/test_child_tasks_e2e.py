"""Child tasks on a real node process (README "Child tasks"): a scheduled parent whose receiver accepts a
run and reports it succeeded with a result; the node triggers the parent's success child at the parent's
instant, and the child's receiver gets the result as its payload, exactly once (a repeated final report
triggers nothing more)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from testkit.node_process import node_process
from tests.e2e.test_job_runs_e2e import ACCEPTED, NODE_SETTINGS, _app_client, _flow_until
from tests.receiver import Receiver


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
