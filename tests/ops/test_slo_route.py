"""GET /v1/slo: the calling app's p99 lateness per window and reach, scoped to the node."""

from __future__ import annotations

import httpx

from testkit import run_node
from tjobs.settings import load_settings

ADMIN_KEY = "tja_ops_slo_admin"


async def test_slo_reports_p99_lateness_and_reach_against_the_objectives() -> None:
    settings = load_settings(None, storage={"urls": ["memory://"], "topology": "2x2x4"}, api={"admin_key": ADMIN_KEY})
    async with run_node(settings) as running:
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}
        ) as admin:
            created = (await admin.post("/v1/apps", json={"name": "slo"})).json()
        app_id, api_key = created["id"], created["api_key"]
        # Given 9,999 delivered flows and 2 dead ones, and fires 2 s late, on this node
        for _ in range(9_999):
            running.node.slo.observe_outcome(app_id, "delivered")
        running.node.slo.observe_outcome(app_id, "dead")
        running.node.slo.observe_outcome(app_id, "dead")
        running.node.slo.observe_fire(app_id, 2.0)
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {api_key}"}
        ) as client:
            response = await client.get("/v1/slo")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["scope"] == "node"
    assert body["reach"]["delivered"] == 9_999 and body["reach"]["dead"] == 2
    assert body["reach"]["met"] is False
    assert body["fire_lateness"]["1m"]["fires"] == 1
    assert body["fire_lateness"]["1m"]["met"] is False
