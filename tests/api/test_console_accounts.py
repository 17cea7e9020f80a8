"""Console sessions kept on the server, over two nodes sharing one SQLite store: a user signs in on one
node and is known on the other; signing out (or an admin's revocation) is refused by both at once. The
console's role matrix: what a viewer, an operator, an app admin and a global admin may post."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from testkit import RunningNode, run_node
from tests.api.conftest import ADMIN_KEY, task_body
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.console.session import COOKIE_NAME
from tjobs.settings import load_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

PASSWORD = "correct horse battery"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[RunningNode, RunningNode]]:
    storage = {"urls": [f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('console') / 'data'}"], "topology": "1x1x2"}
    settings = load_settings(None, storage=storage, api={"admin_key": ADMIN_KEY}, **FAST_SETTINGS)
    from tjobs.stores.migrate import migrate

    await migrate(settings.storage)
    async with run_node(settings) as first, run_node(settings) as second:
        yield first, second


async def sign_in(node: RunningNode, **form: str) -> tuple[int, str | None]:
    """Post the sign-in form on ``node``: the status and the session cookie (when one was set)."""
    async with httpx.AsyncClient(base_url=node.base_url) as client:
        page = await client.get("/console/signin")
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        reply = await client.post("/console/signin", data={"csrf": token.group(1), "next": "/console/", **form})
        return reply.status_code, reply.cookies.get(COOKIE_NAME)


async def page(node: RunningNode, session: str, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=node.base_url, cookies={COOKIE_NAME: session}) as client:
        return await client.get(path)


async def post(node: RunningNode, session: str, path: str, **form: str) -> httpx.Response:
    shown = await page(node, session, "/console/")
    csrf = re.search(r'name="csrf" value="([^"]+)"', shown.text)
    assert csrf is not None, shown.text[:500]
    async with httpx.AsyncClient(base_url=node.base_url, cookies={COOKIE_NAME: session}) as client:
        return await client.post(path, data={"csrf": csrf.group(1), **form})


async def admin_api(node: RunningNode, method: str, path: str, body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=node.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as client:
        return await client.request(method, path, json=body)


async def test_signing_out_on_one_node_ends_the_session_on_every_node(
    two_nodes: tuple[RunningNode, RunningNode],
) -> None:
    first, second = two_nodes
    app, _ = await first.create_app("signout")
    assert (
        await admin_api(
            first, "POST", "/v1/users", {"name": "leaver", "password": PASSWORD, "roles": {app.id: "viewer"}}
        )
    ).status_code == 201
    status, session = await sign_in(first, user="leaver", password=PASSWORD)
    assert status == 303 and session
    assert (await page(second, session, "/console/tasks")).status_code == 200  # known on the other node

    assert (await post(second, session, "/console/signout")).status_code == 303
    for node in (first, second):
        refused = await page(node, session, "/console/tasks")
        assert refused.status_code == 303 and "/console/signin" in refused.headers["location"]


async def test_an_admin_revokes_a_users_sessions_and_a_key_session_is_kept_on_the_server_too(
    two_nodes: tuple[RunningNode, RunningNode],
) -> None:
    first, second = two_nodes
    app, key = await first.create_app("revoked")
    await admin_api(first, "POST", "/v1/users", {"name": "revokee", "password": PASSWORD, "roles": {app.id: "viewer"}})
    _, session = await sign_in(first, user="revokee", password=PASSWORD)
    _, key_session = await sign_in(first, key=key)
    assert session and key_session
    listed = (await admin_api(second, "GET", "/v1/sessions", None)).json()["items"]
    assert {(s["kind"], s["subject"]) for s in listed} >= {("user", "revokee"), ("app", app.id)}
    mine = (await admin_api(second, "GET", "/v1/sessions?user=revokee")).json()["items"]
    assert len(mine) == 1 and mine[0]["kind"] == "user"
    assert (await admin_api(second, "DELETE", f"/v1/sessions/{mine[0]['id']}")).status_code == 204
    assert (await page(first, session, "/console/tasks")).status_code == 303
    assert (await page(first, key_session, "/console/tasks")).status_code == 200


async def test_wrong_passwords_on_one_name_do_not_lock_out_another_user(
    two_nodes: tuple[RunningNode, RunningNode],
) -> None:
    first, _ = two_nodes
    app, _ = await first.create_app("limits")
    for name in ("target", "bystander2"):
        await admin_api(first, "POST", "/v1/users", {"name": name, "password": PASSWORD, "roles": {app.id: "viewer"}})
    limits = first.api.state.credential_limits
    for n in range(12):  # a flood on one name, from many addresses
        limits.failed(f"198.51.100.{n}", "target")
    status, _ = await sign_in(first, user="target", password=PASSWORD)
    assert status == 429
    status, session = await sign_in(first, user="bystander2", password=PASSWORD)
    assert status == 303 and session
    status, _ = await sign_in(first, user="bystander2", password="not the password at all")
    assert status == 401


# (role, path to post, whether the role may): a task's pause needs operator, a target's delete app admin
CONSOLE_MATRIX = [
    ("viewer", "/console/tasks/{task}/pause", False),
    ("viewer", "/console/targets/nothing/delete", False),
    ("viewer", "/console/dead-letters/redrive-jobs/job_0123456789abcdef", False),
    ("viewer", "/console/operator-jobs/job_0123456789abcdef/cancel", False),
    ("operator", "/console/dead-letters/redrive-jobs/job_0123456789abcdef", True),
    ("operator", "/console/tasks/{task}/pause", True),
    ("operator", "/console/targets/nothing/delete", False),
    ("admin", "/console/tasks/{task}/resume", True),
    ("admin", "/console/targets/nothing/delete", True),
    ("global", "/console/tasks/{task}/pause", True),
]


async def test_each_console_role_may_post_what_the_matrix_says(two_nodes: tuple[RunningNode, RunningNode]) -> None:
    first, second = two_nodes
    app, key = await first.create_app("console-matrix")
    async with httpx.AsyncClient(base_url=first.base_url, headers={"authorization": f"Bearer {key}"}) as client:
        task = (await client.post("/v1/tasks", json=task_body())).json()["id"]
    sessions: dict[str, str] = {}
    for role in ("viewer", "operator", "admin", "global"):
        body: dict[str, Any] = {"global_admin": True} if role == "global" else {"roles": {app.id: role}}
        await admin_api(first, "POST", "/v1/users", {"name": f"console-{role}", "password": PASSWORD, **body})
        _, session = await sign_in(first, user=f"console-{role}", password=PASSWORD)
        assert session
        sessions[role] = session
    for role, path, allowed in CONSOLE_MATRIX:
        session = sessions[role]
        reply = await post(second, session, path.format(task=task), confirm="nothing")
        assert (reply.status_code != 403) == allowed, (role, path, reply.status_code, reply.text[:300])
    viewer_apps = await page(second, sessions["admin"], "/console/apps")
    assert viewer_apps.status_code == 404  # an app admin is not the global admin: the apps pages do not exist
    assert (await page(second, sessions["global"], "/console/apps")).status_code == 200


# (role, console page, status): every role reads its app's pools and overview figures; the cluster is
# the global admin's only (404 for anyone else, as a foreign id)
CONSOLE_PAGES = [
    ("viewer", "/console/flows", 200),
    ("viewer", "/console/dead-letters", 200),
    ("viewer", "/console/dead-letters/redrive-all", 200),  # the count to confirm: the post needs operator
    ("viewer", "/console/operator-jobs/job_0123456789abcdef", 404),
    ("viewer", "/console/pools", 200),
    ("viewer", "/console/overview/figures", 200),
    ("viewer", "/console/cluster", 404),
    ("operator", "/console/pools", 200),
    ("operator", "/console/cluster", 404),
    ("admin", "/console/pools", 200),
    ("admin", "/console/overview/figures", 200),
    ("admin", "/console/cluster", 404),
    ("global", "/console/pools", 200),  # the app picker: the global admin names an app
    ("global", "/console/overview/figures", 200),
    ("global", "/console/cluster", 200),
]


async def test_each_console_role_may_read_the_pages_the_matrix_says(
    two_nodes: tuple[RunningNode, RunningNode],
) -> None:
    first, second = two_nodes
    app, _ = await first.create_app("console-pages")
    sessions: dict[str, str] = {}
    for role in ("viewer", "operator", "admin", "global"):
        body: dict[str, Any] = {"global_admin": True} if role == "global" else {"roles": {app.id: role}}
        name = f"pages-{role}"
        await admin_api(first, "POST", "/v1/users", {"name": name, "password": PASSWORD, **body})
        _, session = await sign_in(first, user=name, password=PASSWORD)
        assert session
        sessions[role] = session
    for role, path, status in CONSOLE_PAGES:
        reply = await page(second, sessions[role], path)
        assert reply.status_code == status, (role, path, reply.text[:300])
        assert reply.headers["content-type"].startswith("text/html"), (role, path)


async def test_an_app_admin_changes_its_own_apps_limits_and_key_and_no_one_elses(
    two_nodes: tuple[RunningNode, RunningNode],
) -> None:
    first, _ = two_nodes
    app, key = await first.create_app("own-settings")
    other, _ = await first.create_app("not-mine")
    for name, role in (("settings-admin", "admin"), ("settings-operator", "operator")):
        body = {"name": name, "password": PASSWORD, "roles": {app.id: role, other.id: "viewer"}}
        await admin_api(first, "POST", "/v1/users", body)
    _, admin_session = await sign_in(first, user="settings-admin", password=PASSWORD, app=app.id)
    _, operator_session = await sign_in(first, user="settings-operator", password=PASSWORD, app=app.id)
    _, key_session = await sign_in(first, key=key)
    assert admin_session and operator_session and key_session

    assert (await page(first, admin_session, f"/console/apps/{app.id}")).status_code == 200
    changed = await post(first, admin_session, f"/console/apps/{app.id}/limits", max_concurrency="9")
    assert changed.status_code == 303, changed.text[:300]
    assert (await admin_api(first, "GET", f"/v1/apps/{app.id}")).json()["max_concurrency"] == 9
    rotated = await post(first, admin_session, f"/console/apps/{app.id}/rotate", what="secret")
    assert rotated.status_code == 200
    assert (await post(first, admin_session, f"/console/apps/{app.id}/disable")).status_code == 404  # global only
    assert (await page(first, admin_session, f"/console/apps/{other.id}")).status_code == 404
    assert (await page(first, operator_session, f"/console/apps/{app.id}")).status_code == 404
    assert (await page(first, key_session, f"/console/apps/{app.id}")).status_code == 404  # as before
    status, _ = await sign_in(first, user="settings-admin", password=PASSWORD)  # two apps: which one?
    assert status == 403


async def test_the_admin_sees_the_users_and_revokes_a_session_from_the_console(
    two_nodes: tuple[RunningNode, RunningNode],
) -> None:
    first, second = two_nodes
    app, _ = await first.create_app("users-page")
    for name, body in (("page-admin", {"global_admin": True}), ("page-viewer", {"roles": {app.id: "viewer"}})):
        await admin_api(first, "POST", "/v1/users", {"name": name, "password": PASSWORD, **body})
    _, admin_session = await sign_in(first, user="page-admin", password=PASSWORD)
    _, viewer_session = await sign_in(first, user="page-viewer", password=PASSWORD)
    assert admin_session and viewer_session

    shown = await page(second, admin_session, "/console/users")
    assert shown.status_code == 200 and "page-viewer" in shown.text and f"{app.id}</code>: viewer" in shown.text
    assert (await page(second, viewer_session, "/console/users")).status_code == 404
    mine = (await admin_api(first, "GET", "/v1/sessions?user=page-viewer")).json()["items"]
    revoked = await post(second, admin_session, f"/console/sessions/{mine[0]['id']}/revoke")
    assert revoked.status_code == 303 and revoked.headers["location"] == "/console/users?done=revoked"
    assert (await page(first, viewer_session, "/console/tasks")).status_code == 303  # signed out everywhere
