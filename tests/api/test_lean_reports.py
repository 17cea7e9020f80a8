"""Run reports served below ASGI (tjobs.api.lean_reports): the same answers as the app's route.

Each request is sent as is (answered by the HTTP protocol when it can) and with an empty query string
(which always goes through ASGI, and which the route ignores): status, body and headers must agree, on
every backend (memory, SQLite, MariaDB). A report that changes the run is compared on two runs in the
same state, their own ids and instants set aside.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit import RunningNode
from tests.api.conftest import Tenant
from tests.api.test_job_runs_api import _running_flow
from tests.api.test_lean_creates import _post, _same
from tests.api.test_pools_api import _exchange
from tests.receiver import Receiver

pytestmark = pytest.mark.asyncio(loop_scope="session")

Tenants = Callable[..., Awaitable[Tenant]]
TEMPLATE = "/v1/flows/{flow_id}/report"


def _report(flow_id: str) -> str:
    return f"/v1/flows/{flow_id}/report"


async def _both(node: RunningNode, path: str, key: str | None, body: bytes, *extra: str, **options: Any) -> Any:
    """The answer through the lean path and through ASGI (the same request), and how many the lean path served."""
    lean = node.api.state.lean_paths
    before = lean.reports
    [direct] = await _exchange(node.base_url, _post(path, key, body, *extra, **options))
    served = lean.reports - before
    [asgi] = await _exchange(node.base_url, _post(path + "?", key, body, *extra, **options))
    assert lean.reports - before == served, "a query string goes through ASGI"
    return direct, asgi, served


def _without_instants(answer: Any, flow_id: str) -> Any:
    """An answer with its flow's own id and its run's instants set aside (two runs compared)."""
    status, headers, body = answer
    body = json.loads(json.dumps(body).replace(flow_id, "<flow>"))
    for name in ("started_at", "deadline", "reported_at", "ended_at"):
        body["run"][name] = body["run"][name] is not None
    return status, headers, body


async def test_a_report_served_below_asgi_answers_exactly_as_the_app(
    api_node: RunningNode, tenant_factory: Tenants, receiver: Receiver
) -> None:
    owner, other = await tenant_factory("lean-reports"), await tenant_factory("lean-reports-other")
    assert (await other.client.get("/v1/tasks")).status_code == 200  # its key is known to the node now
    first = await _running_flow(owner, receiver, "/lean-r1", run_timeout_ms=600_000)
    second = await _running_flow(owner, receiver, "/lean-r2", run_timeout_ms=600_000)
    key, one, two = owner.api_key, first["id"], second["id"]

    # progress: the same run twice; only the instant of the report differs
    body = b'{"status": "running", "attempt": 1, "progress": 50, "message": "half"}'
    direct, asgi, served = await _both(api_node, _report(one), key, body, "x-request-id: rr-1")
    assert served == 1 and direct[0] == 200 and direct[2]["run"]["progress"] == 50, direct
    _same(_without_instants(direct, one), _without_instants(asgi, one))
    [(status, _, _)] = await _exchange(api_node.base_url, _post(_report(two) + "?", key, body))
    assert status == 200  # the second run in the same state

    # the end, with a result: one run through each path
    body = b'{"status": "succeeded", "attempt": 1, "result": {"rows": 7, "big": 1E5}}'
    lean = api_node.api.state.lean_paths
    before = lean.reports
    [direct] = await _exchange(api_node.base_url, _post(_report(one), key, body, "x-request-id: rr-2"))
    [asgi] = await _exchange(api_node.base_url, _post(_report(two) + "?", key, body, "x-request-id: rr-2"))
    assert lean.reports == before + 1 and direct[0] == 200 and direct[2]["status"] == "delivered", direct
    assert direct[2]["run"]["result"] == {"rows": 7, "big": 100000.0} and direct[2]["repeated"] is False
    _same(_without_instants(direct, one), _without_instants(asgi, two))

    cases: list[tuple[str, str | None, bytes, int]] = [
        (_report(one), key, body, 200),  # the same end again: repeated
        (_report(one), key, b'{"status": "failed", "attempt": 1}', 409),  # ended: run_finished
        (_report(one), key, b'{"status": "running", "attempt": 2}', 409),  # another attempt
        (_report("1-2"), key, body, 404),  # unknown flow
        (_report(one), other.api_key, body, 404),  # another app's flow
        (_report(one), key, b'{"status": ', 422),  # not JSON
        (_report(one), key, b"[" * 200 + b"]" * 200, 422),  # too deep
        (_report(one), key, b'{"status": "finished"}', 422),  # a bad field
        (_report(one), key, b'{"status": "succeeded", "extra": 1}', 422),  # an unknown field
        (_report(one), key, b'{"status": "running", "result": 1}', 422),  # a result with progress
        (_report(one), key, b'{"status": "succeeded", "attempt": 99999999999999999999999}', 422),  # past 64 bits
        # a result over runs.max_result_bytes (65,536 as JSON) in a body under it: 1E5 is 100000.0
        (_report(one), key, b'{"status": "succeeded", "result": [' + b",".join([b"1E5"] * 9000) + b"]}", 413),
        (_report(one), key, b"", 422),  # no body
    ]
    for path, case_key, case_body, status in cases:
        direct, asgi, served = await _both(api_node, path, case_key, case_body, "x-request-id: rr-3")
        assert served == 1 and direct[0] == status, (path, case_body[:60], direct)
        _same(direct, asgi)
    shown = (await owner.client.get(f"/v1/flows/{one}")).json()
    assert shown["status"] == "delivered" and shown["run"]["result"] == {"rows": 7, "big": 100000.0}


async def test_a_report_the_lean_path_must_not_answer_goes_through_the_app(
    api_node: RunningNode, tenant_factory: Tenants, receiver: Receiver
) -> None:
    owner = await tenant_factory("lean-reports-not")
    flow = await _running_flow(owner, receiver, "/lean-r3", run_timeout_ms=600_000)
    key, path = owner.api_key, _report(flow["id"])
    body = b'{"status": "running", "progress": 10}'
    lean = api_node.api.state.lean_paths
    before = lean.reports
    limit = api_node.node.settings.api.max_body_bytes
    not_lean = [
        (_post(path, None, body), 401),  # no key
        (_post(path, "tjk_not-a-key", body), 401),  # unknown key
        (_post(path, key, body, content_type="text/plain"), 415),
        (_post(path, key, body, content_type=""), 415),  # no content type
        (_post(path, key, body, "content-type: application/json"), 200),  # two content types
        (_post(path, key, body, "connection: close"), 200),
        (_post(path, key, body, "x-forwarded-for: 10.0.0.1"), 200),
        (_post(path, key, body + b" " * 70_000), 200),  # over 64 KiB (spaces)
        (_post("/v1/flows/abc/report", key, body), 404),  # not a flow id
        (_post("/v1/flows/1%2D2/report", key, body), 404),  # a percent-escape
        (_post(path, key, body).replace(f"content-length: {len(body)}".encode(), b"content-length: 99999999"), 413),
    ]
    assert limit < 99_999_999
    statuses = []
    for raw, _ in not_lean:
        [(status, _, _)] = await _exchange(api_node.base_url, raw)
        statuses.append(status)
    assert statuses == [status for _, status in not_lean] and lean.reports == before
    lean.serve_reports = False  # a harness that watches requests at the ASGI layer
    try:
        [(status, _, _)] = await _exchange(api_node.base_url, _post(path, key, body))
    finally:
        lean.serve_reports = True
    assert status == 200 and lean.reports == before

    # reports pipelined on one connection are answered in order (the later ones through ASGI)
    pipelined = b"".join(_post(path, key, body, f"x-request-id: p{i}") for i in range(3))
    answers = await _exchange(api_node.base_url, pipelined, answers=3)
    assert [(status, headers["x-request-id"]) for status, headers, _ in answers] == [
        (200, "p0"),
        (200, "p1"),
        (200, "p2"),
    ]


async def test_a_report_over_the_apps_request_rate_is_refused_the_same_way(
    api_node: RunningNode, tenant_factory: Tenants, receiver: Receiver
) -> None:
    owner = await tenant_factory("lean-reports-rate")
    flow = await _running_flow(owner, receiver, "/lean-r4", run_timeout_ms=600_000)
    slow = await tenant_factory("lean-reports-slow", api_rate_limit_per_s=1)
    body = b'{"status": "running", "progress": 10}'
    answers = [await _both(api_node, _report(flow["id"]), slow.api_key, body, "x-request-id: rr-4") for _ in range(3)]
    refused = [(direct, asgi) for direct, asgi, _ in answers if direct[0] == 429]
    assert refused, answers
    for direct, asgi in refused:
        assert asgi[0] == 429 and "retry-after" in direct[1] and direct[2]["error"]["code"] == "rate_limited"
        for headers in (direct[1], asgi[1]):  # the wait left differs by the time between the two
            headers.pop("retry-after"), headers.pop("date")
        assert direct == asgi  # the admission's 429 (answered before a request id is given)


async def test_a_lean_report_is_counted_under_the_routes_template(
    api_node: RunningNode, tenant_factory: Tenants, receiver: Receiver, admin: httpx.AsyncClient
) -> None:
    owner = await tenant_factory("lean-reports-metrics")
    flow = await _running_flow(owner, receiver, "/lean-r5", run_timeout_ms=600_000)

    def counted(scraped: str) -> dict[tuple[str, str], float]:
        return {
            (s.labels["method"], s.labels["status_class"]): s.value
            for family in text_string_to_metric_families(scraped)
            if family.name == "tjobs_api_requests"
            for s in family.samples
            if s.name == "tjobs_api_requests_total" and s.labels["route"] == TEMPLATE
        }

    before = counted((await admin.get("/metrics")).text)
    lean = api_node.api.state.lean_paths
    served = lean.reports
    ok = await owner.client.post(_report(flow["id"]), json={"status": "running"}, headers={"x-request-id": "m-1"})
    missing = await owner.client.post(_report("1-2"), json={"status": "running"})
    after = counted((await admin.get("/metrics")).text)
    assert (ok.status_code, ok.headers["x-request-id"], missing.status_code) == (200, "m-1", 404)
    assert lean.reports == served + 2
    assert after.get(("POST", "2xx"), 0) == before.get(("POST", "2xx"), 0) + 1
    assert after.get(("POST", "4xx"), 0) == before.get(("POST", "4xx"), 0) + 1
