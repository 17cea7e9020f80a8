"""The console's request plumbing: who is signed in, which app a page is about, posted forms with their
CSRF check, and HTML rendering.

- Every console page needs a session (:mod:`tjobs.console.session`); without one it redirects to the
  sign-in page. An app session sees its own app only; the admin session sees every app and the cluster.
  A disabled app's session gets 403 on every page, as its key does on the API.
- **Foreign ids are 404**, never 403: an app session asking for another app's task, flow or app page
  gets the same "not found" page as for an id that does not exist (:meth:`Console.task_owner`,
  :meth:`Console.flow_owner`, :meth:`Console.scope`), as the API does (invariant 10).
- Every POST goes through :meth:`Console.posted`, which refuses it (403) unless its form carries the
  session's CSRF token and the session's role allows it (:func:`role_needed`: a viewer only signs out,
  an operator changes tasks, an app admin its targets); nothing changes before those checks.
- Sessions are rows on the server (:class:`tjobs.service.accounts.AccountService`); a user's role is read
  again on every request.
- A console route answers HTML whatever happens (:class:`ConsoleRoute`): a :class:`TjobsError`
  becomes its status code with an error page, anything unexpected a logged 500 page, never the API's
  JSON (paths no route has: :mod:`tjobs.console.error_pages`).
- Pages are sent with ``Cache-Control: no-store`` (a page may show a key once) and a Content Security
  Policy that admits only the console's own script and style.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from sharding import shard_of_task_id
from tjobs.api.credential_limits import CredentialLimits
from tjobs.api.principal import ADMIN_NAME, remember
from tjobs.clock import iso_ms
from tjobs.console.durations import duration
from tjobs.console.oidc import OidcClient
from tjobs.console.session import COOKIE_NAME, CSRF_FIELD, CSRF_HEADER, SessionCodec, session_secret
from tjobs.errors import AppDisabled, Forbidden, InvalidInput, NotFound, RateLimited, TjobsError
from tjobs.model import App, parse_flow_id
from tjobs.service.accounts import ConsoleSession, Role, User, csrf_token_of, role_rank
from tjobs.service.apps import AppService, hash_api_key

if TYPE_CHECKING:
    import jinja2

    from tjobs.api.ratelimit import ApiRateLimits
    from tjobs.node import Node

logger = logging.getLogger(__name__)

APP_CHOICES = 100  # apps offered by name where the admin has not picked one
MAX_FORM_FIELDS = 2000  # a redrive posts up to 1,000 flow ids
SECURITY_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
}


class SignInRequired(Exception):
    """No valid session: the route answers with a redirect to the sign-in page."""


class CsrfRefused(TjobsError):
    status_code = 403
    code = "csrf"

    def __init__(self) -> None:
        super().__init__("this form is missing its CSRF token or it does not match your session; reload the page")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is signed in: the admin, or one app (``app``); ``role`` is what the session may do there (a key
    session: ``admin``; a user's: its role on the app, ``admin`` for a global admin), ``user`` the user's
    name (``None``: signed in with a key)."""

    app: App | None
    csrf: str
    role: Role = "admin"
    user: str | None = None

    @property
    def admin(self) -> bool:
        return self.app is None

    @property
    def name(self) -> str:
        who = "admin" if self.app is None else f"{self.app.name} ({self.app.id})"
        return who if self.user is None else f"{self.user}, {self.role} of {who}"

    def require_role(self, needed: Role) -> None:
        """403 unless this session's role is ``needed`` or above."""
        if role_rank(self.role) < role_rank(needed):
            raise Forbidden(f"a {self.role} may not do this: it needs the {needed} role")


def key_tag(key_hash: str) -> str:
    """What a key session keeps of its key (server-side): a digest of the key's stored hash, so that
    rotating the key ends the session on every node."""
    return hashlib.sha256(b"tjobs console key:" + key_hash.encode()).hexdigest()


def role_needed(path: str) -> Role:
    """The role a console POST needs: signing out, none (a viewer's); an app's targets and settings, admin;
    anything else (a task's pause, resume, trigger, edit, delete; a redrive), operator."""
    if path == "/console/signout":
        return "viewer"
    if path.startswith(("/console/targets", "/console/apps")):
        return "admin"
    return "operator"


