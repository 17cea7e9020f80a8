"""Operator accounts (:mod:`tjobs.service.accounts`): users (admin: create, list, show, set roles, disable,
reset password), the caller's personal API tokens (``/v1/users/me/tokens``: create, list, revoke) and the
console's server-side sessions (admin: list, revoke). "Admin" is the admin key or a global admin's token."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from tjobs.api.accounts_auth import accounts_of, basic_or_token_user
from tjobs.api.deps import errors, json_body, json_response, ok, path_parameter, require_admin
from tjobs.clock import iso_ms
from tjobs.errors import InvalidInput, known_object
from tjobs.service.accounts import (
    SESSION_ID_PATTERN,
    TOKEN_ID_PATTERN,
    USER_NAME_PATTERN,
    ApiToken,
    ConsoleSession,
    User,
    check_user_name,
)

me = APIRouter(prefix="/v1", tags=["accounts"])
admin = APIRouter(prefix="/v1", tags=["accounts"], dependencies=[Depends(require_admin)])

UserNamePath = Annotated[str, path_parameter(USER_NAME_PATTERN, 64, "a user's name")]
TokenIdPath = Annotated[str, path_parameter(TOKEN_ID_PATTERN, 16, "a personal token's id")]
SessionIdPath = Annotated[str, path_parameter(SESSION_ID_PATTERN, 64, "a console session's id")]
_CREATE_FIELDS = frozenset({"name", "password", "global_admin", "roles"})
_UPDATE_FIELDS = frozenset({"password", "global_admin", "roles", "disabled"})


def user_json(user: User) -> dict[str, Any]:
    return {
        "name": user.name,
        "global_admin": user.global_admin,
        "roles": dict(user.roles),
        "password_set": bool(user.password_hash),
        "disabled": user.disabled_at_ms is not None,
        "disabled_at": None if user.disabled_at_ms is None else iso_ms(user.disabled_at_ms),
        "created_at": iso_ms(user.created_at_ms),
    }


def token_json(token: ApiToken, secret: str | None = None) -> dict[str, Any]:
    content = {
        "id": token.id,
        "name": token.name,
        "created_at": iso_ms(token.created_at_ms),
        "expires_at": None if token.expires_at_ms is None else iso_ms(token.expires_at_ms),
    }
    return content if secret is None else {**content, "token": secret}


def session_json(session: ConsoleSession) -> dict[str, Any]:
    return {
        "id": session.id_hash,
        "kind": session.kind,
        "subject": session.subject,
        "created_at": iso_ms(session.created_at_ms),
        "expires_at": iso_ms(session.expires_at_ms),
    }


async def _object(request: Request, allowed: frozenset[str]) -> dict[str, Any]:
    return known_object(await json_body(request), allowed)


def _flag(body: dict[str, Any], name: str) -> bool | None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise InvalidInput(name, "must be true or false")
    return value


# ---- users (admin) -------------------------------------------------------------------------------


@admin.post(
    "/users",
    status_code=201,
    summary="Create a user (admin): name, password (optional), roles per app, global admin",
    responses=errors(401, 403, 409, 422),
)
async def create_user(request: Request) -> Any:
    body = await _object(request, _CREATE_FIELDS)
    password = body.get("password")
    if password is not None and not isinstance(password, str):
        raise InvalidInput("password", "must be a string")
    user = await accounts_of(request).create_user(
        check_user_name(body.get("name")),
        password,
        global_admin=bool(_flag(body, "global_admin")),
        roles={} if body.get("roles") is None else body["roles"],
    )
    return json_response(user_json(user), 201)


@admin.get("/users", summary="List the users by name (admin)", responses=errors(401, 403))
async def list_users(request: Request) -> Any:
    return json_response({"items": [user_json(user) for user in await accounts_of(request).list_users()]})


@me.get("/users/me", summary="The calling user (Basic user:password or a personal token)", responses=errors(401))
async def show_me(request: Request) -> Any:
    return json_response(user_json(await basic_or_token_user(request)))


@admin.get("/users/{name}", summary="Show a user (admin)", responses=errors(401, 403, 404))
async def show_user(name: UserNamePath, request: Request) -> Any:
    return json_response(user_json(await accounts_of(request).user(name)))


@admin.patch(
    "/users/{name}",
    summary="Set a user's roles, global admin flag or password, or disable / enable it (admin); disabling "
    "it or setting its password ends its console sessions",
    responses=errors(401, 403, 404, 422),
)
async def update_user(name: UserNamePath, request: Request) -> Any:
    body = await _object(request, _UPDATE_FIELDS)
    password = body.get("password")
    if password is not None and not isinstance(password, str):
        raise InvalidInput("password", "must be a string")
    user = await accounts_of(request).update_user(
        name,
        roles=body.get("roles"),
        global_admin=_flag(body, "global_admin"),
        disabled=_flag(body, "disabled"),
        password=password,
    )
    return json_response(user_json(user))


# ---- the caller's personal API tokens --------------------------------------------------------------


@me.post(
    "/users/me/tokens",
    status_code=201,
    summary="Create a personal API token: name, expires_in_s (optional); the token is answered once",
    responses=errors(401, 422),
)
async def create_token(request: Request) -> Any:
    user = await basic_or_token_user(request)
    body = await _object(request, frozenset({"name", "expires_in_s"}))
    secret, token = await accounts_of(request).create_token(user.name, body.get("name"), body.get("expires_in_s"))
    return json_response(token_json(token, secret), 201)


@me.get("/users/me/tokens", summary="List the caller's personal API tokens", responses=errors(401))
async def list_tokens(request: Request) -> Any:
    user = await basic_or_token_user(request)
    return json_response({"items": [token_json(t) for t in await accounts_of(request).list_tokens(user.name)]})


@me.delete(
    "/users/me/tokens/{token_id}",
    status_code=204,
    summary="Revoke one of the caller's personal API tokens",
    responses={**ok(204, None, "revoked"), **errors(401, 404)},
)
async def revoke_token(token_id: TokenIdPath, request: Request) -> Response:
    user = await basic_or_token_user(request)
    await accounts_of(request).revoke_token(user.name, token_id)
    return Response(status_code=204)


# ---- console sessions (admin) -----------------------------------------------------------------------


@admin.get(
    "/sessions",
    summary="List the live console sessions (admin): one user's (user=...) or all",
    responses=errors(401, 403, 422),
)
async def list_sessions(
    request: Request, user: Annotated[str | None, Query(max_length=64, pattern=USER_NAME_PATTERN)] = None
) -> Any:
    sessions = await accounts_of(request).list_sessions(user)
    return json_response({"items": [session_json(session) for session in sessions]})


@admin.delete(
    "/sessions/{session_id}",
    status_code=204,
    summary="Revoke a console session (admin): every node refuses its cookie at once",
    responses={**ok(204, None, "revoked"), **errors(401, 403, 404)},
)
async def revoke_session(session_id: SessionIdPath, request: Request) -> Response:
    await accounts_of(request).revoke_session(session_id)
    return Response(status_code=204)
