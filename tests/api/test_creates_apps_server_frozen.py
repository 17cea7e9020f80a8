"""Creates while the database server holding the apps table is frozen (issue 28 item 1).

A create's task lands on its own shard's server; the only thing it needs from the apps server is its
API key's app. Here the in-memory twin plays both: its app reads (by key hash and by id) hang as a
SIGSTOPped server's would, while its task writes (the healthy server) answer. Once the node's copy of
the key's app is past its TTL, a create must be answered from that copy (within the stated staleness
bound, docs/operations.md), not wait for the frozen server; a key (or a named target) this node has no
copy of waits at most ``storage.create_timeout_s`` and is answered ``503 storage_unavailable``, not left
hanging.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from testkit import NodeParts, RunningNode, run_node
from tests.api.conftest import ADMIN_KEY, task_body
from tjobs.model import App, TaskChildren
from tjobs.settings import load_settings
from tjobs.stores.contracts.accounts import ApiToken
from tjobs.stores.memory import MemoryTaskStore
from tjobs.targets.model import HttpTarget, RetryPolicy, Target

TTL_S = 0.3  # directory.app_ttl_s: the key's copy expires within the test
CREATE_TIMEOUT_S = 0.5  # storage.create_timeout_s: a key never seen waits this long for the apps server
WALL_S = 3.0  # a create that has not answered by then is waiting on the frozen server


class FrozenAppsServer(MemoryTaskStore):
    """The twin whose app reads hang while :attr:`answering` is clear (the apps server SIGSTOPped); its
    task reads and writes keep answering (the shards' own, healthy server)."""

    def __init__(self) -> None:
        super().__init__()
        self.answering = asyncio.Event()
        self.answering.set()
        self.app_reads = 0

    async def _apps_server(self) -> None:
        self.app_reads += 1
        await self.answering.wait()

    async def find_app_by_key_hash(self, api_key_hash: str) -> App | None:
        await self._apps_server()
        return await super().find_app_by_key_hash(api_key_hash)

    async def get_app(self, app_id: str) -> App | None:
        await self._apps_server()
        return await super().get_app(app_id)

    async def get_target(self, app_id: str, name: str) -> Target | None:
        await self._apps_server()
        return await super().get_target(app_id, name)

    async def find_token(self, token_hash: str) -> ApiToken | None:  # the accounts tables: on that server too
        await self._apps_server()
        return await super().find_token(token_hash)


@asynccontextmanager
async def node_on(store: FrozenAppsServer) -> AsyncIterator[RunningNode]:
    settings = load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "1x1x4", "create_timeout_s": CREATE_TIMEOUT_S},
        api={"admin_key": ADMIN_KEY},
        directory={"app_ttl_s": TTL_S},
        allow_loopback_callbacks=True,
    )
    async with run_node(settings, NodeParts(store=store)) as running:
        try:
            yield running
        finally:
            store.answering.set()  # let the node stop


async def _create(client: httpx.AsyncClient, path: str = "/v1/tasks", **body: Any) -> httpx.Response:
    """A create, failed (not hung) when it waits on the frozen server."""
    try:
        return await asyncio.wait_for(client.post(path, json=task_body(**body)), WALL_S)
    except TimeoutError:
        pytest.fail(f"POST {path} still unanswered after {WALL_S} s: it waits on the frozen apps server")


@pytest.mark.parametrize("path", ["/v1/tasks", "/v1/tasks?"], ids=["lean", "asgi"])
async def test_a_create_after_its_keys_entry_expired_does_not_wait_on_a_frozen_apps_server(path: str) -> None:
    store = FrozenAppsServer()
    async with node_on(store) as running:
        _, key = await running.create_app("orders")
        async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
            # Given a node that has accepted the app's key (its copy read from the apps server)
            assert (await _create(client, path)).status_code == 201
            # When the apps server freezes and the key's entry expires
            store.answering.clear()
            await asyncio.sleep(TTL_S * 1.5)
            reads = store.app_reads
            # Then creates go on from the copy: stored on the task's healthy server, each answered at once
            for _ in range(3):
                created = await _create(client, path)
                assert created.status_code == 201, created.text
                task_id = created.json()["id"]
                assert (await store.get_task(int(task_id))) is not None
            assert store.app_reads > reads, "the node did try the apps server (in the background)"


