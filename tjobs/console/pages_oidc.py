"""Sign-in through an OpenID Connect provider (:mod:`tjobs.console.oidc`), when one is configured.

``GET /console/signin/oidc`` sends the browser to the provider with a fresh ``state`` and ``nonce``, kept
in a signed cookie for 10 minutes (``SameSite=Lax``: the provider sends the browser back from another
site). ``GET /console/oidc/callback`` checks them, asks the provider who signed in, and opens a session of
the tjobs user of that name (its roles; the ``app`` given at the start when it has several). The session
cookie is then handed over by a page of our own, not a redirect: a ``SameSite=Strict`` cookie is not sent
on a redirect that began on another site.
"""

from __future__ import annotations

import hmac
import html
import secrets
import time
from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from tjobs.api.principal import client_address
from tjobs.console.context import SECURITY_HEADERS, ConsoleRoute, console_of
from tjobs.console.pages_session import _cookie as cookie
from tjobs.console.pages_session import _safe_next as safe_next
from tjobs.console.session import COOKIE_NAME
from tjobs.errors import Forbidden, NotFound, Unauthorized

router = APIRouter(route_class=ConsoleRoute)

OIDC_COOKIE = "tjobs_console_oidc"
OIDC_COOKIE_TTL_S = 600


@router.get("/console/signin/oidc")
async def start(
    request: Request,
    next: Annotated[str | None, Query(max_length=2000)] = None,
    app: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    console = console_of(request)
    if not console.oidc.configured:
        raise NotFound("page", "oidc")
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    payload = orjson.dumps({"s": state, "n": nonce, "x": safe_next(next), "a": app or ""}).hex()
    response = RedirectResponse(await console.oidc.authorization_url(state, nonce), status_code=303)
    value = f"{payload}.{console.codec.csrf_token('oidc:' + payload)}"
    cookie(response, request, OIDC_COOKIE, value, OIDC_COOKIE_TTL_S, samesite="lax")
    return response


@router.get("/console/oidc/callback")
async def callback(
    request: Request,
    code: Annotated[str, Query(max_length=4000)],
    state: Annotated[str, Query(max_length=200)],
) -> Response:
    console = console_of(request)
    if not console.oidc.configured:
        raise NotFound("page", "oidc")
    payload, _, mac = (request.cookies.get(OIDC_COOKIE) or "").partition(".")
    if not payload or not hmac.compare_digest(mac.encode(), console.codec.csrf_token("oidc:" + payload).encode()):
        raise Unauthorized("this sign-in did not start here, or took longer than 10 minutes: sign in again")
    started = orjson.loads(bytes.fromhex(payload))
    if not hmac.compare_digest(str(started["s"]).encode(), state.encode()):
        raise Unauthorized("this sign-in's state does not match: sign in again")
    address = client_address(request)
    console.credential_limits.check(address, None)
    name = await console.oidc.username(code, str(started["n"]), time.time())
    user = await console.accounts.find_user(name[:64])
    if user is None or user.disabled_at_ms is not None:
        console.credential_limits.failed(address, name[:64])
        raise Forbidden(f"the identity provider signed in {name!r}, who is not an enabled tjobs user")
    session_id = await console.open_user_session(user, str(started["a"]))
    target = html.escape(safe_next(str(started["x"])), quote=True)
    page = (
        f'<!doctype html><meta http-equiv="refresh" content="0;url={target}">'
        f'<title>Signed in</title><p>Signed in as {html.escape(user.name)}. <a href="{target}">Continue</a></p>'
    )
    response = HTMLResponse(page, headers=SECURITY_HEADERS)
    cookie(response, request, COOKIE_NAME, session_id, console.codec.ttl_s)
    response.delete_cookie(OIDC_COOKIE, path="/console")
    return response
