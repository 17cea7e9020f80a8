"""Operator accounts on the API (:mod:`tjobs.service.accounts`): a personal API token (``Bearer tjt_...``)
acts on one app with its user's role there, or as the admin for a global admin; ``Basic`` user and password
authenticate the ``/v1/users/me`` routes (so a user can make a first token).

Roles on the app routes: ``GET``/``HEAD`` need viewer, anything else operator; the app's own admin routes
(``/v1/apps/{app_id}`` but deleting it) need the app's admin role; the rest of the admin routes need a
global admin. The app a token acts on is named by the ``X-Tjobs-App`` header, which may be left out when
the user has a role on one app only. An app the user has no role on answers 404, as for another app's key.

Wrong tokens and passwords spend :class:`tjobs.api.credential_limits.CredentialLimits` (per source address
and per account name) before the node's shared unauthenticated budget is touched.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from fastapi import Request

from tjobs.api.credential_limits import CredentialLimits
from tjobs.api.principal import client_address, remember
from tjobs.api.ratelimit import ApiRateLimits
from tjobs.cancellation import waited_at_most
from tjobs.errors import AppDisabled, Forbidden, InvalidInput, NotFound, StorageUnavailable, Unauthorized
from tjobs.model import App
from tjobs.service.accounts import TOKEN_PREFIX, AccountService, Role, User, may

if TYPE_CHECKING:
    from tjobs.node import Node

APP_HEADER = "x-tjobs-app"
READS = frozenset({"GET", "HEAD"})


def accounts_of(request: Request) -> AccountService:
    accounts: AccountService = request.app.state.accounts
    return accounts


def credential_limits_of(request: Request) -> CredentialLimits:
    limits: CredentialLimits = request.app.state.credential_limits
    return limits


def is_token(key: str | None) -> bool:
    return bool(key) and (key or "").startswith(TOKEN_PREFIX)


def _deadline_s(request: Request) -> float:
    node: Node = request.app.state.node
    return node.settings.storage.create_timeout_s


async def token_user(request: Request, token: str) -> User:
    """The enabled user of an unexpired token; 401 (the failure spent per address) otherwise. The token
    and its user are read from the accounts tables (on the server holding the apps table) on every
    request, not cached, so that a revoked token stops at once: the read is waited for at most
    ``storage.create_timeout_s``, then 503 ``storage_unavailable`` (not a hang)."""
    limits, address = credential_limits_of(request), client_address(request)
    limits.check(address, None)
    deadline_s = _deadline_s(request)
    user = await waited_at_most(
        accounts_of(request).authenticate_token(token),
        deadline_s,
        lambda: StorageUnavailable(
            f"the database server holding the accounts did not answer within {deadline_s:g} s; nothing was "
            f"done; retry after {StorageUnavailable.retry_after_s} s"
        ),
    )
    if user is None:
        limits.failed(address, None)
        raise Unauthorized("unknown, expired or revoked API token")
    return user


async def password_user(request: Request, name: str, password: str) -> User:
    """The enabled user ``name`` if ``password`` is its own; 401 (spent per address and per name) otherwise."""
    limits, address = credential_limits_of(request), client_address(request)
    account = name.strip().lower()[:64]
    limits.check(address, account)
    user = await accounts_of(request).authenticate_password(account, password)
    if user is None:
        limits.failed(address, account)
        raise Unauthorized("wrong user name or password")
    return user


async def basic_or_token_user(request: Request) -> User:
    """The caller of a ``/v1/users/me`` route: ``Basic`` user and password, or ``Bearer`` personal token."""
    scheme, _, value = (request.headers.get("authorization") or "").partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and is_token(value):
        user = await token_user(request, value)
        remember(request, "token", user.name, None)
        return user
    if scheme.lower() == "basic" and value:
        try:
            name, colon, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            name, colon, password = "", "", ""
        if colon:
            user = await password_user(request, name, password)
            remember(request, "user", user.name, None)
            return user
    raise Unauthorized("a user's 'Authorization: Basic <user:password>' or 'Bearer <personal API token>' is required")


async def token_app(request: Request, token: str) -> App:
    """The app a personal token acts on, once its user's role there allows the request's method."""
    user = await token_user(request, token)
    app_id = request.headers.get(APP_HEADER) or (next(iter(user.roles)) if len(user.roles) == 1 else "")
    if not app_id:
        raise InvalidInput(APP_HEADER, "name the app this personal token acts on (X-Tjobs-App: <app id>)")
    needed: Role = "viewer" if request.method in READS else "operator"
    if not may(user, app_id, "viewer"):
        raise NotFound("app", app_id)
    if not may(user, app_id, needed):
        raise Forbidden(f"user {user.name} is a viewer of app {app_id}: it may read, not change")
    node: Node = request.app.state.node
    app = await node.apps.get(app_id, int(_deadline_s(request) * 1000))  # its copy, or a bounded wait
    if app.disabled_at_ms is not None:
        raise AppDisabled(app.id)
    limits: ApiRateLimits = request.app.state.rate_limits
    route = request.scope.get("route")
    limits.admit_request(app, request.method, getattr(route, "path", None), request.query_params.keys())
    remember(request, "token", user.name, app.id, read_only=not may(user, app.id, "operator"))
    return app


async def token_admin(request: Request, token: str) -> None:
    """A personal token on an admin route: a global admin's, or an app admin's on its app's own routes
    (but deleting the app); 403 for another user."""
    user = await token_user(request, token)
    app_id = request.path_params.get("app_id")
    app_route = isinstance(app_id, str) and request.method != "DELETE" and request.url.path.startswith("/v1/apps/")
    if not (user.global_admin or (app_route and may(user, app_id, "admin"))):
        raise Forbidden(f"user {user.name} is not an admin here")
    remember(request, "token", user.name, app_id if isinstance(app_id, str) else None)
