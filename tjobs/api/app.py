"""The FastAPI application of a node.

Request bodies are parsed with orjson and validated by :mod:`tjobs.tasks` / :mod:`tjobs.validation`,
which name the offending field; every :class:`tjobs.errors.TjobsError` becomes its status code with
``{"error": {"code", "message", "field"}}`` in one handler. Nothing answers 200 with an error inside.
"""

import hmac
import secrets
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from tjobs import __version__
from tjobs.api.render import app_json, flow_json, task_json
from tjobs.apps import generate_api_key, hash_api_key
from tjobs.callbacks.signing import generate_secret
from tjobs.errors import InvalidInput, NotFound, TjobsError, Unauthorized
from tjobs.model import App

if TYPE_CHECKING:
    from tjobs.node import Node

MAX_BODY_BYTES = 1 << 20


class ORJSONResponse(JSONResponse):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _error(status: int, code: str, message: str, field: str | None = None) -> ORJSONResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return ORJSONResponse({"error": error}, status_code=status)


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidInput("body", f"larger than {MAX_BODY_BYTES} bytes", "too_large")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise InvalidInput("body", f"not valid JSON ({error.msg})", "bad_json") from None


def _task_id(raw: str) -> int:
    if not raw.isdigit() or len(raw) > 19:
        raise NotFound("task", raw)
    return int(raw)


def create_api(node: "Node", *, demo_routes: bool = False) -> FastAPI:
    api = FastAPI(title="tjobs", version=__version__, default_response_class=ORJSONResponse)
    api.state.node = node

    @api.exception_handler(TjobsError)
    async def _tjobs_error(request: Request, error: TjobsError) -> ORJSONResponse:
        return _error(error.status_code, error.code, error.message, getattr(error, "field", None))

    @api.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, error: RequestValidationError) -> ORJSONResponse:
        first = error.errors()[0] if error.errors() else {}
        loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
        return _error(422, "invalid_input", str(first.get("msg", "invalid")), ".".join(loc) or None)

    async def current_app(authorization: Annotated[str | None, Header()] = None) -> App:
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthorized("missing 'Authorization: Bearer <api key>'")
        app = await node.apps.authenticate(authorization.removeprefix("Bearer ").strip())
        if app is None:
            raise Unauthorized("unknown API key")
        return app

    async def admin(authorization: Annotated[str | None, Header()] = None) -> None:
        expected = node.settings.api.admin_key
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            raise Unauthorized("admin key required")

    AppDep = Annotated[App, Depends(current_app)]

    # ---- apps ---------------------------------------------------------------------------------

    @api.post("/v1/apps", status_code=201, dependencies=[Depends(admin)], tags=["apps"])
    async def create_app(request: Request) -> Any:
        body = await _json_body(request)
        if not isinstance(body, dict):
            raise InvalidInput("body", "must be a JSON object")
        app, api_key = await create_app_record(node, body)
        return app_json(app, api_key)

    # ---- tasks --------------------------------------------------------------------------------

    @api.post("/v1/tasks", status_code=201, tags=["tasks"])
    async def create_task(request: Request, response: Response, app: AppDep) -> Any:
        created = await node.tasks.create(app, await _json_body(request))
        if created.created:
            node.metrics.registrations.labels(app.id).inc()
        else:
            response.status_code = 200
        return task_json(created.task)

    @api.get("/v1/tasks/{task_id}", tags=["tasks"])
    async def get_task(task_id: str, app: AppDep) -> Any:
        return task_json(await node.tasks.get(app, _task_id(task_id)))

    @api.patch("/v1/tasks/{task_id}", tags=["tasks"])
    async def update_task(task_id: str, request: Request, app: AppDep) -> Any:
        return task_json(await node.tasks.update(app, _task_id(task_id), await _json_body(request)))

    @api.post("/v1/tasks/{task_id}/pause", tags=["tasks"])
    async def pause_task(task_id: str, app: AppDep) -> Any:
        return task_json(await node.tasks.pause(app, _task_id(task_id)))

    @api.post("/v1/tasks/{task_id}/resume", tags=["tasks"])
    async def resume_task(task_id: str, app: AppDep) -> Any:
        return task_json(await node.tasks.resume(app, _task_id(task_id)))

    @api.post("/v1/tasks/{task_id}/trigger", status_code=201, tags=["tasks"])
    async def trigger_task(task_id: str, app: AppDep) -> Any:
        return flow_json(await node.tasks.trigger(app, _task_id(task_id)))

    @api.delete("/v1/tasks/{task_id}", status_code=204, tags=["tasks"])
    async def delete_task(task_id: str, app: AppDep) -> Response:
        await node.tasks.delete(app, _task_id(task_id))
        return Response(status_code=204)

    @api.get("/v1/tasks/{task_id}/flows", tags=["flows"])
    async def list_flows(
        task_id: str,
        app: AppDep,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        before_ms: Annotated[int | None, Query(ge=0)] = None,
    ) -> Any:
        flows = await node.tasks.flows(app, _task_id(task_id), limit, before_ms)
        return {"items": [flow_json(f) for f in flows]}

    # ---- operations -----------------------------------------------------------------------------

    @api.get("/healthz", tags=["operations"])
    async def healthz() -> Any:
        return {"status": "ok", "node": node.node_id}

    @api.get("/readyz", tags=["operations"])
    async def readyz() -> Any:
        try:
            await node.store.ping()
        except TjobsError as error:
            return _error(503, "not_ready", error.message)
        if not node.started or not node.runner.owned:
            return _error(503, "not_ready", "node owns no jobs yet")
        return {"status": "ready", "jobs": len(node.runner.owned), "cluster": node.coordinator.describe()}

    @api.get("/v1/cluster", tags=["operations"])
    async def cluster() -> Any:
        stats = node.runner.stats
        return {
            **node.coordinator.describe(),
            "node_id": node.node_id,
            "jobs": sorted(node.runner.owned),
            "fires_committed": stats.fires_committed,
            "cas_rejected": stats.cas_rejected,
            "wheel_tasks": len(node.runner.wheel),
            "fire_backlog": node.runner.backlog,
        }

    @api.get("/metrics", tags=["operations"])
    async def metrics() -> Response:
        node.refresh_gauges()
        return Response(node.metrics.render(), media_type="text/plain; version=0.0.4")

    if demo_routes:
        from tjobs.demo import add_demo_routes

        add_demo_routes(api, node)
    return api