def require_admin(principal: Principal, what: str) -> None:
    """The admin's pages (apps, cluster) do not exist for an app session: 404, as a foreign id."""
    if not principal.admin:
        raise NotFound("page", what)


def require_app_admin(principal: Principal, app_id: str, what: str) -> None:
    """An app's own settings and keys: the admin, or a user signed in on that app with its admin role;
    404 for anyone else (an app key's session included, as before)."""
    if principal.admin:
        return
    if principal.user is None or principal.app is None or principal.app.id != app_id or principal.role != "admin":
        raise NotFound("page", what)


class Form:
    """A posted ``application/x-www-form-urlencoded`` form."""

    def __init__(self, fields: Mapping[str, list[str]]) -> None:
        self._fields = fields

    def get(self, name: str, default: str = "") -> str:
        values = self._fields.get(name)
        return values[0] if values else default

    def getlist(self, name: str) -> list[str]:
        return list(self._fields.get(name, []))

    def __contains__(self, name: str) -> bool:
        return name in self._fields


async def read_form(request: Request) -> Form:
    raw = await request.body()
    try:
        return Form(parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS))
    except ValueError:
        raise InvalidInput("form", f"more than {MAX_FORM_FIELDS} fields") from None


def _templates() -> jinja2.Environment:
    """The page templates' environment. Jinja2 is imported here, when the first page is rendered, not when
    a node starts."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tjobs.console", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["instant"] = lambda ms: "—" if ms is None else iso_ms(int(ms)).replace("T", " ")
    env.filters["iso"] = lambda ms: iso_ms(int(ms))
    env.filters["pretty_json"] = lambda value: json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    env.filters["seconds"] = _seconds
    env.filters["duration"] = duration  # milliseconds for people: "850 ms", "3 min 05 s"
    env.filters["percent"] = lambda ratio: "—" if ratio is None else f"{ratio * 100:.3f} %"
    env.filters["urlquote"] = lambda text: quote(str(text), safe="")
    return env


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def static_file(name: str) -> bytes | None:
    """A file of the console's ``static`` folder (a plain name), or ``None``."""
    if "/" in name or name.startswith("."):
        return None
    entry = resources.files("tjobs.console").joinpath("static", name)
    return entry.read_bytes() if entry.is_file() else None


