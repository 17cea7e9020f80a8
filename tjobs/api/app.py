"""The FastAPI application of a node: routers, auth, the one error handler, and the OpenAPI document.

Request bodies are parsed with orjson and validated by :mod:`tjobs.service.tasks` / :mod:`tjobs.service.validation`,
which name the offending field; every :class:`tjobs.errors.TjobsError` becomes its status code with
``{"error": {"code", "message", "field"}}`` in one handler, and so does FastAPI's own parameter
validation (422). Nothing answers 200 with an error inside, and bad input never makes a 500.

Routes live in ``routes_tasks`` (tasks), ``routes_flows`` (flows, dead letters), ``routes_apps`` (apps,
stats), ``routes_pools`` (executor pools), ``routes_shards`` (the shard map, admin), ``routes_ops``
(``/v1/cluster``, ``/metrics``); ``/healthz`` and ``/readyz`` are here.

The web console (:mod:`tjobs.console`) sits a layer above the API (it renders with the API's helpers), so
the API does not mount it: whoever serves the node does, with :func:`tjobs.console.include_console` on the
app this returns (``tjobs serve`` and ``tjobs dev`` through :func:`tjobs.api.server.serve`'s ``mount``).
"""

import re
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp

from tjobs import __version__
from tjobs.api import (
    routes_alerts,
    routes_apps,
    routes_audit,
    routes_calendars,
    routes_flows,
    routes_operator_jobs,
    routes_ops,
    routes_pools,
    routes_schedules,
    routes_shards,
    routes_slo,
    routes_targets,
    routes_tasks,
    routes_users,
    schemas,
)
from tjobs.api.audit_trail import AuditMiddleware
from tjobs.api.bodies import BodyLimitMiddleware
from tjobs.api.credential_limits import CredentialLimits
from tjobs.api.deps import DOCUMENTED_BODIES, ORJSONResponse, error_content, error_headers, ok
from tjobs.api.metrics_middleware import MetricsMiddleware
from tjobs.api.ratelimit import AdmissionMiddleware, ApiRateLimits
from tjobs.errors import TjobsError
from tjobs.model import App

if TYPE_CHECKING:
    from tjobs.node import Node


def _error(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
    details: dict[str, Any] | None = None,
) -> ORJSONResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    if details is not None:
        error["details"] = details
    return ORJSONResponse({"error": error}, status_code=status, headers=headers)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large", 401: "unauthorized"}


