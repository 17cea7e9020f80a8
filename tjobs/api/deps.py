"""What every route needs: the node, the calling app (API key) or the admin, JSON bodies, docs helpers.

Auth: ``Authorization: Bearer <key>``. An app key is hashed and looked up by its hash (the store keeps
only hashes; the final comparison is constant-time in :class:`tjobs.service.apps.AppDirectory`, which caches
the answer for its TTL). The admin key (``settings.api.admin_key``) manages apps; it is compared with
:func:`hmac.compare_digest`. Operations reads (``/v1/cluster``, and ``/metrics`` when it has a scrape
token) take the admin key or ``settings.metrics.scrape_token`` (:func:`require_operator`).

Admission (:mod:`tjobs.api.ratelimit`) happens here too: a request without a valid key spends its
source address's unauthenticated budget (a key never seen spends it before its lookup), and an authenticated
app spends its own request bucket; either answers 429 with ``Retry-After`` when empty. Creates spend
the app's create bucket through :func:`admit_creates`.

Create, batch create and get by id, the API's hot paths, take only the ``Request`` (and the path)
and call :func:`request_app` and :func:`node_of` themselves, first thing: FastAPI's dependency
solving for an ``AppDep`` + ``NodeDep`` pair was a quarter of an in-process create's CPU. They
declare the same ``HTTPBearer`` security in the OpenAPI document (:data:`BEARER`) and answer what
the ``AppDep`` routes answer.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from fastapi import Depends, Path, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.routing import Match, Route
from starlette.types import Scope

from tjobs import wire
from tjobs.api.accounts_auth import is_token, token_admin, token_app
from tjobs.api.bodies import parse_json, require_json_content_type
from tjobs.api.principal import ADMIN_NAME, client_address, remember
from tjobs.api.ratelimit import ADMITTED, KEY_HASH, ApiRateLimits
from tjobs.api.schemas import Error
from tjobs.errors import AppDisabled, InvalidInput, NotFound, RateLimited, StorageUnavailable, TjobsError, Unauthorized
from tjobs.model import MAX_ID, App
from tjobs.service.apps import hash_api_key
from tjobs.service.search import SearchService

if TYPE_CHECKING:
    from tjobs.node import Node


class ORJSONResponse(JSONResponse):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def json_response(content: Any, status_code: int = 200) -> ORJSONResponse:
    """Answer ``content`` as JSON directly: a route returning a plain dict would pay for FastAPI's
    ``jsonable_encoder`` walk on top of the serialisation (a tenth of a batch create's time)."""
    return ORJSONResponse(content, status_code=status_code)


_bearer = HTTPBearer(auto_error=False, description="an app's API key, or the admin key for /v1/apps")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def node_of(request: Request) -> Node:
    node: Node = request.app.state.node
    return node


async def _node_dependency(request: Request) -> Node:
    # async on purpose: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hand-off
    # per request that cost a quarter of a single create's CPU in the profile
    return node_of(request)


NodeDep = Annotated["Node", Depends(_node_dependency)]


async def current_app(request: Request, credentials: Credentials) -> App:
    return await _authenticate(request, None if credentials is None else credentials.credentials)


async def request_app(request: Request) -> App:
    """The calling app from the ``Authorization`` header, parsed as :class:`HTTPBearer` parses it."""
    scheme, _, key = (request.headers.get("authorization") or "").partition(" ")
    return await _authenticate(request, key if scheme.lower() == "bearer" else None)


def rate_limits_of(request: Request) -> ApiRateLimits:
    limits: ApiRateLimits = request.app.state.rate_limits
    return limits


async def _authenticate(request: Request, key: str | None) -> App:
    limits, address = rate_limits_of(request), client_address(request)
    if not key or not key.strip():
        limits.admit_unauthenticated(address)
        raise Unauthorized("missing 'Authorization: Bearer <api key>'")
    key = key.strip()
    if is_token(key):
        return await token_app(request, key)
    hashed = request.scope.get(KEY_HASH)
    key_hash = hashed[1] if hashed is not None and hashed[0] == key else hash_api_key(key)
    if limits.is_refused_key(key_hash):
        limits.admit_unauthenticated(address)
        raise Unauthorized("unknown API key")
    directory = node_of(request).apps
    unseen = not directory.knows_key_hash(key_hash)
    if unseen:  # a database lookup: paid from the source's unauthenticated budget until the key proves valid
        limits.admit_unauthenticated(address)
    app = await directory.authenticate(key, key_hash)
    if app is None:
        limits.remember_refused_key(key_hash)
        if not unseen:
            limits.admit_unauthenticated(address)
        raise Unauthorized("unknown API key")
    if unseen:
        limits.lookup_succeeded(address)
    if app.disabled_at_ms is not None:
        raise AppDisabled(app.id)
    if request.scope.get(ADMITTED) != app.id:  # else AdmissionMiddleware took its token already
        route = request.scope.get("route")
        limits.admit_request(app, request.method, getattr(route, "path", None), request.query_params.keys())
    remember(request, "app_key", app.id, app.id)
    return app


def error_headers(error: TjobsError) -> dict[str, str] | None:
    """The headers an error answer carries: ``Retry-After`` for a rate limit and an unavailable (or
    moving) database."""
    if isinstance(error, RateLimited | StorageUnavailable):
        return {"retry-after": str(error.retry_after_s)}
    return None


def error_content(error: TjobsError) -> dict[str, Any]:
    """The JSON an error answers: ``{"error": {"code", "message"[, "field"][, "details"]}}``."""
    content: dict[str, Any] = {"code": error.code, "message": error.message}
    field = getattr(error, "field", None)
    if field is not None:
        content["field"] = field
    details = getattr(error, "details", None)  # e.g. target_in_use: {"tasks": n}
    if details is not None:
        content["details"] = details
    return {"error": content}


def admit_creates(request: Request, app: App, count: int) -> None:
    """Spend ``count`` of ``app``'s create tokens (one per task registered) or raise ``RateLimited``."""
    rate_limits_of(request).admit_creates(app, count)


BEARER: dict[str, Any] = {"security": [{"HTTPBearer": []}]}  # openapi_extra of a route using request_app


class NamedRoute(Route):
    """A plain Starlette route that names itself in the scope's ``route``, as FastAPI's routes do (the
    metrics' route label and the rate limits' route read it). The hot paths (create, batch create, a
    pool heartbeat) are served by one of these put first in the app's routes
    (:func:`tjobs.api.app.create_api`): the same endpoint behind the same middleware and error handlers,
    without FastAPI's walk through every router and its parameter solving; their FastAPI routes stay
    for the OpenAPI document."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match != Match.NONE:
            child_scope["route"] = self
        return match, child_scope


async def require_admin(request: Request, credentials: Credentials) -> None:
    expected = node_of(request).settings.api.admin_key
    given = "" if credentials is None else credentials.credentials.strip()
    if is_token(given):
        return await token_admin(request, given)
    if not _matches(given, expected):
        rate_limits_of(request).admit_unauthenticated(client_address(request))
        raise Unauthorized("admin key required")
    remember(request, "admin_key", ADMIN_NAME, None)


async def require_operator(request: Request, credentials: Credentials) -> None:
    """The admin key, a global admin's token or the metrics scrape token (operations reads: ``/v1/cluster``,
    ``/metrics``)."""
    settings = node_of(request).settings
    given = "" if credentials is None else credentials.credentials.strip()
    if is_token(given):
        return await token_admin(request, given)
    if not (_matches(given, settings.metrics.scrape_token) or _matches(given, settings.api.admin_key)):
        rate_limits_of(request).admit_unauthenticated(client_address(request))
        raise Unauthorized("the admin key or the metrics scrape token is required")


async def app_or_admin(request: Request, credentials: Credentials) -> App | None:
    """The calling app, or ``None`` for the admin key (reads that need no app's data, such as a
    schedule preview); 401 for anything else."""
    given = "" if credentials is None else credentials.credentials.strip()
    if _matches(given, node_of(request).settings.api.admin_key):
        remember(request, "admin_key", ADMIN_NAME, None)
        return None
    return await _authenticate(request, given or None)


def _matches(given: str, expected: str | None) -> bool:
    return bool(expected) and bool(given) and hmac.compare_digest(given.encode(), (expected or "").encode())


AppDep = Annotated[App, Depends(current_app)]
AppOrAdminDep = Annotated[App | None, Depends(app_or_admin)]


async def json_body(request: Request) -> Any:
    """The request's JSON body: 415 unless sent as JSON; 413 past the byte cap (the read stops there,
    :class:`tjobs.api.bodies.BodyLimitMiddleware`); 422 naming the field for invalid JSON, too deep a
    nesting or an integer beyond 64 bits (:func:`tjobs.api.bodies.parse_json`)."""
    raw = await request.body()
    content_type = request.headers.get("content-type")
    if raw or content_type:
        require_json_content_type(content_type)
    return parse_json(raw, node_of(request).settings.limits.max_json_depth)


def json_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    return body


async def json_object_body(request: Request) -> dict[str, Any]:
    """The request's :func:`json_body`, which must be a JSON object (422 naming ``body`` otherwise)."""
    return json_object(await json_body(request))


