"""Apps (admin only; an app session gets 404 here): the list, creating one, its page, its limits,
rotating its API key or signing secret, disabling or enabling it, and deleting it.

Disable, enable and delete are confirmed on a page of their own; deleting also asks for the app's id
typed again (the service refuses otherwise, as ``DELETE /v1/apps/{id}?confirm=<id>`` does).

A new API key or signing secret appears once, on the page that answers the create or the rotation
(sent ``no-store``); no page shows it again: the store keeps only the key's hash, and the app's page
shows how many signing secrets are live, not their values.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.console.context import ConsoleRoute, Form, Principal, console_of, require_admin, require_app_admin
from tjobs.errors import ConfirmationRequired, InvalidInput, NotFound
from tjobs.model import App
from tjobs.service.cursors import MAX_CURSOR_CHARS

router = APIRouter(route_class=ConsoleRoute)

Rotation = Literal["api_key", "secret", "both"]
AppAction = Literal["disable", "enable", "delete"]
PAGE_SIZE = 100
APP_NOTICES = {"updated": "Limits saved.", "disabled": "App disabled.", "enabled": "App enabled."}
NUMBER_FIELDS = (
    ("rate_limit_per_s", float),
    ("max_concurrency", int),
    ("max_active_tasks", int),
    ("api_rate_limit_per_s", float),
    ("create_rate_limit_per_s", float),
    ("run_log_retention_days", float),
)
OPTIONAL_NUMBERS = frozenset(
    {"max_active_tasks", "api_rate_limit_per_s", "create_rate_limit_per_s", "run_log_retention_days"}
)


def app_fields(form: Form, *, creating: bool) -> dict[str, Any]:
    """The app create/update body a form describes: blank numbers are left out (an update clears an
    optional limit with a blank field, back to the node default)."""
    body: dict[str, Any] = {}
    if creating or "name" in form:
        body["name"] = form.get("name")
    for name, kind in NUMBER_FIELDS:
        if name not in form:
            continue
        text = form.get(name).strip()
        if not text:
            if not creating and name in OPTIONAL_NUMBERS:
                body[name] = None
            continue
        try:
            body[name] = kind(text)
        except ValueError:
            raise InvalidInput(name, f"must be {'an integer' if kind is int else 'a number'}") from None
    if "allowed_callback_hosts" in form:
        body["allowed_callback_hosts"] = [
            h.strip() for h in form.get("allowed_callback_hosts").splitlines() if h.strip()
        ]
    if "callback_defaults" in form:
        text = form.get("callback_defaults").strip()
        try:
            body["callback_defaults"] = json.loads(text) if text else {}
        except json.JSONDecodeError as error:
            raise InvalidInput("callback_defaults", f"not valid JSON ({error.msg})") from None
    return body


def _view(app: App) -> dict[str, Any]:
    settings = app.settings
    return {
        "id": app.id,
        "name": app.name,
        "rate_limit_per_s": app.rate_limit_per_s,
        "max_concurrency": app.max_concurrency,
        "created_at_ms": app.created_at_ms,
        "allowed_callback_hosts": settings.get("allowed_callback_hosts") or [],
        "callback_defaults": settings.get("callback_defaults") or {},
        "max_active_tasks": settings.get("max_active_tasks"),
        "api_rate_limit_per_s": settings.get("api_rate_limit_per_s"),
        "create_rate_limit_per_s": settings.get("create_rate_limit_per_s"),
        "run_log_retention_days": settings.get("run_log_retention_days"),
        "live_secrets": len(app.secrets),
        "disabled_at_ms": app.disabled_at_ms,
    }


async def _apps_page(
    request: Request, principal: Principal, cursor: str | None, status: int = 200, **context: Any
) -> Response:
    console = console_of(request)
    page = await console.apps.list_page(PAGE_SIZE, cursor)
    return console.render(
        request,
        "apps.html",
        principal,
        status,
        apps=[_view(app) for app in page.items],
        next_cursor=page.next_cursor,
        **context,
    )


@router.get("/console/apps")
async def apps_page(
    request: Request,
    app: Annotated[str | None, Query(max_length=200)] = None,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    done: Annotated[str | None, Query(max_length=20)] = None,
) -> Response:
    principal = await console_of(request).principal(request)
    require_admin(principal, "apps")
    if app:
        return RedirectResponse(f"/console/apps/{quote(app, safe='')}", status_code=303)
    notice = "App deleted." if done == "deleted" else None
    return await _apps_page(request, principal, cursor or None, values={}, error=None, notice=notice)


@router.post("/console/apps")
async def create_app(request: Request) -> Response:
    console = console_of(request)
    principal, form = await console.posted(request)
    require_admin(principal, "apps")
    try:
        app, api_key = await console.apps.create(app_fields(form, creating=True))
    except InvalidInput as error:
        values = {name: form.get(name) for name in ("name", *(n for n, _ in NUMBER_FIELDS), "allowed_callback_hosts")}
        return await _apps_page(request, principal, None, 422, values=values, error=error.message, notice=None)
    return console.render(
        request,
        "app_secrets.html",
        principal,
        201,
        app=_view(app),
        api_key=api_key,
        secret=app.secrets[0],
        created=True,
    )


async def _app_page(request: Request, app_id: str, template: str, **context: Any) -> Response:
    """A page about one app (admin only): ``template`` given the app's view and ``context``."""
    console = console_of(request)
    principal = await console.principal(request)
    require_app_admin(principal, app_id, "apps")
    app = await console.apps.get(app_id)
    return console.render(request, template, principal, app=_view(app), **context)