def create_api(node: "Node", *, demo_routes: bool = False) -> FastAPI:
    api = FastAPI(
        title="tjobs",
        version=__version__,
        default_response_class=ORJSONResponse,
        description="Register timers; tjobs calls your service back, signed, when they are due.",
        redirect_slashes=False,  # /v1/flows/ is an empty flow id (404), not the flow search
        # a node's telemetry is its Prometheus metrics and logs; FastAPI's own OpenTelemetry layer, off unless
        # a global provider is configured, still asked the providers (and the environment) on every request
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    api.state.node = node
    api.state.app_service = node.app_service
    api.state.accounts = node.accounts
    api.state.credential_limits = CredentialLimits()
    api.state.rate_limits = ApiRateLimits(
        node.settings.rate_limits,
        on_refused=lambda app_id, bucket: node.metrics.api_rate_limited.labels(app_id, bucket).inc(),
        membership=node.coordinator.membership,  # an app's rates are the cluster's: this node takes its share
    )

    @api.exception_handler(TjobsError)
    async def _tjobs_error(request: Request, error: TjobsError) -> ORJSONResponse:
        return ORJSONResponse(error_content(error), status_code=error.status_code, headers=error_headers(error))

    @api.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, error: RequestValidationError) -> ORJSONResponse:
        first = error.errors()[0] if error.errors() else {}
        loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "header")]
        field = ".".join(loc) or None
        message = str(first.get("msg", "invalid"))
        return _error(422, "invalid_input", f"{field}: {message}" if field else message, field)

    @api.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> ORJSONResponse:
        code = _HTTP_CODES.get(error.status_code, "http_error")
        headers = dict(error.headers or {})
        if error.status_code == 405:  # Starlette names only the first route of the path in Allow
            headers["Allow"] = _allowed_methods(request)
        return _error(error.status_code, code, str(error.detail), headers=headers)

    for router in (
        routes_tasks.router,
        routes_flows.router,
        routes_operator_jobs.router,
        routes_apps.router,
        routes_apps.admin,
        routes_slo.router,
        routes_audit.router,
        routes_alerts.router,
        routes_targets.router,
        routes_schedules.router,
        routes_calendars.router,
        routes_pools.router,
        routes_shards.admin,
        routes_users.me,
        routes_users.admin,
    ):
        api.include_router(router)
    # the hot paths, matched first: a pool heartbeat, the creates
    api.router.routes[:0] = [routes_pools.heartbeat_route, *routes_tasks.create_routes]

    # ---- operations -----------------------------------------------------------------------------

    @api.get("/healthz", tags=["operations"], responses=ok(200, schemas.Health))
    async def healthz() -> Any:
        return {"status": "ok", "node": node.node_id}

    @api.get(
        "/readyz",
        tags=["operations"],
        summary="Ready: the database answers and this node owns jobs (no key; the cluster view is /v1/cluster)",
        responses={**ok(200, schemas.Ready), 503: {"model": schemas.Error, "description": "not ready, and why"}},
    )
    async def readyz() -> Any:
        # open to probes: ready or a short reason, never members, addresses or servers (/v1/cluster has them)
        reason = await node.not_ready_reason()
        if reason is not None:
            return _error(503, "not_ready", reason)
        return {"status": "ready"}

    api.include_router(routes_ops.router)

    if demo_routes:
        from tjobs.api.demo import add_demo_routes

        add_demo_routes(api, node)

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            document = get_openapi(title=api.title, version=api.version, description=api.description, routes=api.routes)
            components = document.setdefault("components", {}).setdefault("schemas", {})
            for model in DOCUMENTED_BODIES:
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, definition in schema.pop("$defs", {}).items():
                    components.setdefault(name, definition)
                components[model.__name__] = schema
            _errors_are_ours(document)
            api.openapi_schema = document
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    api.add_middleware(AuditMiddleware, node=node)  # innermost: sees the answers, holds them
    api.add_middleware(
        BodyLimitMiddleware,
        max_body_bytes=node.settings.api.max_body_bytes,
        max_batch_body_bytes=node.settings.api.max_batch_body_bytes,
    )
    api.add_middleware(MetricsMiddleware, metrics=node.metrics)
    _admit_first(api, api.state.rate_limits, node)
    return api


def _admit_first(api: FastAPI, limits: ApiRateLimits, node: "Node") -> None:
    """Put :class:`AdmissionMiddleware` outside even the error and telemetry layers FastAPI adds itself,
    so a refused request's 429 goes straight to the server's ``send`` (nothing it skips can fail it)."""
    build_stack = api.build_middleware_stack

    def build_admitted_stack() -> ASGIApp:
        admission = AdmissionMiddleware(build_stack(), limits=limits, directory=node.apps)
        api.state.admission = admission  # the lean heartbeat path admits through it too
        return admission

    api.build_middleware_stack = build_admitted_stack  # type: ignore[method-assign]


def _allowed_methods(request: Request) -> str:
    """The ``Allow`` of a 405: the methods of the documented path this request names (a literal path wins
    over a template: ``/v1/tasks/batch`` is not ``/v1/tasks/{task_id}``), else of every route matching it."""
    path = request.url.path
    documented = request.app.openapi().get("paths", {})
    templates = sorted(
        (t.count("{"), t) for t in documented if re.fullmatch(re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(t)), path)
    )
    if templates:
        return ", ".join(sorted(method.upper() for method in documented[templates[0][1]]))
    methods = {
        method
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in request.app.routes)
    }
    return ", ".join(sorted(methods))


def _errors_are_ours(document: dict[str, Any]) -> None:
    """Every 422 is this API's ``Error`` (the one handler maps FastAPI's validation errors too)."""
    error_ref = {"$ref": "#/components/schemas/Error"}
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            response = operation.get("responses", {}).get("422")
            if response is not None:
                response["content"] = {"application/json": {"schema": error_ref}}
                response["description"] = "invalid input; error.field names the offending field"
    schemas_ = document.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas_.pop(unused, None)


async def create_app_record(node: "Node", body: dict[str, Any], app_id: str | None = None) -> tuple[App, str]:
    """Validate an app-create body, store the app, and return it with its one-time API key."""
    return await node.app_service.create(body, app_id)
