"""API fixtures: one running node per storage backend, shared by the modules of an xdist worker, and clients.

The node runs API + scheduler on the session's event loop (``loop_scope="session"``) on the in-memory twin,
SQLite files (the embedded default) and a real MariaDB (marked ``mariadb``; its own database prefix, dropped
at the end of the session). Starting a node costs ~0.45 s of CPU (FastAPI builds ~650 routes): one per
storage per worker instead of one per storage per module. Every test makes its own apps (and names its own
users), so tests never see each other's tasks; on the shared node a test's apps are disabled after it, so
their tasks fire no more. A module that changes node-wide state or reads all of it (stops a loop; reads every
shard move, audit entry or app) sets ``OWN_API_NODE = True`` and gets a node on a fresh store of its own
(``api_storage``, one per backend per module); so does a module that overrides ``api_storage``, and one with
its own settings defines its own ``api_node`` on it.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import pytest_asyncio

from testkit import NodeParts, RunningNode, run_node
from testkit.databases import drop_databases
from testkit.sqlite_template import migrate_sqlite
from tests.e2e.conftest import FAST_SETTINGS
from tests.fuzz.store_calls import RequestScope, StoreCalls
from tests.receiver import Receiver
from tjobs.errors import NotFound
from tjobs.model import App
from tjobs.settings import StorageSettings, load_settings
from tjobs.stores import create_store

ADMIN_KEY = "tja_test_admin_key"


def _storage(backend: str, request: pytest.FixtureRequest, directory: Path) -> dict[str, Any]:
    if backend == "memory":
        return {"urls": ["memory://"], "topology": "2x2x4"}
    if backend == "sqlite":
        return {"urls": [f"sqlite+aiosqlite:///{directory / 'data'}"], "topology": "2x2x4"}
    url = request.getfixturevalue("mysql_url")
    return {"urls": [url], "topology": "2x2x4", "database_prefix": f"tjapi_{secrets.token_hex(3)}"}


def _drop(storage: dict[str, Any]) -> None:
    if "database_prefix" in storage:
        drop_databases(StorageSettings(**storage))


_BACKEND_OF: dict[int, str] = {}  # id of a store given by api_storage below -> its backend


@pytest.fixture(scope="module", params=["memory", "sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def api_storage(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A fresh store of each backend per module (a module's own node runs on it; the shared one is the default)."""
    storage = _storage(request.param, request, tmp_path_factory.mktemp("api"))
    _BACKEND_OF[id(storage)] = request.param
    yield storage
    del _BACKEND_OF[id(storage)]
    _drop(storage)


@contextlib.asynccontextmanager
async def _node_on(storage: dict[str, Any]) -> AsyncIterator[RunningNode]:
    settings = load_settings(None, storage=storage, api={"admin_key": ADMIN_KEY}, **FAST_SETTINGS)
    if not storage["urls"][0].startswith("memory:"):
        await migrate_sqlite(settings.storage)  # MariaDB: migrate(); a new SQLite directory: the template's copy
        async with run_node(settings) as handle:
            yield handle
        return
    # the twin's store calls are recorded per request (tests/fuzz/store_calls.py), for refused_before_storage
    calls = StoreCalls()
    async with run_node(settings, NodeParts(store=calls.watch(create_store(settings.storage)))) as handle:
        handle.api.add_middleware(RequestScope, calls=calls)  # before the first request builds the stack
        handle.api.state.store_calls = calls
        yield handle


# ---- refused before storage -------------------------------------------------------------------------------------
# A test whose every case is refused before any store is read or written (a 422 naming a field) proves the same
# on every backend: it runs on the in-memory twin only, and there each request it makes is recorded with the store
# methods it called (app directory reads aside, as in the bad-input table): every refusal must have called none.
# A refusal is any 4xx but a GET's 404 (a test's look-up that nothing was stored reads the store, as it should).

TestFunction = TypeVar("TestFunction", bound=Callable[..., Any])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "refused_before_storage: runs on the in-memory twin only; its refusals must call no store method"
    )


def refused_before_storage(test: TestFunction) -> TestFunction:
    """Run ``test`` on the in-memory twin only, checking that every refusal it gets called no store method."""
    on_the_twin = pytest.mark.parametrize("api_storage", ["memory"], indirect=True)(test)
    checked = pytest.mark.usefixtures("refusals_call_no_store")(on_the_twin)
    marked: TestFunction = pytest.mark.refused_before_storage(checked)
    return marked


