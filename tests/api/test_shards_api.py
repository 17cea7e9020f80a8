"""The shard map over HTTP (admin): GET /v1/shards shows where each logical database is and how many
tasks and flows it holds; POST /v1/shards:plan proposes the moves of an even spread over a server
list, moving nothing; bad lists are 422 naming the field; an app's key gets 401."""

from __future__ import annotations

import httpx
import pytest

from sharding import shard_of_task_id
from sharding.rebalance import plan_rebalance
from sharding.shard_map import ShardMap
from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_tasks_api import assert_error

pytestmark = pytest.mark.asyncio(loop_scope="session")
OWN_API_NODE = True  # the shard listing counts every task of the store, and the moves every move (conftest.py)


async def test_the_admin_sees_each_logical_database_with_its_server_and_rows(
    admin: httpx.AsyncClient, tenant: Tenant, api_node: RunningNode
) -> None:
    before = (await admin.get("/v1/shards")).json()
    created = await tenant.client.post("/v1/tasks", json=task_body(name="counted"))
    assert created.status_code == 201, created.text
    database = api_node.node.store.topology.locate(shard_of_task_id(int(created.json()["id"]))).database_index

    shown = await admin.get("/v1/shards")

    assert shown.status_code == 200, shown.text
    body = shown.json()
    placed = {database: server["server"] for server in body["servers"] for database in server["databases"]}
    assert body["epoch"] >= 1 and sorted(placed) == [0, 1, 2, 3]  # topology 2x2x4
    assert [(row["database"], row["server"]) for row in body["databases"]] == sorted(placed.items())
    assert body["databases"][database]["tasks"] == before["databases"][database]["tasks"] + 1


async def test_a_plan_over_one_more_server_proposes_moves_onto_it_and_nothing_moves(
    admin: httpx.AsyncClient,
) -> None:
    shown = (await admin.get("/v1/shards")).json()
    servers = [server["server"] for server in shown["servers"]]
    placement = tuple(row["server"] for row in shown["databases"])
    expected = plan_rebalance(ShardMap(shown["epoch"], tuple(servers), placement), [*servers, "db-new:3306"])

    planned = await admin.post("/v1/shards:plan", json={"servers": [*servers, "db-new:3306"]})

    assert planned.status_code == 200, planned.text
    assert planned.json() == {
        "epoch": shown["epoch"],
        "moves": [{"database": move.database, "from": move.source, "to": move.target} for move in expected],
    }
    assert any(move.target == "db-new:3306" for move in expected)
    assert (await admin.get("/v1/shards")).json()["servers"] == shown["servers"]  # nothing moved


async def test_bad_server_lists_are_422_naming_the_field_and_apps_get_401(
    admin: httpx.AsyncClient, tenant: Tenant
) -> None:
    assert_error(await admin.post("/v1/shards:plan", json={"servers": []}), 422, field="servers")
    assert_error(await admin.post("/v1/shards:plan", json={}), 422, field="servers")
    assert_error(await admin.post("/v1/shards:plan", json={"servers": ["a:1", 7]}), 422, field="servers.1")
    assert_error(await admin.post("/v1/shards:plan", json={"servers": ["other:3306"]}), 422, field="servers")
    assert (await tenant.client.get("/v1/shards")).status_code == 401
    assert (await tenant.client.post("/v1/shards:plan", json={"servers": ["a:1"]})).status_code == 401


async def test_moves_are_listed_for_the_admin_only_and_bad_filters_are_422_naming_the_field(
    admin: httpx.AsyncClient, tenant: Tenant
) -> None:
    listed = await admin.get("/v1/shards/moves")

    assert listed.status_code == 200, listed.text
    assert listed.json() == {"moves": []}  # nothing was moved on this node's storage
    assert (await admin.get("/v1/shards/moves", params={"outcome": "in_progress", "database": 1})).json() == {
        "moves": []
    }
    assert_error(await admin.get("/v1/shards/moves", params={"outcome": "finished"}), 422, field="outcome")
    assert_error(await admin.get("/v1/shards/moves", params={"database": "-1"}), 422, field="database")
    assert_error(await admin.get("/v1/shards/moves", params={"database": "one"}), 422, field="database")
    assert (await tenant.client.get("/v1/shards/moves")).status_code == 401
