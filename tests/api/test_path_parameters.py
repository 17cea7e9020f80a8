"""Path parameters are published with the form the API accepts, and an id outside it is a 404 (issue 28).

Every ``{…}`` in a path is published in the OpenAPI document with its pattern and length, never as a bare
string; an empty id is a 404 of its own, never a redirect to the collection (``GET /v1/flows/`` used to be
redirected to the flow search).
"""

from __future__ import annotations

import re

import httpx
import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant

pytestmark = pytest.mark.asyncio(loop_scope="session")

_PARAM = re.compile(r"\{[^}]+\}")


async def _documented(api_node: RunningNode) -> dict[str, dict[str, object]]:
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        return dict((await client.get("/openapi.json")).json()["paths"])


async def test_every_path_parameter_is_published_with_its_pattern_and_length(api_node: RunningNode) -> None:
    bare = []
    for path, operations in (await _documented(api_node)).items():
        for method, operation in operations.items():
            assert isinstance(operation, dict)
            for parameter in operation.get("parameters", []):
                if parameter["in"] != "path":
                    continue
                schema = parameter["schema"]
                if not (schema.get("pattern") and schema.get("maxLength") and schema.get("minLength", 0) >= 1):
                    bare.append(f"{method.upper()} {path} {parameter['name']}: {schema}")
    assert not bare, "\n".join(bare)


async def test_the_published_patterns_admit_the_ids_the_api_hands_out(api_node: RunningNode, tenant: Tenant) -> None:
    made = await tenant.client.post(
        "/v1/tasks",
        json={
            "name": "t",
            "schedule": {"kind": "delay", "delay_ms": 3_600_000},
            "callback": {"url": "http://127.0.0.1:9/h"},
        },
    )
    assert made.status_code == 201, made.text
    flow = await tenant.client.post(f"/v1/tasks/{made.json()['id']}/trigger")
    assert flow.status_code == 201, flow.text
    examples = {"task_id": made.json()["id"], "flow_id": flow.json()["id"], "app_id": tenant.app.id}
    paths = await _documented(api_node)
    for name, value in examples.items():
        patterns = {
            p["schema"]["pattern"]
            for operations in paths.values()
            for operation in operations.values()
            if isinstance(operation, dict)
            for p in operation.get("parameters", [])
            if p["in"] == "path" and p["name"] == name
        }
        assert patterns, name
        for pattern in patterns:
            assert re.fullmatch(pattern, value), (name, pattern, value)


async def test_an_empty_id_is_a_404_never_the_collection(
    api_node: RunningNode, tenant: Tenant, admin: httpx.AsyncClient
) -> None:
    for path, operations in (await _documented(api_node)).items():
        if not _PARAM.search(path):
            continue
        empty = _PARAM.sub("", path)
        for method in operations:
            client = admin if path.startswith(("/v1/apps/", "/v1/shards")) else tenant.client
            response = await client.request(
                method.upper(), empty, json={} if method in ("post", "patch", "put") else None
            )
            assert response.status_code == 404, (
                f"{method.upper()} {empty}: {response.status_code} {response.text[:200]}"
            )
            assert response.json()["error"]["code"] == "not_found", response.text
