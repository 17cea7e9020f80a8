"""Dead is counted once per flow: a dead letter re-driven that dies again is still one dead flow in the
service levels (issue 27: a redriven flow that died again counted twice as dead)."""

from __future__ import annotations

from typing import Any

import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_tenancy import wait_status
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def cluster_reach(node: RunningNode, tenant: Tenant) -> dict[str, Any]:
    await node.node.slo_recorder.run_once()  # this node's minutes into the store now, not in a minute
    reach: dict[str, Any] = (await tenant.client.get("/v1/slo", params={"window": "5m"})).json()["reach"]
    return reach


async def test_a_redriven_flow_that_dies_again_is_one_dead_flow(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    path = "/dead-twice"
    receiver.script(path, Reply(400), Reply(400))  # permanent failures: dead at once, twice; then 200
    task = (await tenant.client.post("/v1/tasks", json=task_body(callback={"url": receiver.url(path)}))).json()
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    await wait_status(tenant.client, flow["id"], "dead")
    assert (await cluster_reach(api_node, tenant))["dead"] == 1

    # When the dead letter is re-driven and dies again
    assert (await tenant.client.post(f"/v1/flows/{flow['id']}/redrive")).status_code == 200
    dead = await wait_status(tenant.client, flow["id"], "dead")
    assert dead["attempts"] == 2 and len(receiver.for_flow(flow["id"])) == 2

    # Then it is still one dead flow, in the cluster's figures and in the node's
    assert (await cluster_reach(api_node, tenant))["dead"] == 1
    node_view = (await tenant.client.get("/v1/slo")).json()
    assert node_view["reach"]["dead"] == 1, node_view

    # And delivered at the third try, it does not count as a delivery on top of its death
    assert (await tenant.client.post(f"/v1/flows/{flow['id']}/redrive")).status_code == 200
    await wait_status(tenant.client, flow["id"], "delivered")
    assert await cluster_reach(api_node, tenant) == {"delivered": 0, "dead": 1, "ratio": 0.0, "met": False}
