"""Single creates served below ASGI (tjobs.api.lean_creates): the same answers as the app's route.

Each request is sent as is (answered by the HTTP protocol when it can) and with an empty query string
(which always goes through ASGI, and which the route ignores): status, body and headers must agree.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_pools_api import _exchange

pytestmark = pytest.mark.asyncio(loop_scope="session")

Tenants = Callable[..., Awaitable[Tenant]]


def _post(path: str, key: str | None, body: bytes, *extra: str, content_type: str = "application/json") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "host: tjobs", f"content-length: {len(body)}", *extra]
    if content_type:
        lines.append(f"content-type: {content_type}")
    if key is not None:
        lines.append(f"authorization: Bearer {key}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _both(node: RunningNode, key: str | None, body: bytes, *extra: str, **options: Any) -> tuple[Any, Any, int]:
    """The answer through the lean path and through ASGI, and how many creates the lean path served."""
    lean = node.api.state.lean_paths
    before = lean.creates
    [direct] = await _exchange(node.base_url, _post("/v1/tasks", key, body, *extra, **options))
    served = lean.creates - before
    [asgi] = await _exchange(node.base_url, _post("/v1/tasks?", key, body, *extra, **options))
    assert lean.creates - before == served, "a query string goes through ASGI"
    return direct, asgi, served


def _same(direct: Any, asgi: Any) -> None:
    (status, headers, body), (asgi_status, asgi_headers, asgi_body) = direct, asgi
    assert (status, body) == (asgi_status, asgi_body)
    headers.pop("date"), asgi_headers.pop("date")
    if headers["x-request-id"] != asgi_headers["x-request-id"]:  # fresh ones: 32 hex digits each
        assert len(headers.pop("x-request-id")) == len(asgi_headers.pop("x-request-id")) == 32
    assert headers == asgi_headers


async def test_a_create_served_below_asgi_answers_exactly_as_the_app(
    api_node: RunningNode, tenant_factory: Tenants
) -> None:
    owner = await tenant_factory("lean-creates")
    assert (await owner.client.get("/v1/tasks")).status_code == 200  # the key is known to the node now

    # a new task: 201 from the lean path; the same key again is the existing task, 200, from both
    body = json.dumps(task_body(key="lean-1")).encode()
    [(status, headers, created)] = await _exchange(api_node.base_url, _post("/v1/tasks", owner.api_key, body))
    assert status == 201 and headers["content-type"] == "application/json"
    assert (await owner.client.get(f"/v1/tasks/{created['id']}")).json()["key"] == "lean-1"
    direct, asgi, served = await _both(api_node, owner.api_key, body, "x-request-id: rid-1")
    assert served == 1 and direct[0] == 200 and direct[2] == created
    _same(direct, asgi)

    # bad input: the same 4xx naming the same field
    cases: list[tuple[bytes, str]] = [
        (json.dumps(task_body(colour="red")).encode(), "colour"),  # unknown field
        (json.dumps({k: v for k, v in task_body().items() if k != "name"}).encode(), "name"),  # missing
        (b'{"name": ', "body"),  # not JSON
        (b"[" * 200 + b"]" * 200, "body"),  # too deep
        (json.dumps(task_body(payload={"n": 2**70})).encode(), "payload.n"),  # beyond 64 bits
        (json.dumps(task_body(callback={"url": "http://169.254.169.254/x"})).encode(), "callback.url"),  # SSRF
        (json.dumps(task_body(schedule={"kind": "at", "at_ms": 1})).encode(), "schedule"),  # in the past
    ]
    for bad, field in cases:
        direct, asgi, served = await _both(api_node, owner.api_key, bad, "x-request-id: rid-2")
        assert served == 1 and direct[0] == 422 and direct[2]["error"]["field"].startswith(field), direct
        _same(direct, asgi)


async def test_a_create_the_lean_path_must_not_answer_goes_through_the_app(
    api_node: RunningNode, tenant_factory: Tenants
) -> None:
    owner = await tenant_factory("lean-creates-not")
    assert (await owner.client.get("/v1/tasks")).status_code == 200
    body = json.dumps(task_body()).encode()
    lean = api_node.api.state.lean_paths
    before = lean.creates
    not_lean = [
        _post("/v1/tasks", None, body),  # no key: 401
        _post("/v1/tasks", "tjk_not-a-key", body),  # unknown key: 401
        _post("/v1/tasks", owner.api_key, body, content_type="text/plain"),  # 415
        _post("/v1/tasks", owner.api_key, body, content_type=""),  # no content type
        _post("/v1/tasks", owner.api_key, body, "content-type: application/json"),  # two content types
        _post("/v1/tasks", owner.api_key, body, "connection: close"),
        _post("/v1/tasks", owner.api_key, body, "x-forwarded-for: 10.0.0.1"),
        _post("/v1/tasks", owner.api_key, body + b" " * 70_000),  # over 64 KiB (spaces)
    ]
    statuses = []
    for raw in not_lean:
        [(status, _, _)] = await _exchange(api_node.base_url, raw)
        statuses.append(status)
    assert statuses == [401, 401, 415, 415, 201, 201, 201, 201] and lean.creates == before

    # creates pipelined on one connection are answered in order (the second through ASGI)
    pipelined = b"".join(_post("/v1/tasks", owner.api_key, body, f"x-request-id: p{i}") for i in range(3))
    answers = await _exchange(api_node.base_url, pipelined, answers=3)
    assert [(status, headers["x-request-id"]) for status, headers, _ in answers] == [
        (201, "p0"),
        (201, "p1"),
        (201, "p2"),
    ]


async def test_a_create_over_the_apps_create_rate_is_refused_the_same_way(
    api_node: RunningNode, tenant_factory: Tenants
) -> None:
    owner = await tenant_factory("lean-creates-rate", create_rate_limit_per_s=1)
    assert (await owner.client.get("/v1/tasks")).status_code == 200
    body = json.dumps(task_body()).encode()
    answers = [await _both(api_node, owner.api_key, body, "x-request-id: rid-3") for _ in range(2)]
    direct, asgi, served = answers[-1]
    assert served == 1 and direct[0] == asgi[0] == 429 and "retry-after" in direct[1]
    _same(direct, asgi)
