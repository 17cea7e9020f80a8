"""Operations reads: ``GET /v1/cluster`` and ``GET /metrics``, and the optional metrics-only listener.

``/v1/cluster`` takes the admin key or ``metrics.scrape_token`` (:func:`tjobs.api.deps.require_operator`).
``/metrics``:

- with ``metrics.listen`` set, it is served only by the listener of :func:`create_metrics_api` on that
  address; the API's own listener answers 404 (``metrics_elsewhere``);
- with ``metrics.scrape_token`` set, every scrape must carry it (or the admin key) as
  ``Authorization: Bearer``, on whichever listener serves it; 401 otherwise;
- with neither, it is open: ``tjobs serve`` refuses to start that way unless ``metrics.public = true``
  (:func:`tjobs.settings.metrics_exposure_problem`); ``tjobs dev`` and nodes embedded by tests allow it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.security import HTTPAuthorizationCredentials

from tjobs.api import schemas
from tjobs.api.deps import ORJSONResponse, _bearer, error_headers, errors, node_of, require_operator
from tjobs.api.ratelimit import ApiRateLimits
from tjobs.errors import TjobsError

if TYPE_CHECKING:
    from tjobs.node import Node

router = APIRouter(tags=["operations"])


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> ORJSONResponse:
    return ORJSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


@router.get(
    "/v1/cluster",
    summary="This node's view of the cluster (admin key or metrics scrape token)",
    dependencies=[Depends(require_operator)],
    responses=errors(401),
)
async def cluster(request: Request) -> Any:
    status = node_of(request).status()
    return {
        **status.cluster,
        "node_id": status.node_id,
        "jobs": sorted(status.jobs),
        "fires_committed": status.fires_committed,
        "newest_committed_instant_ms": status.newest_committed_instant_ms,
        "cas_rejected": status.cas_rejected,
        "wheel_tasks": status.wheel_tasks,
        "fire_backlog": status.fire_backlog,
    }


@router.get(
    "/metrics",
    summary="Prometheus text format (bearer metrics.scrape_token when it is set)",
    response_class=Response,
    responses={
        200: {"description": "Prometheus text format", "content": {"text/plain": {}}},
        401: {"model": schemas.Error, "description": "metrics.scrape_token is set and was not sent"},
        404: {
            "model": schemas.Error,
            "description": "metrics.enabled is false, or metrics.listen serves them elsewhere",
        },
        429: {"model": schemas.Error, "description": "too many requests without a valid key (Retry-After)"},
    },
)
async def metrics(request: Request) -> Response:
    node = node_of(request)
    settings = node.settings.metrics
    on_metrics_listener = getattr(request.app.state, "metrics_listener", False)
    if settings.listen is not None and not on_metrics_listener:
        return error_response(404, "metrics_elsewhere", f"metrics are served on {settings.listen} (metrics.listen)")
    if settings.scrape_token is not None:
        credentials: HTTPAuthorizationCredentials | None = await _bearer(request)
        await require_operator(request, credentials)
    if not node.metrics.enabled:
        return error_response(404, "metrics_disabled", "metrics are off on this node (metrics.enabled = false)")
    node.refresh_gauges()
    return Response(node.metrics.render(), media_type="text/plain; version=0.0.4")


def create_metrics_api(node: Node, rate_limits: ApiRateLimits) -> FastAPI:
    """The application of the ``metrics.listen`` listener: ``GET /metrics`` and nothing else."""
    api = FastAPI(title="tjobs metrics", openapi_url=None, docs_url=None, redoc_url=None)
    api.state.node = node
    api.state.rate_limits = rate_limits
    api.state.metrics_listener = True

    @api.exception_handler(TjobsError)
    async def _tjobs_error(request: Request, error: TjobsError) -> ORJSONResponse:
        return error_response(error.status_code, error.code, error.message, error_headers(error))

    api.add_api_route("/metrics", metrics, methods=["GET"], response_class=Response)
    return api
