"""Sign in (an app key, the admin key, or a user name and password), sign out (the session's row is
deleted: every node refuses its cookie at once), and the console's static files.

The sign-in form is itself protected against cross-site posts: ``GET /console/signin`` gives the
browser a random pre-session cookie (``SameSite=Strict``) and the form a token bound to it; a POST
whose token does not match its cookie is refused (403), so no other site can sign a browser in.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.api.principal import client_address
from tjobs.console.context import ConsoleRoute, CsrfRefused, console_of, read_form, static_file
from tjobs.console.session import COOKIE_NAME, COOKIE_PATH
from tjobs.errors import AppDisabled, Forbidden, NotFound, RateLimited

router = APIRouter(route_class=ConsoleRoute)

SIGNIN_COOKIE = "tjobs_console_signin"
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if target and target.startswith("/console") and not target.startswith("//") and "\\" not in target:
        return target
    return "/console/"


def _cookie(
    response: Response,
    request: Request,
    name: str,
    value: str,
    max_age_s: int,
    samesite: Literal["strict", "lax"] = "strict",
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age_s,
        path=COOKIE_PATH,
        httponly=True,
        samesite=samesite,
        secure=request.url.scheme == "https",
    )


@router.get("/console/signin")
async def signin_page(request: Request, next: Annotated[str | None, Query(max_length=2000)] = None) -> Response:
    console = console_of(request)
    pre_session = request.cookies.get(SIGNIN_COOKIE) or secrets.token_urlsafe(24)
    response = console.render(
        request,
        "signin.html",
        None,
        token=console.sign_in_token(pre_session),
        next=_safe_next(next),
        error=None,
        oidc=console.oidc.configured,
    )
    _cookie(response, request, SIGNIN_COOKIE, pre_session, 3600)
    return response


@router.post("/console/signin")
async def signin(request: Request) -> Response:
    console = console_of(request)
    form = await read_form(request)
    pre_session = request.cookies.get(SIGNIN_COOKIE)
    given = form.get("csrf")
    if not pre_session or not given or not hmac.compare_digest(given, console.sign_in_token(pre_session)):
        raise CsrfRefused
    target = _safe_next(form.get("next"))
    address = client_address(request)
    try:
        if form.get("user"):
            cookie = await console.sign_in_user(form.get("user"), form.get("password"), form.get("app"), address)
            status, error = 401, "Wrong user name or password."
        else:
            cookie = await console.sign_in(form.get("key"), address)
            status, error = 401, "That key is neither an app's API key nor the admin key."
    except (AppDisabled, Forbidden, RateLimited) as refused:
        cookie, status, error = None, refused.status_code, refused.message
    if cookie is None:
        token = console.sign_in_token(pre_session)
        return console.render(request, "signin.html", None, status, token=token, next=target, error=error)
    response = RedirectResponse(target, status_code=303)
    _cookie(response, request, COOKIE_NAME, cookie, console.codec.ttl_s)
    response.delete_cookie(SIGNIN_COOKIE, path=COOKIE_PATH)
    return response


@router.post("/console/signout")
async def signout(request: Request) -> Response:
    console = console_of(request)
    await console.posted(request)
    await console.sign_out(request)
    response = RedirectResponse("/console/signin", status_code=303)
    response.delete_cookie(COOKIE_NAME, path=COOKIE_PATH, httponly=True, samesite="strict")
    return response


@router.get("/console/static/{name}")
async def static(name: str) -> Response:
    content = static_file(name)
    suffix = name[name.rfind(".") :] if "." in name else ""
    if content is None or suffix not in _STATIC_TYPES:
        raise NotFound("file", name)
    return Response(
        content,
        media_type=_STATIC_TYPES[suffix],
        headers={"cache-control": "public, max-age=300", "x-content-type-options": "nosniff"},
    )


@router.get("/console")
async def console_root() -> Response:
    return RedirectResponse("/console/", status_code=308)
