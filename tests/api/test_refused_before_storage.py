"""The record behind ``refused_before_storage`` (tests/api/conftest.py): on the in-memory twin each request is
noted with its answer and the store methods it called, so a refusal that read the store shows, and one made
before any store shows none. The marked tests run on the twin only because that record says so, per test."""

from __future__ import annotations

import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.mark.parametrize("api_storage", ["memory"], indirect=True)
async def test_the_twin_notes_each_requests_answer_and_store_calls(api_node: RunningNode, tenant: Tenant) -> None:
    calls = api_node.api.state.store_calls
    first = len(calls.requests)
    refused = await tenant.client.get("/v1/flows", params={"window": "2h"})  # judged before any store
    missing = await tenant.client.post("/v1/tasks/999/backfill", json={"from": 0, "to": 1})  # the task is read
    assert (refused.status_code, missing.status_code) == (422, 404), (refused.text, missing.text)
    assert calls.answers[first:] == [("GET", 422, "/v1/flows"), ("POST", 404, "/v1/tasks/999/backfill")]
    assert calls.requests[first:] == [[], ["get_task"]]
