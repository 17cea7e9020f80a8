"""``tjobs users ...`` (admin key, or a global admin's token) and ``tjobs tokens ...`` (a user, with its
password): operator accounts over the API (``/v1/users``, ``/v1/users/me/tokens``, ``/v1/sessions``;
docs/operations.md, "Operator accounts"). Passwords are prompted for, never taken from the command line.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

import typer
from rich.table import Table

from tjobs.cli.api_commands import DEFAULT_URL, AdminKey, AsJson, Url, answer, cli_client, out

users_app = typer.Typer(help="Operator accounts: users, their roles per app, console sessions (admin key)")
tokens_app = typer.Typer(help="Your personal API tokens (user name and password)")

Roles = Annotated[
    list[str] | None, typer.Option("--role", help="APP_ID=viewer|operator|admin (repeatable; replaces the roles)")
]


def _call(
    url: str,
    method: str,
    path: str,
    auth: str | tuple[str, str],
    body: Any = None,
    params: dict[str, Any] | None = None,
) -> Any:
    """The API's JSON answer through the CLI's client (``auth``: a bearer key, or a user name and password),
    or the error printed and the command ended (exit 1)."""
    if isinstance(auth, str):
        authorization = f"Bearer {auth}"
    else:
        authorization = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    return answer(cli_client(url, authorization), lambda sdk: sdk.request(method, path, json=body, params=params))


def _admin(admin_key: str | None) -> str:
    if not admin_key:
        raise typer.BadParameter("give --admin-key (or TJOBS_ADMIN_KEY): the admin key or a global admin's token")
    return admin_key


def _roles(roles: list[str] | None) -> dict[str, str] | None:
    if roles is None:
        return None
    parsed: dict[str, str] = {}
    for given in roles:
        app_id, equals, role = given.partition("=")
        if not equals or not app_id or not role:
            raise typer.BadParameter(f"{given!r} is not APP_ID=ROLE", param_hint="--role")
        parsed[app_id] = role
    return parsed


def _show(value: Any, as_json: bool, table: Table | None) -> None:
    if as_json or table is None:
        out().print_json(json.dumps(value))
    else:
        out().print(table)


def _users_table(users: list[dict[str, Any]]) -> Table:
    table = Table("name", "roles", "global admin", "state", "created")
    for user in users:
        roles = ", ".join(f"{app}={role}" for app, role in sorted(user["roles"].items()))
        state = "disabled" if user["disabled"] else "enabled"
        table.add_row(user["name"], roles, "yes" if user["global_admin"] else "", state, user["created_at"][:10])
    return table


def _password(confirm: bool = True) -> str:
    return str(typer.prompt("Password", hide_input=True, confirmation_prompt=confirm, err=True))


@users_app.command("create")
def user_create(
    name: str,
    roles: Roles = None,
    global_admin: Annotated[bool, typer.Option("--global-admin", help="may do what the admin key does")] = False,
    no_password: Annotated[bool, typer.Option("--no-password", help="tokens only: no password sign-in")] = False,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Create a user (prompts for its password)."""
    body: dict[str, Any] = {"name": name, "global_admin": global_admin, "roles": _roles(roles) or {}}
    if not no_password:
        body["password"] = _password()
    user = _call(url, "POST", "/v1/users", _admin(admin_key), body)
    _show(user, as_json, _users_table([user]))


@users_app.command("list")
def user_list(url: Url = DEFAULT_URL, admin_key: AdminKey = None, as_json: AsJson = False) -> None:
    """List the users."""
    users = _call(url, "GET", "/v1/users", _admin(admin_key))["items"]
    _show(users, as_json, _users_table(users))


def _update(name: str, body: dict[str, Any], url: str, admin_key: str | None, as_json: bool) -> None:
    user = _call(url, "PATCH", f"/v1/users/{name}", _admin(admin_key), body)
    _show(user, as_json, _users_table([user]))


@users_app.command("set-roles")
def user_set_roles(
    name: str,
    roles: Roles = None,
    global_admin: Annotated[bool | None, typer.Option("--global-admin/--no-global-admin")] = None,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Replace a user's roles per app (and/or its global admin flag)."""
    body = {
        key: value for key, value in (("roles", _roles(roles)), ("global_admin", global_admin)) if value is not None
    }
    _update(name, body, url, admin_key, as_json)


@users_app.command("disable")
def user_disable(name: str, url: Url = DEFAULT_URL, admin_key: AdminKey = None, as_json: AsJson = False) -> None:
    """Disable a user: its tokens and password are refused, its console sessions end."""
    _update(name, {"disabled": True}, url, admin_key, as_json)


@users_app.command("enable")
def user_enable(name: str, url: Url = DEFAULT_URL, admin_key: AdminKey = None, as_json: AsJson = False) -> None:
    """Enable a user again."""
    _update(name, {"disabled": False}, url, admin_key, as_json)


@users_app.command("reset-password")
def user_reset_password(name: str, url: Url = DEFAULT_URL, admin_key: AdminKey = None, as_json: AsJson = False) -> None:
    """Set a user's password (prompted); its console sessions end."""
    _update(name, {"password": _password()}, url, admin_key, as_json)


@users_app.command("sessions")
def user_sessions(
    user: Annotated[str | None, typer.Option("--user", help="one user's sessions (default: all)")] = None,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """List the live console sessions."""
    sessions = _call(url, "GET", "/v1/sessions", _admin(admin_key), params={"user": user})["items"]
    table = Table("kind", "subject", "created", "expires")
    table.add_column("id", no_wrap=True)
    for session in sessions:
        table.add_row(session["kind"], session["subject"], session["created_at"], session["expires_at"], session["id"])
    _show(sessions, as_json, table)


@users_app.command("revoke-session")
def user_revoke_session(session_id: str, url: Url = DEFAULT_URL, admin_key: AdminKey = None) -> None:
    """Revoke a console session: every node refuses its cookie at once."""
    _call(url, "DELETE", f"/v1/sessions/{session_id}", _admin(admin_key))
    out().print(f"revoked session {session_id}")


User = Annotated[str, typer.Option("--user", envvar="TJOBS_USER", help="your user name")]


@tokens_app.command("create")
def token_create(
    user: User,
    name: Annotated[str, typer.Option("--name", help="what the token is for")],
    expires_in_s: Annotated[int | None, typer.Option("--expires-in-s", help="60 s to 366 days")] = None,
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Create a personal API token (prompts for your password); it is printed once."""
    body = {"name": name, "expires_in_s": expires_in_s}
    token = _call(url, "POST", "/v1/users/me/tokens", (user, _password(False)), body)
    if as_json:
        _show(token, True, None)
    else:
        out().print(f"token {token['id']} ({token['name']}): {token['token']}\nstore it now: it is not shown again")


@tokens_app.command("list")
def token_list(user: User, url: Url = DEFAULT_URL, as_json: AsJson = False) -> None:
    """List your personal API tokens (never the tokens themselves)."""
    tokens = _call(url, "GET", "/v1/users/me/tokens", (user, _password(False)))["items"]
    table = Table("id", "name", "created", "expires")
    for token in tokens:
        table.add_row(token["id"], token["name"], token["created_at"], token["expires_at"] or "never")
    _show(tokens, as_json, table)


@tokens_app.command("revoke")
def token_revoke(token_id: str, user: User, url: Url = DEFAULT_URL) -> None:
    """Revoke one of your personal API tokens."""
    _call(url, "DELETE", f"/v1/users/me/tokens/{token_id}", (user, _password(False)))
    out().print(f"revoked token {token_id}")
