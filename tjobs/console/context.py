"""The console's request plumbing: who is signed in, which app a page is about, posted forms with their
CSRF check, and HTML rendering.

- Every console page needs a session (:mod:`tjobs.console.session`); without one it redirects to the
  sign-in page. An app session sees its own app only; the admin session sees every app and the cluster.
  A disabled app's session gets 403 on every page, as its key does on the API.
- **Foreign ids are 404**, never 403: an app session asking for another app's task, flow or app page
  gets the same "not found" page as for an id that does not exist (:meth:`Console.task_owner`,
  :meth:`Console.flow_owner`, :meth:`Console.scope`), as the API does (invariant 10).
- Every POST goes through :meth:`Console.posted`, which refuses it (403) unless its form carries the
  session's CSRF token; nothing changes before that check.
- A console route answers HTML whatever happens (:class:`ConsoleRoute`): a :class:`TjobsError`
  becomes its status code with an error page, never the API's JSON.
- Pages are sent with ``Cache-Control: no-store`` (a page may show a key once) and a Content Security
  Policy that admits only the console's own script and style.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute

from sharding import shard_of_task_id
from tjobs.api.principal import ADMIN_NAME, remember
from tjobs.clock import iso_ms
from tjobs.console.session import COOKIE_NAME, CSRF_FIELD, CSRF_HEADER, SessionClaim, SessionCodec, session_secret
from tjobs.errors import AppDisabled, InvalidInput, NotFound, RateLimited, TjobsError
from tjobs.model import App, parse_flow_id
from tjobs.service.apps import AppService, hash_api_key

if TYPE_CHECKING:
    import jinja2

    from tjobs.api.ratelimit import ApiRateLimits
    from tjobs.node import Node

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
    """Who is signed in: the admin, or one app (``app``)."""

    app: App | None
    csrf: str

    @property
    def admin(self) -> bool:
        return self.app is None

    @property
    def name(self) -> str:
        return "admin" if self.app is None else f"{self.app.name} ({self.app.id})"


def require_admin(principal: Principal, what: str) -> None:
    """The admin's pages (apps, cluster) do not exist for an app session: 404, as a foreign id."""
    if not principal.admin:
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

    def __init__(self, node: Node, app_service: AppService, rate_limits: ApiRateLimits) -> None:
        self.node = node
        self.apps = app_service
        self.rate_limits = rate_limits
        self.codec = SessionCodec(session_secret(node.settings), node.settings.console.session_ttl_s)

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
        claim = self.codec.read(request.cookies.get(COOKIE_NAME), self.node.clock.now_ms())
        if claim is None:
            raise SignInRequired
        principal = await self._principal_of(claim)
        if principal is None:
            raise SignInRequired
        if principal.app is not None:  # an app's console requests spend its API request budget
            self.rate_limits.admit_request(principal.app, request.method, None)
        request.state.console_principal = principal
        app_id = None if principal.app is None else principal.app.id
        remember(request, "console_session", app_id or ADMIN_NAME, app_id)
        return principal

    async def _principal_of(self, claim: SessionClaim) -> Principal | None:
        csrf = self.codec.csrf_token(claim.nonce)
        if claim.kind == "admin":
            admin_key = self.node.settings.api.admin_key
            if admin_key and self.codec.tag_matches(claim, hash_api_key(admin_key)):
                return Principal(None, csrf)
            return None
        assert claim.app_id is not None
        try:
            app = await self.node.apps.get(claim.app_id)
        except NotFound:
            return None
        if not self.codec.tag_matches(claim, app.api_key_hash):
            return None
        if app.disabled_at_ms is not None:
            raise AppDisabled(app.id)
        return Principal(app, csrf)

    async def sign_in(self, key: str) -> tuple[str, App | None] | None:
        """Check a key typed into the sign-in form: the admin key or an app's API key. Returns the session
        cookie value and the app (``None``: admin), or ``None`` for an unknown key; :class:`AppDisabled`
        for the key of a disabled app."""
        self.rate_limits.admit_unauthenticated()  # every attempt, so keys cannot be guessed quickly
        key = key.strip()
        if not key:
            return None
        now_ms = self.node.clock.now_ms()
        admin_key = self.node.settings.api.admin_key
        if admin_key and hmac.compare_digest(key.encode(), admin_key.encode()):
            cookie, _ = self.codec.issue("admin", None, hash_api_key(admin_key), now_ms)
            return cookie, None
        app = await self.node.apps.authenticate(key)
        if app is None:
            return None
        if app.disabled_at_ms is not None:
            raise AppDisabled(app.id)
        cookie, _ = self.codec.issue("app", app.id, app.api_key_hash, now_ms)
        return cookie, app

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
        return principal, form

    # ---- which app a page is about -----------------------------------------------------------------

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

        return handle