@router.get("/console/apps/{app_id}")
async def app_page(request: Request, app_id: str, done: Annotated[str | None, Query(max_length=20)] = None) -> Response:
    return await _app_page(request, app_id, "app.html", error=None, notice=APP_NOTICES.get(done or ""))


@router.post("/console/apps/{app_id}/limits")
async def update_limits(request: Request, app_id: str) -> Response:
    console = console_of(request)
    principal, form = await console.posted(request)
    require_app_admin(principal, app_id, "apps")
    try:
        await console.apps.update(app_id, app_fields(form, creating=False))
    except InvalidInput as error:
        app = await console.apps.get(app_id)
        return console.render(request, "app.html", principal, 422, app=_view(app), error=error.message, notice=None)
    return RedirectResponse(f"/console/apps/{app_id}?done=updated", status_code=303)


@router.get("/console/apps/{app_id}/rotate")
async def confirm_rotate(request: Request, app_id: str, what: Annotated[Rotation, Query()]) -> Response:
    return await _app_page(request, app_id, "app_rotate.html", what=what)


@router.post("/console/apps/{app_id}/rotate")
async def rotate(request: Request, app_id: str) -> Response:
    console = console_of(request)
    principal, form = await console.posted(request)
    require_app_admin(principal, app_id, "apps")
    what = form.get("what")
    if what not in ("api_key", "secret", "both"):
        raise InvalidInput("what", "must be api_key, secret or both")
    app, api_key = await console.apps.rotate(
        app_id, api_key=what in ("api_key", "both"), secret=what in ("secret", "both")
    )
    secret = app.secrets[0] if what in ("secret", "both") else None
    return console.render(
        request, "app_secrets.html", principal, app=_view(app), api_key=api_key, secret=secret, created=False
    )


@router.get("/console/apps/{app_id}/confirm")
async def confirm_app_action(request: Request, app_id: str, action: Annotated[AppAction, Query()]) -> Response:
    return await _app_page(request, app_id, "app_confirm.html", action=action, error=None)


@router.post("/console/apps/{app_id}/{action}")
async def app_action(request: Request, app_id: str, action: str) -> Response:
    """Disable, enable or delete (routes above take /limits and /rotate first)."""
    console = console_of(request)
    principal, form = await console.posted(request)
    require_admin(principal, "apps")
    if action not in ("disable", "enable", "delete"):
        raise NotFound("action", action)
    if action == "delete":
        try:
            await console.apps.delete(app_id, form.get("confirm").strip() or None)
        except ConfirmationRequired:
            app = await console.apps.get(app_id)
            error = f"Type the app's id, {app.id}, to delete it."
            return console.render(
                request, "app_confirm.html", principal, 400, app=_view(app), action=action, error=error
            )
        return RedirectResponse("/console/apps?done=deleted", status_code=303)
    await console.apps.set_disabled(app_id, action == "disable")
    return RedirectResponse(f"/console/apps/{quote(app_id, safe='')}?done={action}d", status_code=303)
