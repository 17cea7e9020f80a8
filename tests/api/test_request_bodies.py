"""A request body is required in the OpenAPI document exactly when the API refuses a request without one
(issue 28: ``POST /v1/apps/{id}/rotate`` was documented with a required body and took none).

``rotate``'s fields all have defaults and the README says it "rotates its key and signing secret", so its
body is optional: no body rotates both, with the default grace.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _operations(api_node: RunningNode) -> list[tuple[str, str, dict[str, Any]]]:
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
    return [(method, path, op) for path, ops in paths.items() for method, op in ops.items() if "requestBody" in op]


async def test_a_documented_required_body_is_refused_when_missing(
    api_node: RunningNode, tenant: Tenant, admin: httpx.AsyncClient
) -> None:
    task = (await tenant.client.post("/v1/tasks", json=task_body())).json()
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    ids = {"task_id": task["id"], "flow_id": flow["id"], "app_id": tenant.app.id, "name": "nope", "pool": "p"}
    accepted = []
    for method, path, operation in await _operations(api_node):
        if not operation["requestBody"].get("required", False):
            continue
        concrete = re.sub(r"\{([^}]+)\}", lambda m: ids.get(m.group(1), "x"), path)
        client = admin if path.startswith(("/v1/apps", "/v1/shards")) else tenant.client
        response = await client.request(method.upper(), concrete, headers={"content-type": "application/json"})
        if response.status_code < 400:
            accepted.append(f"{method.upper()} {path}: {response.status_code}")
        elif response.status_code == 422:
            assert response.json()["error"].get("field") == "body", (path, response.text)
    assert not accepted, "documented as requiring a body, but served without one:\n" + "\n".join(accepted)


async def test_rotate_documents_its_body_as_optional_and_rotates_both_without_one(
    api_node: RunningNode, tenant: Tenant, admin: httpx.AsyncClient
) -> None:
    operations = {(m, p): op for m, p, op in await _operations(api_node)}
    assert operations[("post", "/v1/apps/{app_id}/rotate")]["requestBody"]["required"] is False
    before = (await admin.get(f"/v1/apps/{tenant.app.id}")).json()
    rotated = await admin.post(f"/v1/apps/{tenant.app.id}/rotate")
    assert rotated.status_code == 200, rotated.text
    answer = rotated.json()
    assert answer["api_key"] and answer["api_key"] != tenant.api_key
    assert len(answer["secrets"]) == len(before["secrets"]) + 1  # the new secret, the old one in its grace


async def _status_of_announced_body(base_url: str, method: str, path: str, authorization: str, length: int) -> int:
    """The status a node answers to a request announcing a JSON body of ``length`` bytes, none of it sent:
    a body over a cap is refused on its Content-Length alone (tjobs.api.bodies)."""
    url = httpx.URL(base_url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {url.host}\r\nauthorization: {authorization}\r\n"
            f"content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
        )
        writer.write(head.encode())
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        return int(status_line.split()[1])
    finally:
        writer.close()


async def test_every_route_with_a_body_answers_413_past_its_cap_and_documents_it(
    api_node: RunningNode, tenant: Tenant, admin: httpx.AsyncClient
) -> None:
    # Given a body announced one byte over the largest cap any route reads (api.max_batch_body_bytes, 16 MiB)
    # (a schemathesis case found POST /v1/dead-letters/redrive answering an undocumented 413 for 1,000 long ids)
    too_large = 16 * 1024 * 1024 + 1
    ids = {"task_id": "1", "flow_id": "1", "app_id": tenant.app.id, "name": "nope", "pool": "p"}
    undocumented, not_refused = [], []
    for method, path, operation in await _operations(api_node):
        concrete = re.sub(r"\{([^}]+)\}", lambda m: ids.get(m.group(1), "x"), path)
        client = admin if path.startswith(("/v1/apps", "/v1/shards")) else tenant.client
        authorization = client.headers["authorization"]
        status = await _status_of_announced_body(api_node.base_url, method.upper(), concrete, authorization, too_large)
        # Then each refuses it with 413 and says so in its documented answers
        if status != 413:
            not_refused.append(f"{method.upper()} {path}: {status}")
        if "413" not in operation["responses"]:
            undocumented.append(f"{method.upper()} {path}")
    assert not not_refused, "a body over every cap was not refused with 413:\n" + "\n".join(not_refused)
    assert not undocumented, "answers 413 but does not document it:\n" + "\n".join(undocumented)
