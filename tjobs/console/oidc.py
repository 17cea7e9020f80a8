"""Console sign-in through an OpenID Connect provider (the authorization code flow), when
``console.oidc_issuer``, ``oidc_client_id``, ``oidc_client_secret`` and ``oidc_redirect_url`` are set.

The provider's endpoints come from its discovery document (``{issuer}/.well-known/openid-configuration``,
read once per process). The browser is sent to its ``authorization_endpoint`` with a random ``state`` and
``nonce``, kept meanwhile in a signed, short-lived cookie; at the callback the ``state`` must match, the
code is exchanged at the ``token_endpoint`` (client id and secret, over TLS), and the ID token's claims
are checked: ``iss`` is the issuer, ``aud`` holds the client id, ``exp`` is ahead, ``nonce`` is ours.
The ID token comes straight from the token endpoint over TLS, so its issuer is vouched for by the server's
certificate (OpenID Connect Core 3.1.3.7, item 6) and its signature is not checked again here.

The claim ``console.oidc_username_claim`` (``preferred_username``) names the user: it must be a user tjobs
knows and has not disabled (no account is made on the fly); its roles are tjobs', not the provider's.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson

from tjobs.errors import Unauthorized
from tjobs.settings import ConsoleSettings

CLOCK_SKEW_S = 60  # an ID token's exp may be this far behind our clock


class OidcClient:
    """The provider of ``settings`` (``http``: the HTTP client to reach it; tests pass a mock transport)."""

    def __init__(self, settings: ConsoleSettings, http: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self.http = http
        self._discovered: dict[str, Any] | None = None

    @property
    def configured(self) -> bool:
        s = self.settings
        return bool(s.oidc_issuer and s.oidc_client_id and s.oidc_client_secret and s.oidc_redirect_url)

    async def _client(self) -> httpx.AsyncClient:
        if self.http is None:
            self.http = httpx.AsyncClient(timeout=10.0)
        return self.http

    async def _discovery(self) -> dict[str, Any]:
        if self._discovered is None:
            issuer = (self.settings.oidc_issuer or "").rstrip("/")
            reply = await (await self._client()).get(f"{issuer}/.well-known/openid-configuration")
            if reply.status_code != 200:
                raise Unauthorized(f"the identity provider's discovery document answered {reply.status_code}")
            document = reply.json()
            if not isinstance(document, dict) or not {"authorization_endpoint", "token_endpoint"} <= set(document):
                raise Unauthorized("the identity provider's discovery document lacks its endpoints")
            if not str(document["token_endpoint"]).startswith("https://"):  # the ID token's only warrant is TLS
                raise Unauthorized("the identity provider's token endpoint is not https")
            self._discovered = document
        return self._discovered

    async def authorization_url(self, state: str, nonce: str) -> str:
        """Where to send the browser to sign in."""
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.settings.oidc_client_id,
                "redirect_uri": self.settings.oidc_redirect_url,
                "scope": "openid profile email",
                "state": state,
                "nonce": nonce,
            }
        )
        return f"{(await self._discovery())['authorization_endpoint']}?{query}"

    async def username(self, code: str, nonce: str, now_s: float) -> str:
        """Exchange ``code`` and check the ID token (see the module docstring): the user name it names."""
        s = self.settings
        reply = await (await self._client()).post(
            (await self._discovery())["token_endpoint"],
            data={"grant_type": "authorization_code", "code": code, "redirect_uri": s.oidc_redirect_url},
            auth=(s.oidc_client_id or "", s.oidc_client_secret or ""),
        )
        if reply.status_code != 200:
            raise Unauthorized(f"the identity provider refused the sign-in ({reply.status_code})")
        claims = _claims(reply.json().get("id_token") if isinstance(reply.json(), dict) else None)
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        expires = claims.get("exp")
        if claims.get("iss") != s.oidc_issuer or s.oidc_client_id not in audiences:
            raise Unauthorized("the identity provider's token is for another issuer or client")
        if not isinstance(expires, int | float) or expires + CLOCK_SKEW_S < now_s:
            raise Unauthorized("the identity provider's token has expired")
        if claims.get("nonce") != nonce:
            raise Unauthorized("the identity provider's token is not this sign-in's (nonce)")
        name = claims.get(s.oidc_username_claim)
        if not isinstance(name, str) or not name:
            raise Unauthorized(f"the identity provider's token has no {s.oidc_username_claim!r} claim")
        return name.strip().lower()


def _claims(id_token: Any) -> dict[str, Any]:
    """The payload of a compact JWT (its signature is not checked: see the module docstring)."""
    parts = id_token.split(".") if isinstance(id_token, str) else []
    if len(parts) != 3:
        raise Unauthorized("the identity provider answered no ID token")
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise Unauthorized("the identity provider's ID token is unreadable") from None
    if not isinstance(claims, dict):
        raise Unauthorized("the identity provider's ID token is unreadable")
    return claims
