"""Who made a request: the :class:`Principal` the authentication of the API and the console leaves on
``request.state.principal``, read back with :func:`principal_of` (the audit log records it).

Kinds:

- ``app_key``: an app's API key (``name`` and ``app_id`` are the app's id);
- ``admin_key``: the admin key (``name`` is ``"admin"``, no app);
- ``user`` / ``token``: a named operator account, or one of its personal tokens (``name``: the user);
- ``console_session``: a console session (``name``: ``"admin"`` or the app's id; ``app_id`` for an app's).

``source`` is the client's address as the server saw it (the socket peer, ``""`` when unknown).
``read_only`` marks a caller that may read its app but change nothing there (a viewer's token or console
session): the API answers it the tasks and flows it reads with their secret-looking values masked
(:func:`reads_masked`). An app's key (a service reading back what it registered), the admin, and an
operator or admin of the app read them as stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from starlette.requests import Request

from tjobs.errors import Unauthorized

PrincipalKind = Literal["app_key", "admin_key", "user", "token", "console_session"]
PRINCIPAL_KINDS: tuple[PrincipalKind, ...] = ("app_key", "admin_key", "user", "token", "console_session")
ADMIN_NAME = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """One authenticated caller (see the module docstring)."""

    kind: PrincipalKind
    name: str
    app_id: str | None
    source: str
    read_only: bool = False


def client_address(request: Request) -> str:
    """The request's peer address, ``""`` when the server does not know it."""
    return request.client.host if request.client is not None else ""


def remember(
    request: Request, kind: PrincipalKind, name: str, app_id: str | None, *, read_only: bool = False
) -> Principal:
    """Record who made ``request`` (the authentication dependencies call this once they accept a caller)."""
    principal = Principal(kind, name, app_id, client_address(request), read_only)
    request.state.principal = principal
    return principal


def principal_of(request: Request) -> Principal:
    """The caller the request's authentication recorded; 401 if none did (a route that changes anything
    always authenticates first, so this means a route forgot to)."""
    principal = getattr(request.state, "principal", None)
    if not isinstance(principal, Principal):
        raise Unauthorized("this request has no authenticated caller")
    return principal


def reads_masked(request: Request) -> bool:
    """Whether the request's answer shows tasks and flows with their secret-looking values masked: for a
    caller that may not change them (a viewer), or one no authentication recorded."""
    principal = getattr(request.state, "principal", None)
    return not isinstance(principal, Principal) or principal.read_only