@pytest.mark.parametrize("unseen", ["key", "target"])
async def test_what_a_create_needs_and_this_node_never_read_waits_for_a_frozen_apps_server_at_most_the_create_timeout(
    unseen: str,
) -> None:
    store = FrozenAppsServer()
    async with node_on(store) as running:
        app, key = await running.create_app("orders")
        body: dict[str, Any] = {}
        if unseen == "target":  # made through another node: this one has no copy of it
            await store.put_target(orders_target(app.id), None)
            body = {"callback": {"target": "orders"}}
        async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
            if unseen == "target":
                assert (await _create(client)).status_code == 201  # the key is known to this node now
            store.answering.clear()
            started = asyncio.get_running_loop().time()
            refused = await _create(client, **body)
            waited_s = asyncio.get_running_loop().time() - started
        # a clear error the client can retry, after the stated deadline, not a hang
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "storage_unavailable"
        assert refused.headers["retry-after"] == "1"
        assert CREATE_TIMEOUT_S * 0.9 <= waited_s < WALL_S
        store.answering.set()
        async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
            assert (await _create(client, **body)).status_code == 201  # once it answers, the create is stored


def orders_target(app_id: str) -> Target:
    return Target(
        app_id=app_id,
        name="orders",
        settings=HttpTarget(urls=("http://127.0.0.1:9/orders",)),
        version=1,
        retry=RetryPolicy(),
        credentials={},
        created_at_ms=0,
        updated_at_ms=0,
    )


async def test_a_create_naming_children_waits_for_their_links_at_most_the_create_timeout() -> None:
    store = FrozenAppsServer()
    async with node_on(store) as running:
        app, key = await running.create_app("orders")
        parents = running.node.task_parents  # the reverse index: on the apps server, beside the apps table
        link_children = parents.link_children

        async def link_on_the_apps_server(app_id: str, parent_id: int, children: TaskChildren) -> None:
            await store.answering.wait()
            await link_children(app_id, parent_id, children)

        parents.link_children = link_on_the_apps_server  # type: ignore[method-assign]
        async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
            child = await _create(client)
            assert child.status_code == 201
            store.answering.clear()
            started = asyncio.get_running_loop().time()
            refused = await _create(client, children={"on_success": [child.json()["id"]]})
            waited_s = asyncio.get_running_loop().time() - started
            # a clear error after the stated deadline, nothing stored, not a hang
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "storage_unavailable"
            assert CREATE_TIMEOUT_S * 0.9 <= waited_s < WALL_S
            stored = [t for shard in range(4) for t in await store.list_tasks(app.id, shard, None, 100)]
            assert [t.id for t in stored] == [int(child.json()["id"])], "the refused parent was not stored"
            store.answering.set()
            linked = await _create(client, children={"on_success": [child.json()["id"]]})
            assert linked.status_code == 201, linked.text


async def test_a_create_with_a_personal_token_waits_for_a_frozen_accounts_server_at_most_the_create_timeout() -> None:
    # Personal API tokens are read from the accounts tables (beside the apps table) on every request, not
    # cached (a revoked token stops at once): while that server is frozen such a request must end in a
    # clear 503 after the stated deadline, not hang
    store = FrozenAppsServer()
    async with node_on(store) as running:
        app, _ = await running.create_app("orders")
        accounts = running.node.accounts
        await accounts.create_user("ops", "a long enough password", roles={app.id: "operator"})
        token, _ = await accounts.create_token("ops", "tests", None)
        async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {token}"}) as client:
            assert (await _create(client)).status_code == 201
            store.answering.clear()
            started = asyncio.get_running_loop().time()
            refused = await _create(client)
            waited_s = asyncio.get_running_loop().time() - started
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "storage_unavailable"
            assert refused.headers["retry-after"] == "1"
            assert CREATE_TIMEOUT_S * 0.9 <= waited_s < WALL_S
            store.answering.set()
            assert (await _create(client)).status_code == 201
