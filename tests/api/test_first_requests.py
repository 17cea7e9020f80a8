"""A node's first requests cost what later ones do: the routes are built before the node serves.

FastAPI (0.16x) builds an included router's routes (their dependencies and pydantic fields) on the first
request that reaches that router. A request matched late (``/readyz`` is declared after eight routers) builds
them all: 100-200 ms of CPU on the event loop the node fires on. Issue 31: the first ``/readyz`` of
tests/integration/test_db_server_isolation.py, made during the database outage, held the healthy server's
fires of that instant 0.3-0.6 s at load 6-10 (the bound is 1 s; a full run once saw 1.29 s).
"""

from __future__ import annotations

from typing import Any

import httpx
import pydantic
import pytest

from testkit import run_node
from tjobs.settings import load_settings

# one path per router, the console's page, and one nothing matches (it passes every router)
PATHS = ("/readyz", "/healthz", "/v1/tasks", "/v1/flows", "/v1/apps", "/v1/cluster", "/console/", "/no/such/path")


async def test_the_first_request_to_each_route_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(None, storage={"urls": ["memory://"], "topology": "1x1x4"}, api={"admin_key": "tja_k"})
    async with run_node(settings) as running, httpx.AsyncClient(base_url=running.base_url) as client:
        # Given a node serving, and a count of the pydantic adapters built (FastAPI builds one per route field)
        built: list[object] = []
        adapter_init = pydantic.TypeAdapter.__init__

        def counting_init(self: pydantic.TypeAdapter[Any], *args: Any, **kwargs: Any) -> None:
            built.append(args[0] if args else kwargs.get("type"))
            adapter_init(self, *args, **kwargs)

        monkeypatch.setattr(pydantic.TypeAdapter, "__init__", counting_init)

        # When each route gets its first request
        statuses = [(await client.get(path)).status_code for path in PATHS]

    # Then none of them built a route on the node's loop
    assert statuses == [200, 200, 401, 401, 401, 401, 303, 404]
    assert built == [], f"{len(built)} adapters built while serving: routes were built on the first requests"
