"""Hot paths answered below ASGI: uvicorn's httptools protocol answering a few plain requests itself.

Through uvicorn's request cycle and the app's ASGI layers (admission, metrics, body limit, audit,
FastAPI's error and telemetry layers, routing) a small request cost a node several times what its work
costs. :class:`LeanProtocol` is the base of a protocol that answers a plain request of a hot route with
what the app would do for it; each route is a class of its own over it, tried in turn
(:meth:`LeanProtocol._take`): executor heartbeats (:mod:`tjobs.api.lean_heartbeat`), single creates
(:mod:`tjobs.api.lean_creates`) and run reports (:mod:`tjobs.api.lean_reports`), put together by
:func:`tjobs.api.server.lean_protocol`. Every one keeps:

- the same authentication: the key is taken from ``Authorization: Bearer`` as the app parses it, and
  the lean path only serves a key this node's :class:`tjobs.service.apps.AppDirectory` would accept
  from its cache without waiting on the store (:meth:`~tjobs.service.apps.AppDirectory.cached_app`: a
  fresh copy, or one within the staleness bound while the apps server is silent), of an app
  that is not disabled, and not remembered as refused;
- the same admission: the app's request token is taken (:meth:`tjobs.api.ratelimit.ApiRateLimits.admit_request`)
  only when it would be admitted (:meth:`~tjobs.api.ratelimit.ApiRateLimits.would_admit`), and the
  connection's refusal memory is cleared as :class:`tjobs.api.ratelimit.AdmissionMiddleware` clears it;
- the same answers (status, JSON body, ``Retry-After``, ``x-request-id``, ``content-type``, uvicorn's
  ``date`` and ``server``), the same metrics under the route's template, and the request id in the logs.
  An unexpected failure answers the metrics middleware's 500 (with ``content-length`` instead of chunks).

Anything else goes through ASGI unchanged, decided before anything is taken or counted: another method
or path, a query string or percent-escape, HTTP/1.0 or ``Connection: close``, an upgrade, forwarded
headers (uvicorn's proxy-headers layer would rewrite the client), ``Transfer-Encoding`` or ``Expect``, a
missing, unknown or refused key, a key whose copy cannot be served without waiting on the store, a
disabled app, an app over its request rate (the app's 429 and hold), a request pipelined behind another
on its connection, or a server with a concurrency limit. A route with a JSON body
(:meth:`LeanProtocol._take_json`) also leaves to ASGI a request without a ``Content-Length``, with a
body over ``api.max_body_bytes`` (the 413) or over uvicorn's read high-water mark (64 KiB; the protocol
would pause reading), or with a ``Content-Type`` that is not JSON or given twice (the 415).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
from fastapi.routing import APIRoute
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from tjobs.api.bodies import is_json_media_type
from tjobs.api.deps import error_content, error_headers
from tjobs.api.metrics_middleware import RequestMetrics, error_body, new_request_id, sane_request_id
from tjobs.api.routes_flows import report_run
from tjobs.api.routes_flows import router as flows_router
from tjobs.api.routes_pools import heartbeat_route, pool_service_of
from tjobs.api.routes_tasks import create_routes
from tjobs.errors import TjobsError
from tjobs.model import App
from tjobs.observability.logs import request_id
from tjobs.service.apps import hash_api_key

if TYPE_CHECKING:
    from fastapi import FastAPI

    from tjobs.api.ratelimit import AdmissionMiddleware, ApiRateLimits
    from tjobs.node import Node
    from tjobs.service.pools import PoolService

logger = logging.getLogger(__name__)

BODY_MAX = 65_536  # uvicorn's HIGH_WATER_LIMIT: a body up to it is read without pausing the reads
_NOT_LEAN = (b"transfer-encoding", b"expect", b"x-forwarded-for", b"x-forwarded-proto")
_SEPARATOR = b": "
_CRLF = b"\r\n"
_JSON_TYPE = b"content-type: application/json\r\n"

# (status, JSON body, extra headers, the exception of a 500)
Answer = tuple[int, bytes, "dict[str, str] | None", "Exception | None"]


def _route_path(endpoint: Callable[..., Any]) -> str:
    """The path template of the flows route of ``endpoint`` (the metrics' and rate limits' route)."""
    return next(
        route.path for route in flows_router.routes if isinstance(route, APIRoute) and route.endpoint is endpoint
    )


def lean_heads(
    headers: list[tuple[bytes, bytes]],
) -> tuple[bytes | None, str | None, bytes | None, bytes | None] | None:
    """What the lean paths read of a request's headers: ``Authorization``, ``x-request-id`` (made sane),
    ``Content-Length`` and ``Content-Type``; ``None`` when one sends the request through ASGI (one of
    :data:`_NOT_LEAN`, or ``Content-Length`` or ``Content-Type`` given twice)."""
    authorization = length = content_type = None
    rid: str | None = None
    for name, value in headers:
        if name == b"authorization":
            authorization = value
        elif name == b"x-request-id":
            rid = sane_request_id(value)
        elif name == b"content-length":
            if length is not None:
                return None
            length = value
        elif name == b"content-type":
            if content_type is not None:
                return None
            content_type = value
        elif name in _NOT_LEAN:
            return None
    return authorization, rid, length, content_type


class LeanPaths:
    """What the lean paths need of the app (one per API), and how many requests each answered."""

    def __init__(self, api: FastAPI) -> None:
        self.api = api
        self.node: Node = api.state.node
        self.limits: ApiRateLimits = api.state.rate_limits
        self.template = heartbeat_route.path
        self.create_template = create_routes[0].path
        self.report_template = _route_path(report_run)
        self.metrics = RequestMetrics(self.node.metrics)
        self.served = 0  # heartbeats answered here (tests and benches read it)
        self.at_once = 0  # of those, answered in the protocol's callback (the registry needed no I/O)
        self.creates = 0  # creates answered here
        self.reports = 0  # run reports answered here
        self.serve_creates = True  # False: every create goes through ASGI (a harness that watches requests there)
        self.serve_reports = True  # False: every run report goes through ASGI (the same)
        self.pools: PoolService = pool_service_of(api.state, self.node)
        self.body_max = min(BODY_MAX, self.node.settings.api.max_body_bytes)

    def admit(self, authorization: bytes | None, client: Any, method: str = "PUT", template: str = "") -> App | None:
        """The calling app, its request token taken, when the app's own path would admit it the same
        way without the store; else ``None`` with nothing taken (the request goes through ASGI)."""
        if authorization is None:
            return None
        scheme, _, key = authorization.decode("latin-1").partition(" ")
        key = key.strip()
        if not key or scheme.lower() != "bearer":
            return None
        admission: AdmissionMiddleware | None = getattr(self.api.state, "admission", None)
        if admission is None:  # the ASGI stack is built on the first request that goes through it
            return None
        key_hash = hash_api_key(key)
        limits = self.limits
        if limits.is_refused_key(key_hash):
            return None
        app = self.node.apps.cached_app(key_hash)
        if app is None or app.disabled_at_ms is not None:
            return None
        if limits.enabled:
            template = template or self.template
            if not limits.would_admit(app, method, template):
                return None
            limits.admit_request(app, method, template)
            admission.admitted(client, app.id)
        return app


class LeanCycle:
    """Stands in for uvicorn's request cycle while a lean request is answered: the protocol queues a
    request pipelined behind it, and marks it on disconnect or shutdown, as it does a real cycle. A
    request's body is gathered here by the protocol's ``on_body``; ``on_message_complete`` clears
    ``more_body`` and sets the message event, which starts ``then`` (a heartbeat has no body to wait for)."""

    __slots__ = ("body", "disconnected", "keep_alive", "more_body", "response_complete", "then")

    def __init__(self, then: Callable[[LeanCycle], None] | None = None) -> None:
        self.body = b""
        self.disconnected = False
        self.keep_alive = True
        self.more_body = then is not None
        self.response_complete = False
        self.then = then

    @property
    def message_event(self) -> LeanCycle:
        return self

    def set(self) -> None:  # message_event.set(): more of the body, all of it, or a disconnect
        if self.then is not None and not self.more_body and not self.disconnected:
            then, self.then = self.then, None
            then(self)


class LeanProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering the plain requests of its routes itself (see the module)."""

    lean: ClassVar[LeanPaths]

    def on_headers_complete(self) -> None:
        try:
            answered = self._take()
        except Exception:  # a bug here must not cost the request: the app answers it
            logger.exception("the lean path failed; answering through the app")
            answered = False
        if not answered:
            super().on_headers_complete()

    def _take(self) -> bool:
        """Whether a lean route took the request (each route's class takes its own, else asks the next)."""
        return False

    def on_message_begin(self) -> None:
        # a request that follows, in the same bytes, one answered at once: it is not idle (as data_received
        # would have stopped the keep-alive timer that answer armed)
        self._unset_keepalive_if_required()
        super().on_message_begin()

    def _plain(self) -> bool:
        """An HTTP/1.1 keep-alive request the protocol may answer itself (see the module)."""
        parser = self.parser
        return not (
            parser.get_http_version() != "1.1"
            or not parser.should_keep_alive()
            or parser.should_upgrade()
            or self.root_path
            or self.limit_concurrency is not None
            or self.pipeline
            or not (self.cycle is None or self.cycle.response_complete)
        )

    def _take_json(self, template: str, handle: Callable[[App, bytes], Awaitable[Answer]]) -> bool:
        """Take a ``POST`` with a JSON body of the route ``template`` when the protocol may answer it (see
        the module; the method and path are the caller's to check): its body is gathered into a lean
        cycle, and ``handle(app, body)`` answers it once the body is complete."""
        if not self._plain():
            return False
        heads = lean_heads(self.headers)
        if heads is None:
            return False
        authorization, rid, length, content_type = heads
        lean = self.lean
        if not (length is not None and length.isdigit() and int(length) <= lean.body_max):
            return False
        if not (content_type and is_json_media_type(content_type)):
            return False
        started = time.perf_counter()
        app = lean.admit(authorization, self.client, "POST", template)
        if app is None:
            return False
        rid = rid or new_request_id()

        def start(cycle: LeanCycle) -> None:
            self._spawn(self._answer_json(cycle, app, rid, started, template, handle), rid)

        self.cycle = LeanCycle(start)  # type: ignore[assignment]
        return True

    async def _answer_json(
        self,
        cycle: LeanCycle,
        app: App,
        rid: str,
        started: float,
        template: str,
        handle: Callable[[App, bytes], Awaitable[Answer]],
    ) -> None:
        try:
            answer = await handle(app, cycle.body)
        except Exception as error:
            answer = failed(error, rid)
        await self._answer_later(cycle, answer, rid, started, "POST", template)

    def _spawn(self, work: Coroutine[Any, Any, None], rid: str) -> None:
        """Run ``work`` as a task of the connection's, its log records carrying the request id."""
        token = request_id.set(rid)  # the task's copy of the context carries it into every log record
        try:
            task = self.loop.create_task(work)
        finally:
            request_id.reset(token)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _answer_later(
        self, cycle: LeanCycle, answer: Answer, rid: str, started: float, method: str, template: str
    ) -> None:
        """Answer from a task: after the transport's buffer drained, if the client reads slowly."""
        if not cycle.disconnected and self.flow.write_paused:
            await self.flow.drain()
        self._respond(cycle, answer, rid, started, method, template)

    def _respond(
        self, cycle: LeanCycle, answer: Answer, rid: str, started: float, method: str = "PUT", template: str = ""
    ) -> None:
        status, body, extra, failure = answer
        lean = self.lean
        if not cycle.disconnected:
            head = [STATUS_LINE[status]]
            for name, value in self.server_state.default_headers:
                head += (name, _SEPARATOR, value, _CRLF)
            for header, text in (extra or {}).items():
                head += (header.lower().encode("latin-1"), _SEPARATOR, text.encode("latin-1"), _CRLF)
            head += (b"content-length: ", str(len(body)).encode(), _CRLF, _JSON_TYPE)
            head += (b"x-request-id: ", rid.encode(), b"\r\n\r\n", body)
            self.transport.write(b"".join(head))
            if not cycle.keep_alive:  # the server is shutting down
                self.transport.close()
        cycle.response_complete = True
        self.on_response_complete()
        lean.metrics.observe(template or lean.template, method, status, time.perf_counter() - started, rid, failure)


def failed(error: Exception, rid: str) -> Answer:
    """The app's answer to ``error``: a :class:`TjobsError`'s status, JSON and headers, else the 500."""
    if isinstance(error, TjobsError):  # the route's answer: 404, 409, 422, 429, 503 ...
        return error.status_code, orjson.dumps(error_content(error)), error_headers(error), None
    return 500, error_body(rid), None, error  # a bug: the metrics middleware's 500, with the request id
