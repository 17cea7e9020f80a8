"""The probes answer what docs/operations.md shows, and nothing else (issue 28: /healthz answered a shape
the docs did not show). ``/healthz`` (liveness): 200 ``{"status": "ok", "node": "<this node's id>"}``
while the process serves; ``/readyz`` (readiness): 200 ``{"status": "ready"}``, or 503 with a short
reason. Neither takes a key, and neither shows members, addresses or servers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from testkit import RunningNode

pytestmark = pytest.mark.asyncio(loop_scope="session")

OPERATIONS_DOC = Path(__file__).parents[2] / "docs" / "operations.md"


def _documented_answer(path: str) -> dict[str, str]:
    """The JSON answer docs/operations.md shows for ``GET <path>``: the first `{...}` after "`GET <path>` is"."""
    text = " ".join(OPERATIONS_DOC.read_text().split())
    found = re.search(re.escape(f"`GET {path}` is") + r"[^{]*`(\{[^`]*\})`", text)
    assert found, f"docs/operations.md shows no answer for GET {path}"
    return dict(json.loads(found.group(1).replace("<node id>", "NODE")))


async def test_healthz_answers_the_documented_shape(api_node: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:  # no key
        answer = await client.get("/healthz")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body == {"status": "ok", "node": api_node.node.node_id}
    assert {**body, "node": "NODE"} == _documented_answer("/healthz")


async def test_readyz_answers_the_documented_shape(api_node: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        answer = await client.get("/readyz")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "ready"} == _documented_answer("/readyz")


async def test_the_openapi_document_publishes_the_probe_shapes(api_node: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    assert set(schemas["Health"]["properties"]) == {"status", "node"}
    assert set(schemas["Health"]["required"]) == {"status", "node"}
    assert set(schemas["Ready"]["properties"]) == {"status"}
