"""Console sign-in through an OpenID Connect provider, the provider played by an httpx mock transport: the
browser is sent to it with a state and a nonce, and back at the callback the session is opened for the
tjobs user the ID token names; a foreign state, a stale nonce, another audience or an unknown user are
refused."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest
import pytest_asyncio

from testkit import RunningNode, run_node
from tests.api.conftest import ADMIN_KEY
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.console.session import COOKIE_NAME
from tjobs.settings import load_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

ISSUER = "https://idp.example"
CONSOLE = {
    "oidc_issuer": ISSUER,
    "oidc_client_id": "tjobs-console",
    "oidc_client_secret": "client-secret-value",
    "oidc_redirect_url": "http://127.0.0.1/console/oidc/callback",
}


class Provider:
    """The identity provider: its discovery document, and a token endpoint answering ``claims``."""

    def __init__(self) -> None:
        self.claims: dict[str, Any] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/openid-configuration":
            return httpx.Response(
                200, json={"authorization_endpoint": f"{ISSUER}/auth", "token_endpoint": f"{ISSUER}/token"}
            )
        assert request.url.path == "/token" and request.headers["authorization"].startswith("Basic ")
        body = base64.urlsafe_b64encode(orjson.dumps(self.claims)).decode().rstrip("=")
        return httpx.Response(200, json={"id_token": f"e30.{body}.signature", "token_type": "Bearer"})


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def node_and_provider() -> AsyncIterator[tuple[RunningNode, Provider]]:
    settings = load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "1x1x2"},
        api={"admin_key": ADMIN_KEY},
        console=CONSOLE,
        **FAST_SETTINGS,
    )
    provider = Provider()
    async with run_node(settings) as running:
        running.api.state.console.oidc.http = httpx.AsyncClient(transport=httpx.MockTransport(provider))
        yield running, provider


async def start(client: httpx.AsyncClient) -> dict[str, str]:
    reply = await client.get("/console/signin/oidc", params={"next": "/console/tasks"})
    assert reply.status_code == 303 and reply.headers["location"].startswith(f"{ISSUER}/auth?")
    query = {name: values[0] for name, values in parse_qs(urlsplit(reply.headers["location"]).query).items()}
    assert query["client_id"] == "tjobs-console" and query["redirect_uri"] == CONSOLE["oidc_redirect_url"]
    return query


async def test_the_provider_signs_in_a_known_user_and_refuses_what_is_not_this_sign_in(
    node_and_provider: tuple[RunningNode, Provider],
) -> None:
    running, provider = node_and_provider
    app, _ = await running.create_app("oidc")
    async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        assert (await admin.post("/v1/users", json={"name": "olga", "roles": {app.id: "viewer"}})).status_code == 201
    async with httpx.AsyncClient(base_url=running.base_url) as client:
        assert "identity provider" in (await client.get("/console/signin")).text
        query = await start(client)
        good = {"iss": ISSUER, "aud": "tjobs-console", "exp": time.time() + 300, "nonce": query["nonce"]}

        provider.claims = {**good, "preferred_username": "olga"}
        forged = await client.get("/console/oidc/callback", params={"code": "c", "state": "not-the-state"})
        assert forged.status_code == 401

        for wrong in ({"aud": "another-client"}, {"nonce": "stale"}, {"exp": time.time() - 3600}):
            provider.claims = {**good, "preferred_username": "olga", **wrong}
            refused = await client.get("/console/oidc/callback", params={"code": "c", "state": query["state"]})
            assert refused.status_code == 401, wrong

        provider.claims = {**good, "preferred_username": "nobody-here"}
        unknown = await client.get("/console/oidc/callback", params={"code": "c", "state": query["state"]})
        assert unknown.status_code == 403

        provider.claims = {**good, "preferred_username": "Olga"}
        signed_in = await client.get("/console/oidc/callback", params={"code": "c", "state": query["state"]})
        assert signed_in.status_code == 200 and 'url=/console/tasks"' in signed_in.text
        session = signed_in.cookies.get(COOKIE_NAME)
        assert session
    async with httpx.AsyncClient(base_url=running.base_url, cookies={COOKIE_NAME: session}) as browser:
        tasks = await browser.get("/console/tasks")
        assert tasks.status_code == 200 and "olga, viewer of oidc" in tasks.text