def filter_task_id(raw: str, field: str = "task_id") -> int:
    """A task id given as a search filter: 422 naming ``field`` unless it is one (a filter never 404s:
    another app's task id, like one that never existed, finds nothing)."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or not 0 < int(raw) <= MAX_ID:
        raise InvalidInput(field, "must be a task id (digits)", "invalid_type")
    return int(raw)


def search_of(request: Request) -> SearchService:
    """The node's search across shards (:class:`tjobs.service.search.SearchService`)."""
    return node_of(request).tasks.search


def path_parameter(pattern: str, max_length: int, description: str) -> Any:
    """A path parameter published with its form. The route's own code judges the form: 404 as for an id
    never stored (FastAPI's check would answer 422), or a 422 naming ``pool`` when an executor registers."""
    return Path(
        description=description,
        json_schema_extra={"pattern": pattern, "minLength": 1, "maxLength": max_length},
    )


TaskIdPath = Annotated[str, path_parameter(wire.TASK_ID_PATTERN, 19, "a task id")]
FlowIdPath = Annotated[str, path_parameter(wire.FLOW_ID_PATTERN, 39, "a flow id: '<task id>-<scheduled_at_ms>'")]
AppIdPath = Annotated[str, path_parameter(wire.APP_ID_PATTERN, 64, "an app id")]
TargetNamePath = Annotated[str, path_parameter(wire.TARGET_NAME_PATTERN, 64, "a target's name")]
PoolNamePath = Annotated[str, path_parameter(wire.POOL_NAME_PATTERN, 63, "a pool's name")]
ExecutorIdPath = Annotated[str, path_parameter(wire.EXECUTOR_ID_PATTERN, 128, "an executor's id")]


