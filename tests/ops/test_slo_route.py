"""GET /v1/slo: the calling app's p99 first-attempt delivery lateness per window (commit lateness beside
it) and reach, scoped to the node."""

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
        running.node.slo.observe_fire(app_id, 0.02)  # committed 20 ms late ...
        running.node.slo.observe_first_attempt(app_id, 1.9, 2.0)  # ... answered 2 s late
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {api_key}"}
        ) as client:
            response = await client.get("/v1/slo")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["scope"] == "node"
    assert body["reach"]["delivered"] == 9_999 and body["reach"]["dead"] == 2
    assert body["reach"]["met"] is False
    assert body["delivery_lateness"]["1m"]["attempts"] == 1
    assert body["delivery_lateness"]["1m"]["p99_s"] == 2.5  # the bucket holding 2 s ...
    assert body["delivery_lateness"]["1m"]["p99_label"] == "≤ 2.5 s"  # ... labelled as a bucket
    assert body["delivery_lateness"]["1m"]["met"] is False  # the objective holds to the answer ...
    commit = {"fires": 1, "p99_s": 0.025, "p99_above_s": 0.01, "p99_label": "≤ 25 ms"}
    assert body["commit_lateness"]["1m"] == commit  # ... not to the commit, shown beside it
