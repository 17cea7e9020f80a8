"""Operator accounts over HTTP: users made by the admin, personal API tokens acting with their user's
roles (the role matrix below), console sessions listed and revoked, wrong credentials limited per
source address and per account name, and bad input answered 4xx naming the field. On the memory twin:
the storage side is proven by tests/contract/test_store_accounts_contract.py on every backend."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from testkit import RunningNode
from tests.api.conftest import ADMIN_KEY, task_body
from tests.api.test_tasks_api import assert_error
from tjobs.cli.main import app as cli

pytestmark = pytest.mark.asyncio(loop_scope="session")

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def api_storage() -> Iterator[dict[str, Any]]:
    yield {"urls": ["memory://"], "topology": "2x2x4"}


def basic(name: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


async def make_user(admin: httpx.AsyncClient, name: str, **body: Any) -> dict[str, Any]:
    reply = await admin.post("/v1/users", json={"name": name, "password": PASSWORD, **body})
    assert reply.status_code == 201, reply.text
    user: dict[str, Any] = reply.json()
    return user


async def token_of(api_node: RunningNode, name: str) -> str:
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        reply = await client.post("/v1/users/me/tokens", json={"name": "tests"}, headers=basic(name, PASSWORD))
    assert reply.status_code == 201, reply.text
    token: str = reply.json()["token"]
    return token


# (who, method, path, expected status) - "{app}" is an app the users have roles on, "{other}" one they have not
ROLE_MATRIX = [
    ("viewer", "GET", "/v1/tasks", 200),
    ("viewer", "POST", "/v1/tasks", 403),
    ("viewer", "PATCH", "/v1/apps/{app}", 403),
    ("viewer", "GET", "/v1/apps", 403),
    ("viewer", "POST", "/v1/users", 403),
    ("viewer", "GET", "/v1/pools", 200),
    ("viewer", "GET", "/v1/pools/no-executors", 404),  # a pool exists while it has a live executor
    ("viewer", "GET", "/v1/flows:count", 200),
    ("viewer", "GET", "/v1/operator-jobs", 200),
    ("viewer", "POST", "/v1/dead-letters/redrive-jobs", 403),
    ("operator", "GET", "/v1/tasks", 200),
    ("operator", "POST", "/v1/dead-letters/redrive-jobs", 422),  # allowed: nothing to redrive
    ("operator", "POST", "/v1/tasks", 201),
    ("operator", "PATCH", "/v1/apps/{app}", 403),
    ("operator", "GET", "/v1/sessions", 403),
    ("app-admin", "POST", "/v1/tasks", 201),
    ("app-admin", "PATCH", "/v1/apps/{app}", 200),
    ("app-admin", "PATCH", "/v1/apps/{other}", 403),
    ("app-admin", "DELETE", "/v1/apps/{app}", 403),
    ("app-admin", "GET", "/v1/apps", 403),
    ("global-admin", "GET", "/v1/apps", 200),
    ("global-admin", "POST", "/v1/tasks", 201),
    ("global-admin", "GET", "/v1/sessions", 200),
    ("global-admin", "POST", "/v1/users", 201),
    ("global-admin", "GET", "/v1/cluster", 200),
    ("app-admin", "GET", "/v1/cluster", 403),
    ("nobody", "GET", "/v1/tasks", 404),
    ("nobody", "POST", "/v1/tasks", 404),
]


async def test_each_role_may_do_what_the_matrix_says_and_nothing_more(
    api_node: RunningNode, admin: httpx.AsyncClient, tenant_factory: Any
) -> None:
    app = (await tenant_factory("accounts-matrix")).app.id
    other = (await tenant_factory("accounts-other")).app.id
    roles: dict[str, dict[str, Any]] = {
        "viewer": {"roles": {app: "viewer"}},
        "operator": {"roles": {app: "operator"}},
        "app-admin": {"roles": {app: "admin", other: "operator"}},
        "global-admin": {"global_admin": True},
        "nobody": {"roles": {other: "viewer"}},
    }
    tokens = {}
    for who, body in roles.items():
        await make_user(admin, f"matrix-{who}", **body)
        tokens[who] = await token_of(api_node, f"matrix-{who}")
    made = 0
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        for who, method, path, expected in ROLE_MATRIX:
            headers = {"authorization": f"Bearer {tokens[who]}", "x-tjobs-app": app}
            json: Any = None
            if path == "/v1/tasks" and method == "POST":
                json = task_body()
            elif path == "/v1/dead-letters/redrive-jobs":
                json = {"confirm_count": 1}
            elif path.startswith("/v1/apps/"):
                json = {"max_concurrency": 7}
            elif path == "/v1/users":
                made += 1
                json = {"name": f"made-by-token-{made}"}
            url = path.format(app=app, other=other)
            reply = await client.request(method, url, headers=headers, json=json)
            assert reply.status_code == expected, (who, method, path, reply.text)


async def test_a_token_is_shown_once_listed_without_its_secret_and_refused_once_revoked(
    api_node: RunningNode, admin: httpx.AsyncClient, tenant_factory: Any
) -> None:
    app = (await tenant_factory("accounts-tokens")).app.id
    await make_user(admin, "token-owner", roles={app: "viewer"})
    token = await token_of(api_node, "token-owner")
    async with httpx.AsyncClient(base_url=api_node.base_url, headers={"authorization": f"Bearer {token}"}) as client:
        assert (await client.get("/v1/tasks")).status_code == 200  # one app: no X-Tjobs-App needed
        listed = (await client.get("/v1/users/me/tokens")).json()["items"]
        assert [item["name"] for item in listed] == ["tests"] and "token" not in listed[0]
        assert (await client.get("/v1/users/me")).json()["roles"] == {app: "viewer"}
        assert (await client.delete(f"/v1/users/me/tokens/{listed[0]['id']}")).status_code == 204
        assert_error(await client.get("/v1/tasks"), 401, "unauthorized")


async def test_a_disabled_user_is_refused_and_a_reset_password_replaces_the_old_one(
    api_node: RunningNode, admin: httpx.AsyncClient
) -> None:
    await make_user(admin, "to-disable")
    token = await token_of(api_node, "to-disable")
    assert (await admin.patch("/v1/users/to-disable", json={"disabled": True})).json()["disabled"]
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        assert (await client.get("/v1/users/me", headers={"authorization": f"Bearer {token}"})).status_code == 401
        assert (await client.get("/v1/users/me", headers=basic("to-disable", PASSWORD))).status_code == 401
        await admin.patch("/v1/users/to-disable", json={"disabled": False, "password": "a new long password"})
        assert (await client.get("/v1/users/me", headers=basic("to-disable", PASSWORD))).status_code == 401
        assert (await client.get("/v1/users/me", headers=basic("to-disable", "a new long password"))).status_code == 200


async def test_bad_input_is_a_4xx_naming_the_field(api_node: RunningNode, admin: httpx.AsyncClient) -> None:
    assert_error(await admin.post("/v1/users", json={"name": "Bad Name"}), 422, field="name")
    assert_error(await admin.post("/v1/users", json={"name": "me"}), 422, field="name")
    assert_error(await admin.post("/v1/users", json={"name": "shorty", "password": "short"}), 422, field="password")
    assert_error(await admin.post("/v1/users", json={"name": "r", "roles": {"a": "boss"}}), 422, field="roles.a")
    assert_error(await admin.post("/v1/users", json={"name": "r", "roles": []}), 422, field="roles")
    assert_error(
        await admin.post("/v1/users", json={"name": "r", "roles": {"app-nope": "viewer"}}), 422, field="roles.app-nope"
    )
    assert_error(await admin.post("/v1/users", json={"name": "r", "global_admin": "yes"}), 422, field="global_admin")
    assert_error(await admin.post("/v1/users", json={"name": "r", "colour": 1}), 422, field="colour")
    assert_error(await admin.post("/v1/users", json=[1]), 422, field="body")
    await make_user(admin, "dupe")
    assert_error(await admin.post("/v1/users", json={"name": "dupe"}), 409)
    assert_error(await admin.patch("/v1/users/nobody-here", json={"disabled": True}), 404)
    assert_error(await admin.patch("/v1/users/dupe", json={"disabled": 1}), 422, field="disabled")
    assert_error(await admin.delete("/v1/sessions/not-a-session"), 404)
    assert_error(await admin.get("/v1/sessions", params={"user": "Bad Name"}), 422, field="user")
    async with httpx.AsyncClient(base_url=api_node.base_url, headers=basic("dupe", PASSWORD)) as client:
        for body, field in (({"name": ""}, "name"), ({"name": "x", "expires_in_s": 5}, "expires_in_s")):
            assert_error(await client.post("/v1/users/me/tokens", json=body), 422, field=field)
        assert_error(await client.post("/v1/users/me/tokens", json={"name": "x", "expires_in_s": True}), 422)
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        assert_error(await client.get("/v1/users/me"), 401)
        assert_error(await client.get("/v1/users/me", headers={"authorization": "Basic !!!"}), 401)


async def test_wrong_passwords_are_limited_per_address_and_per_name_not_for_everyone(
    api_node: RunningNode, admin: httpx.AsyncClient
) -> None:
    limits = api_node.api.state.credential_limits
    await make_user(admin, "guessed")
    await make_user(admin, "bystander")
    # Given a flood of wrong passwords on one name from many addresses
    for n in range(12):
        limits.failed(f"10.0.0.{n}", "guessed")
    async with httpx.AsyncClient(base_url=api_node.base_url) as client:
        # that name is refused for now, even with the right password ...
        assert_error(await client.get("/v1/users/me", headers=basic("guessed", PASSWORD)), 429, "rate_limited")
        # ... and another account signs in from the same address as before
        assert (await client.get("/v1/users/me", headers=basic("bystander", PASSWORD))).status_code == 200
    # Given a flood from one address on many names
    for n in range(12):
        limits.failed("192.0.2.7", f"name-{n}")
    limits.check("127.0.0.2", "bystander")  # another address is not held
    with pytest.raises(Exception, match="address"):
        limits.check("192.0.2.7", "bystander")


async def test_the_cli_makes_the_first_user_with_the_admin_key_and_that_user_a_token(api_node: RunningNode) -> None:
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_ADMIN_KEY": ADMIN_KEY, "COLUMNS": "200"}

    def drive() -> tuple[Result, Result, Result, Result]:
        runner = CliRunner()
        created = runner.invoke(
            cli, ["users", "create", "cli-first", "--global-admin"], input=f"{PASSWORD}\n{PASSWORD}\n", env=env
        )
        listed = runner.invoke(cli, ["users", "list", "--json"], env=env)
        token = runner.invoke(
            cli, ["tokens", "create", "--user", "cli-first", "--name", "ci", "--json"], input=f"{PASSWORD}\n", env=env
        )
        refused = runner.invoke(cli, ["users", "create", "Bad Name", "--no-password"], env=env)
        return created, listed, token, refused

    created, listed, token, refused = await asyncio.to_thread(drive)
    assert created.exit_code == 0, created.output
    assert "cli-first" in {user["name"] for user in json.loads(listed.output)}
    secret = json.loads(token.stdout[token.stdout.index("{") :])["token"]  # after the password prompt, if shown
    assert refused.exit_code == 1 and "[name]" in refused.output
    async with httpx.AsyncClient(base_url=api_node.base_url, headers={"authorization": f"Bearer {secret}"}) as client:
        assert (await client.get("/v1/apps")).status_code == 200  # a global admin's token is an admin