def task_id_of(raw: str) -> int:
    """A task id from a path, parsed into its range (1..2^63-1) before any store sees it; else 404."""
    # str.isdigit() also admits '²' (int() does not); 19 digits can still pass 2^63-1
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or not 0 < int(raw) <= MAX_ID:
        raise NotFound("task", raw)
    return int(raw)


# ---- OpenAPI documentation helpers ------------------------------------------------------------------

DOCUMENTED_BODIES: list[type[BaseModel]] = []

_ERROR_TEXT = {
    400: "a destructive call without its confirmation; error.field names the parameter",
    401: "missing or unknown key",
    403: "the app is disabled by an operator",
    404: "not found (or another app's)",
    409: "conflict: lost a version race, or not in a state that allows this",
    413: "body too large",
    422: "invalid input; error.field names the offending field",
    429: "quota or rate limit exceeded (a rate limit answers Retry-After)",
    503: "storage unavailable",
}


def body_doc(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` documenting a JSON request body that the route parses itself (``required=False``:
    the body may be left out), and the 413 it answers past the body's cap."""
    if model not in DOCUMENTED_BODIES:
        DOCUMENTED_BODIES.append(model)
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    too_large = {  # every body is read through json_body, which refuses one past its cap (tjobs.api.bodies)
        "description": _ERROR_TEXT[413],
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{Error.__name__}"}}},
    }
    return {
        "requestBody": {"required": required, "content": {"application/json": {"schema": schema}}},
        "responses": {"413": too_large},
    }


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The documented error answers: ``statuses``, plus 429 (rate limits) and 503 on every route."""
    return {status: {"model": Error, "description": _ERROR_TEXT[status]} for status in (*statuses, 429, 503)}


def ok(status: int, model: type[BaseModel] | None, description: str = "OK") -> dict[int | str, dict[str, Any]]:
    entry: dict[str, Any] = {"description": description}
    if model is not None:
        entry["model"] = model
    return {status: entry}