async def create_app_record(node: "Node", body: dict[str, Any], app_id: str | None = None) -> tuple[App, str]:
    """Validate an app-create body, store the app, and return it with its one-time API key."""
    name = body.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 100:
        raise InvalidInput("name", "must be a string of 1..100 characters")
    callbacks = node.settings.callbacks
    rate = body.get("rate_limit_per_s", callbacks.default_rate_limit_per_s)
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 < rate <= 1_000_000:
        raise InvalidInput("rate_limit_per_s", "must be a number within (0, 1000000]")
    concurrency = body.get("max_concurrency", callbacks.default_max_concurrency)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or not 1 <= concurrency <= 10_000:
        raise InvalidInput("max_concurrency", "must be an integer within 1..10000")
    hosts = body.get("allowed_callback_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise InvalidInput("allowed_callback_hosts", "must be a list of host names or addresses")
    api_key = generate_api_key()
    app = App(
        id=app_id or f"app_{secrets.token_hex(6)}",
        name=name,
        api_key_hash=hash_api_key(api_key),
        secrets=[generate_secret()],
        rate_limit_per_s=float(rate),
        max_concurrency=concurrency,
        created_at_ms=node.clock.now_ms(),
        settings={"allowed_callback_hosts": hosts},
    )
    await node.store.put_app(app)
    node.apps.put(app)
    return app, api_key
