"""Every case of the bad-input table (:mod:`tests.fuzz.cases`) is refused: a 4xx, never a 5xx, never
accepted, and a 422 names the field.

Every case runs on the in-memory twin: that proves the validation. The cases whose input gets past it to a
store (``Case.reaches_storage``) run on SQLite and MariaDB too, where an id beyond 64 bits used to overflow
the driver: ids and cursors must be parsed into their range before any store sees them. Which cases those
are is measured, not guessed: on the twin each request's store calls are recorded
(:mod:`tests.fuzz.store_calls`); a case that reached the store without the tag fails, so a new one cannot
silently skip the SQL stores, and a tagged case that did not reach it fails too. The record also shows
what the SQL runs could only suggest: no id or cursor case reaches a store at all; the ones that do are
updates (read before their values are judged), lookups of a well-formed name that is not there, a
duplicate name, and a plan the stored shard map refuses.

Each table is checked inside one test (the twin's one per API resource, :mod:`tests.case_table`), every case
with its own assertions; a failure names every failing case and why.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from testkit import NodeParts, run_node
from testkit.databases import drop_databases
from testkit.sqlite_template import migrate_sqlite
from tests.case_table import check_every
from tests.fuzz.cases import (
    SEEDED_TARGET,
    SERVER0,
    TARGET_ALLOWED_ADDRESSES,
    Case,
    all_cases,
    render,
    valid_target,
    valid_task,
)
from tests.fuzz.nul_cases import nul_cases
from tests.fuzz.store_calls import RequestScope, StoreCalls
from tjobs.settings import StorageSettings, load_settings
from tjobs.stores import create_store

pytestmark = pytest.mark.asyncio(loop_scope="module")

ADMIN_KEY = "tja_fuzz_admin_key_0123456789"
CASES = [*all_cases(), *nul_cases()]
REACHING_STORAGE = [case for case in CASES if case.reaches_storage]


@dataclass
class Target:
    client: httpx.AsyncClient
    admin: httpx.AsyncClient
    task_id: str
    app_id: str
    server0: str  # the shard map's first server, which a plan's server list must start with
    lean: Any  # the node's lean paths (tjobs.api.lean_protocol.LeanPaths)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def sql_storage(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The SQL stores, where an id beyond 64 bits used to overflow the driver."""
    if request.param == "sqlite":
        yield {"urls": [f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('fuzz') / 'data'}"], "topology": "1x2x4"}
    else:
        url = request.getfixturevalue("mysql_url")
        prefix = f"tjfuzz_{secrets.token_hex(3)}"
        yield {"urls": [url], "topology": "1x2x4", "database_prefix": prefix}
        drop_databases(StorageSettings(urls=[url], topology="1x2x4", database_prefix=prefix))


@pytest.fixture(scope="module")
def twin_calls() -> StoreCalls:
    return StoreCalls()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def twin(twin_calls: StoreCalls) -> AsyncIterator[Target]:
    """A node on the in-memory twin, whose store calls are recorded per request."""
    async with serve({"urls": ["memory://"], "topology": "1x2x4"}, twin_calls) as target:
        yield target


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sql_node(sql_storage: dict[str, Any]) -> AsyncIterator[Target]:
    async with serve(sql_storage) as target:
        yield target


@contextlib.asynccontextmanager
async def serve(storage: dict[str, Any], calls: StoreCalls | None = None) -> AsyncIterator[Target]:
    settings = load_settings(
        None,
        storage=storage,
        api={"admin_key": ADMIN_KEY},
        allow_loopback_callbacks=True,
        targets={"allowed_addresses": TARGET_ALLOWED_ADDRESSES},
        rate_limits={"enabled": False},  # a 429 would answer before the input is judged (limits: tests/api)
    )
    if not storage["urls"][0].startswith("memory:"):
        await migrate_sqlite(settings.storage)
    parts = None if calls is None else NodeParts(store=calls.watch(create_store(settings.storage)))
    async with run_node(settings, parts) as running:
        if calls is not None:
            running.api.add_middleware(RequestScope, calls=calls)  # before the first request builds the stack
            # store calls are recorded per request at the ASGI layer: no create is answered below it here
            # (tests/api/test_lean_creates.py holds the lean path to the app's answers on these cases)
            running.api.state.lean_paths.serve_creates = False
        app, key = await running.create_app("fuzz")
        async with (
            httpx.AsyncClient(
                base_url=running.base_url, timeout=30, headers={"authorization": f"Bearer {key}"}
            ) as client,
            httpx.AsyncClient(
                base_url=running.base_url, timeout=30, headers={"authorization": f"Bearer {ADMIN_KEY}"}
            ) as admin,
        ):
            seeded = await client.post("/v1/tasks", json=valid_task())
            assert seeded.status_code == 201, seeded.text
            hook = await client.post("/v1/targets", json=valid_target(name=SEEDED_TARGET))
            assert hook.status_code == 201, hook.text
            shards = await admin.get("/v1/shards")
            assert shards.status_code == 200, shards.text
            server0 = shards.json()["servers"][0]["server"]
            yield Target(client, admin, seeded.json()["id"], app.id, server0, running.api.state.lean_paths)


async def test_the_table_holds_at_least_300_cases() -> None:
    assert len(CASES) >= 300, len(CASES)


async def send(target: Target, case: Case) -> httpx.Response:
    path = case.path.replace("{task}", target.task_id).replace("{app}", target.app_id)
    headers = {k: v for k, v in case.headers.items() if v}
    content = case.content
    if content is None and case.body is not None:
        content = render(case.body).replace(SERVER0, target.server0).encode()
        headers.setdefault("content-type", "application/json")
    client = target.admin if case.admin else target.client
    return await client.request(case.method, path, content=content, headers=headers)


def assert_refused(case: Case, response: httpx.Response) -> None:
    status = response.status_code
    assert status < 500, f"{case.name}: {status} {response.text[:300]}"
    assert status != 429, f"{case.name}: rate limited, so the input was never judged: {response.text[:300]}"
    if case.batch_item and status == 200:
        answer = response.json()
        assert answer["failed"] == 1 and 400 <= answer["items"][0]["status"] < 500, response.text[:300]
        return
    if case.path.endswith("/dead-letters/redrive") and status == 200:
        assert response.json()["failed"] == len(case.body["flow_ids"]), response.text[:300]
        return
    if case.statuses:
        assert status in case.statuses, f"{case.name}: {status} {response.text[:300]}"
    else:
        assert 400 <= status < 500, f"{case.name}: accepted with {status} {response.text[:300]}"
    error = response.json()["error"]
    assert error["code"] and error["message"]
    if status == 422 and case.field is not None:
        assert (error.get("field") or "").startswith(case.field), f"{case.name}: {error}"
    if status == 405:
        assert response.headers.get("allow"), "405 without Allow"


# A case per test cost more in pytest (collection on every worker, setup, report) than in its request.


def resource_of(case: Case) -> str:
    """The API resource a case is sent to: /v1/<resource>/..."""
    return case.path.split("?", 1)[0].removeprefix("/v1/").split("/", 1)[0]


def label(case: Case) -> str:
    return case.name.encode("unicode_escape").decode()  # as its test id read


RESOURCES = list(dict.fromkeys(resource_of(case) for case in CASES))


@pytest.mark.parametrize("resource", RESOURCES)
async def test_bad_input_is_refused_with_a_4xx_naming_the_field(
    twin: Target, twin_calls: StoreCalls, resource: str
) -> None:
    async def check(case: Case) -> None:
        response, served, store_calls = await twin_calls.during(send(twin, case))
        assert_refused(case, response)
        # the request went through the recording layer (a plain heartbeat may be answered below ASGI, by the
        # pools, which never use the store)
        assert served == 1 or case.path.endswith("/heartbeat"), f"{case.name}: {served} requests recorded"
        if case.reaches_storage:
            assert store_calls, f"{case.name}: tagged reaches_storage in tests/fuzz/cases.py but never called the store"
        else:
            assert not store_calls, (
                f"{case.name}: called the store ({', '.join(store_calls)}): tag it reaches_storage=True in"
                " tests/fuzz/cases.py, so that it runs on SQLite and MariaDB too"
            )

    await check_every([case for case in CASES if resource_of(case) == resource], check, label)


async def test_bad_input_reaching_a_store_is_refused_by_the_sql_stores(sql_node: Target) -> None:
    async def check(case: Case) -> None:
        assert_refused(case, await send(sql_node, case))

    await check_every(REACHING_STORAGE, check, label)


SINGLE_CREATES = [case for case in CASES if (case.method, case.path) == ("POST", "/v1/tasks") and not case.admin]


async def test_a_bad_create_answered_below_asgi_is_refused_as_the_app_refuses_it(twin: Target) -> None:
    """The lean create path (tjobs.api.lean_creates) answers each bad create exactly as the app does
    (status and body); the case is sent twice, through ASGI and then to the lean path when it takes it."""
    lean = twin.lean

    async def check(case: Case) -> None:
        asgi = await send(twin, case)
        lean.serve_creates = True
        try:
            for _ in range(2):  # a key's cache entry that expired between the sends: the miss read it again
                before = lean.creates
                direct = await send(twin, case)
                if lean.creates > before:
                    break
        finally:
            lean.serve_creates = False
        assert (direct.status_code, direct.content) == (asgi.status_code, asgi.content), case.name
        assert_refused(case, direct)
        size = len(case.content if case.content is not None else render(case.body).encode())
        if case.headers.get("content-type", "application/json") == "application/json" and size <= 65_536:
            assert lean.creates == before + 1, f"{case.name}: not answered by the lean path"

    await check_every(SINGLE_CREATES, check, label)