class Console:
    """What every console route shares: the node, the app service, the session codec and the templates."""

    def __init__(
        self,
        node: Node,
        app_service: AppService,
        rate_limits: ApiRateLimits,
        credential_limits: CredentialLimits | None = None,
    ) -> None:
        self.node = node
        self.apps = app_service
        self.rate_limits = rate_limits
        self.codec = SessionCodec(session_secret(node.settings), node.settings.console.session_ttl_s)
        self.accounts = node.accounts
        self.oidc = OidcClient(node.settings.console)  # sign-in through an identity provider, when configured
        self.credential_limits = credential_limits or CredentialLimits()

    @functools.cached_property
    def templates(self) -> jinja2.Environment:
        return _templates()

    # ---- rendering ---------------------------------------------------------------------------------

    def render(
        self, request: Request, template: str, principal: Principal | None, status: int = 200, **context: Any
    ) -> HTMLResponse:
        html = self.templates.get_template(template).render(
            principal=principal,
            csrf=None if principal is None else principal.csrf,
            path=request.url.path,
            node_id=self.node.node_id,
            **context,
        )
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    async def render_listing(
        self,
        request: Request,
        template: str,
        principal: Principal,
        scoped: App | None,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        """A page listing one app's records: ``scoped`` is that app, or ``None`` when the admin named none
        (the page then offers the apps to choose from)."""
        choices = await self.app_choices(principal, scoped)
        return self.render(request, template, principal, status, scoped=scoped, choices=choices, **context)

    def error_page(self, request: Request, status: int, message: str, headers: Mapping[str, str] = {}) -> HTMLResponse:
        principal: Principal | None = getattr(request.state, "console_principal", None)
        response = self.render(request, "error.html", principal, status, code=status, message=message)
        response.headers.update(headers)
        return response

    # ---- who is signed in --------------------------------------------------------------------------

    async def principal(self, request: Request) -> Principal:
        """The session's principal; :class:`SignInRequired` when there is none (or it no longer holds)."""
        session_id = request.cookies.get(COOKIE_NAME) or ""
        session = await self.accounts.session(session_id)
        if session is None:
            raise SignInRequired
        principal = await self._principal_of(session, csrf_token_of(session_id))
        if principal is None:
            raise SignInRequired
        if principal.app is not None:  # an app's console requests spend its API request budget
            self.rate_limits.admit_request(principal.app, request.method, None)
        request.state.console_principal = principal
        app_id = None if principal.app is None else principal.app.id
        if principal.user is not None:
            remember(
                request, "user", principal.user, app_id, read_only=role_rank(principal.role) < role_rank("operator")
            )
        else:
            remember(request, "console_session", app_id or ADMIN_NAME, app_id)
        return principal

    async def _principal_of(self, session: ConsoleSession, csrf: str) -> Principal | None:
        """Who a live session row is, while its key (or its user and role) still holds."""
        if session.kind == "admin":
            admin_key = self.node.settings.api.admin_key
            if admin_key and hmac.compare_digest(session.key_tag, key_tag(hash_api_key(admin_key))):
                return Principal(None, csrf)
            return None
        if session.kind == "user":
            return await self._user_principal(session, csrf)
        app = await self._app_or_none(session.subject)
        if app is None or not hmac.compare_digest(session.key_tag, key_tag(app.api_key_hash)):
            return None
        if app.disabled_at_ms is not None:
            raise AppDisabled(app.id)
        return Principal(app, csrf)

    async def _user_principal(self, session: ConsoleSession, csrf: str) -> Principal | None:
        """A user's session: its user still enabled, and its role on the app it signed in to (the session's
        ``key_tag`` names that app; empty for a global admin) read afresh on every request."""
        user = await self.accounts.find_user(session.subject)
        if user is None or user.disabled_at_ms is not None:
            return None
        if user.global_admin:
            return Principal(None, csrf, "admin", user.name)
        role = user.roles.get(session.key_tag)
        app = None if role is None else await self._app_or_none(session.key_tag)
        if app is None or role is None:
            return None
        if app.disabled_at_ms is not None:
            raise AppDisabled(app.id)
        return Principal(app, csrf, role, user.name)

    async def _app_or_none(self, app_id: str) -> App | None:
        try:
            return await self.node.apps.get(app_id)
        except NotFound:
            return None

    async def sign_in(self, key: str, address: str) -> str | None:
        """Check a key typed into the sign-in form: the admin key or an app's API key. Returns the new
        session's id (the cookie's value), or ``None`` for an unknown key; :class:`AppDisabled` for the key of
        a disabled app; :class:`RateLimited` while ``address`` has spent its wrong credentials."""
        self.credential_limits.check(address, None)
        key = key.strip()
        ttl_s = self.codec.ttl_s
        admin_key = self.node.settings.api.admin_key
        if key and admin_key and hmac.compare_digest(key.encode(), admin_key.encode()):
            session_id, _ = await self.accounts.open_session("admin", "", key_tag(hash_api_key(admin_key)), ttl_s)
            return session_id
        app = await self.node.apps.authenticate(key) if key else None
        if app is None:
            self.credential_limits.failed(address, None)
            return None
        if app.disabled_at_ms is not None:
            raise AppDisabled(app.id)
        session_id, _ = await self.accounts.open_session("app", app.id, key_tag(app.api_key_hash), ttl_s)
        return session_id

    async def sign_in_user(self, name: str, password: str, app_id: str, address: str) -> str | None:
        """Check a user name and password (and the app to act on: may be empty for a global admin or a user
        with one app). Returns the new session's id, or ``None`` for a wrong name or password; 429 while the
        address or the name has spent its wrong credentials; 403 for an app the user has no role on."""
        account = name.strip().lower()[:64]
        self.credential_limits.check(address, account)
        user = await self.accounts.authenticate_password(account, password)
        if user is None:
            self.credential_limits.failed(address, account)
            return None
        return await self.open_user_session(user, app_id)

    async def open_user_session(self, user: User, app_id: str) -> str:
        """A new session of ``user`` (already authenticated) on ``app_id``: may be empty for a global admin or
        a user with one app; 403 for an app the user has no role on."""
        app_id = app_id.strip()
        if user.global_admin:
            app_id = ""
        elif not app_id and len(user.roles) == 1:
            app_id = next(iter(user.roles))
        elif app_id not in user.roles:
            raise Forbidden(f"user {user.name} has no role on app {app_id!r}: name one of its apps")
        session_id, _ = await self.accounts.open_session("user", user.name, app_id, self.codec.ttl_s)
        return session_id

    async def sign_out(self, request: Request) -> None:
        """End the request's session: its row is deleted, so every node refuses its cookie from now on."""
        await self.accounts.close_session(request.cookies.get(COOKIE_NAME) or "")

    def sign_in_token(self, pre_session: str) -> str:
        """The CSRF token of the sign-in form, bound to the browser's pre-session cookie."""
        return self.codec.csrf_token("signin:" + hashlib.sha256(pre_session.encode()).hexdigest())

    async def posted(self, request: Request) -> tuple[Principal, Form]:
        """The principal and form of a POST, or :class:`CsrfRefused` unless it carries the CSRF token."""
        principal = await self.principal(request)
        form = await read_form(request)
        given = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
        if not given or not hmac.compare_digest(given.encode(), principal.csrf.encode()):
            raise CsrfRefused
        principal.require_role(role_needed(request.url.path))
        return principal, form

    # ---- which app a page is about -----------------------------------------------------------------

    async def listing_scope(self, request: Request, app_id: str | None) -> tuple[Principal, App | None]:
        """The request's :meth:`principal` and the app its listing shows (:meth:`scope` of ``app_id``)."""
        principal = await self.principal(request)
        return principal, await self.scope(principal, app_id)

    async def scope(self, principal: Principal, app_id: str | None) -> App | None:
        """The app a listing shows: an app session's own (another id: 404); for the admin, the app named
        by ``app_id`` (404 if none), or ``None`` when none is named (the page offers a choice)."""
        if principal.app is not None:
            if app_id and app_id != principal.app.id:
                raise NotFound("app", app_id)
            return principal.app
        if not app_id:
            return None
        return await self.apps.get(app_id)

    async def app_choices(self, principal: Principal, scoped: App | None) -> list[App]:
        """The apps the admin may pick from when a page names none (the first page of the app list)."""
        if not principal.admin or scoped is not None:
            return []
        return list((await self.apps.list_page(APP_CHOICES)).items)

    async def task_owner(self, principal: Principal, task_id: int) -> App:
        """The app to act as on ``task_id``: an app session's own (the service then answers 404 for a
        foreign id); for the admin, the task's owner (404 if there is no such task)."""
        if principal.app is not None:
            return principal.app
        node = self.node
        if task_id <= 0 or shard_of_task_id(task_id) >= node.topology.shard_count:
            raise NotFound("task", task_id)
        return await self.apps.get(await node.tasks.owner_of(task_id))

    async def flow_owner(self, principal: Principal, flow_id: str) -> App:
        if principal.app is not None:
            return principal.app
        try:
            task_id, _ = parse_flow_id(flow_id)
        except ValueError:
            raise NotFound("flow", flow_id) from None
        try:
            return await self.task_owner(principal, task_id)
        except NotFound:
            raise NotFound("flow", flow_id) from None


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


class ConsoleRoute(APIRoute):
    """A console route: whatever goes wrong is answered as an HTML page (or a redirect to sign in)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/console/signin?next={quote(target, safe='')}", status_code=303)
            except RateLimited as error:
                headers = {"retry-after": str(error.retry_after_s)}
                return console_of(request).error_page(request, error.status_code, error.message, headers)
            except TjobsError as error:
                return console_of(request).error_page(request, error.status_code, error.message)
            except RequestValidationError as error:
                first = error.errors()[0] if error.errors() else {}
                field = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "path", "body"))
                message = f"{field}: {first.get('msg', 'invalid')}" if field else str(first.get("msg", "invalid"))
                return console_of(request).error_page(request, 422, message)
            except StarletteHTTPException:
                raise  # answered as a page by tjobs.console.error_pages
            except Exception:  # a bug: logged with its traceback, answered as a page, never as text or JSON
                logger.exception("console page %s failed", request.url.path, extra={"action": "console_page_failed"})
                message = "Something went wrong on this node while making this page; it is logged. Try again."
                return console_of(request).error_page(request, 500, message)

        return handle