@pytest.fixture
def refusals_call_no_store(api_node: RunningNode) -> Iterator[None]:
    calls: StoreCalls = api_node.api.state.store_calls
    lean = api_node.api.state.lean_paths
    first = len(calls.requests)
    lean.serve_creates = False  # every create through ASGI, where its store calls are recorded
    try:
        yield
    finally:
        lean.serve_creates = True
    answered = list(zip(calls.answers[first:], calls.requests[first:], strict=True))
    refusals = [(answer, made) for answer, made in answered if 400 <= answer[1] < 500 and answer[:2] != ("GET", 404)]
    assert refusals, f"refused_before_storage, but no request was refused: {[answer for answer, _ in answered]}"
    reached = [f"{method} {path} {status}: {', '.join(made)}" for (method, status, path), made in refusals if made]
    assert not reached, "refused_before_storage, but a refusal called the store: " + "; ".join(reached)


class SharedNodes:
    """The worker's nodes, one per backend, started when a module first asks and stopped with the session."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, stack: contextlib.AsyncExitStack) -> None:
        self._tmp = tmp_path_factory
        self._stack = stack
        self._nodes: dict[str, RunningNode] = {}

    async def of(self, backend: str, request: pytest.FixtureRequest) -> RunningNode:
        if backend not in self._nodes:
            storage = _storage(backend, request, self._tmp.mktemp("api-shared"))
            self._stack.callback(_drop, storage)  # after the node stops
            self._nodes[backend] = await self._stack.enter_async_context(_node_on(storage))
        return self._nodes[backend]

    def nodes(self) -> list[RunningNode]:
        return list(self._nodes.values())


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def shared_api_nodes(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SharedNodes]:
    async with contextlib.AsyncExitStack() as stack:
        yield SharedNodes(tmp_path_factory, stack)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def api_node(
    api_storage: dict[str, Any], request: pytest.FixtureRequest, shared_api_nodes: SharedNodes
) -> AsyncIterator[RunningNode]:
    """The worker's node of the module's backend; a node of the module's own on ``api_storage`` if the module
    overrides that fixture or sets ``OWN_API_NODE = True``."""
    backend = _BACKEND_OF.get(id(api_storage))
    if backend is not None and not getattr(request.module, "OWN_API_NODE", False):
        yield await shared_api_nodes.of(backend, request)
        return
    async with _node_on(api_storage) as handle:
        yield handle


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as started:
        yield started


@dataclass
class Tenant:
    app: App
    api_key: str
    client: httpx.AsyncClient


# The API tests prove answers, not their speed (benchmarks do): httpx's default 5 s read timeout failed a
# MariaDB flow search in a clean-clone run at load 9 (tests/api/test_search_api.py, ReadTimeout).
CLIENT_TIMEOUT_S = 30.0


@pytest_asyncio.fixture(loop_scope="session")
async def tenant_factory(api_node: RunningNode, shared_api_nodes: SharedNodes) -> AsyncIterator[Any]:
    clients: list[httpx.AsyncClient] = []
    made: list[str] = []
    shared = any(api_node is node for node in shared_api_nodes.nodes())

    async def make(name: str = "tenant", **body: Any) -> Tenant:
        app, key = await api_node.create_app(name, **body)
        made.append(app.id)
        client = httpx.AsyncClient(
            base_url=api_node.base_url, headers={"authorization": f"Bearer {key}"}, timeout=CLIENT_TIMEOUT_S
        )
        clients.append(client)
        return Tenant(app, key, client)

    yield make
    for client in clients:
        await client.aclose()
    if shared:  # the worker's node outlives the module: its apps' tasks fire no more (a receiver's port comes back)
        for app_id in made:
            with contextlib.suppress(NotFound):  # a test deleted it
                await api_node.node.app_service.set_disabled(app_id, True)


@pytest_asyncio.fixture(loop_scope="session")
async def tenant(tenant_factory: Any) -> Tenant:
    made: Tenant = await tenant_factory()
    return made


@pytest_asyncio.fixture(loop_scope="session")
async def admin(api_node: RunningNode) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=api_node.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=CLIENT_TIMEOUT_S
    ) as client:
        yield client


def task_body(receiver: Receiver | None = None, **extra: Any) -> dict[str, Any]:
    url = receiver.url("/hook") if receiver is not None else "http://127.0.0.1:9/hook"
    body: dict[str, Any] = {
        "name": "t",
        "schedule": {"kind": "delay", "delay_ms": 3_600_000},
        "callback": {"url": url},
        "payload": {"n": 1},
    }
    body.update(extra)
    return body
