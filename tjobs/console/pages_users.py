"""Operator accounts (the admin only): the users with their roles, and the live console sessions, each
revocable (its row is deleted: every node refuses its cookie at once). Users are made and changed with
the API or ``tjobs users`` (docs/operations.md, "Operator accounts")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.console.context import ConsoleRoute, console_of, require_admin

router = APIRouter(route_class=ConsoleRoute)


@router.get("/console/users")
async def users_page(request: Request, done: Annotated[str | None, Query(max_length=20)] = None) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    require_admin(principal, "users")
    users = await console.accounts.list_users()
    sessions = await console.accounts.list_sessions(None)
    notice = "Session revoked: every node refuses it now." if done == "revoked" else None
    return console.render(request, "users.html", principal, users=users, sessions=sessions, notice=notice)


@router.post("/console/sessions/{session_id}/revoke")
async def revoke_session(request: Request, session_id: str) -> Response:
    console = console_of(request)
    principal, _ = await console.posted(request)
    require_admin(principal, "users")
    await console.accounts.revoke_session(session_id)
    return RedirectResponse("/console/users?done=revoked", status_code=303)
