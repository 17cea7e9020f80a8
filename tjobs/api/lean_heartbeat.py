"""Executor heartbeats and single creates answered below ASGI: hot paths served by the HTTP protocol itself.

Every executor of every pool sends ``PUT /v1/pools/{pool}/executors/{executor_id}/heartbeat`` every
third of its TTL (1,000 executors at a 15 s TTL: 200 a second). Through uvicorn's request cycle and the
app's ASGI layers (admission, metrics, body limit, FastAPI's error and telemetry layers, routing) a
heartbeat cost a node several times what renewing the lease costs. :func:`heartbeat_protocol` makes
uvicorn's httptools protocol answer a plain heartbeat itself, with what the app would do for it:

- the same authentication: the key is taken from ``Authorization: Bearer`` as the app parses it, and
  the lean path only serves a key this node's :class:`tjobs.service.apps.AppDirectory` would accept
  from its cache without the store (:meth:`~tjobs.service.apps.AppDirectory.fresh_app`), of an app
  that is not disabled, and not remembered as refused;
- the same admission: the app's request token is taken (:meth:`tjobs.api.ratelimit.ApiRateLimits.admit_request`)
  only when it would be admitted (:meth:`~tjobs.api.ratelimit.ApiRateLimits.would_admit`), and the
  connection's refusal memory is cleared as :class:`tjobs.api.ratelimit.AdmissionMiddleware` clears it;
- the same pool service call (:meth:`tjobs.service.pools.PoolService.renew`: per-app pools, 404 for
  an unknown executor or another app's, 503 when the registry does not answer), the same answers
  (status, JSON body, ``Retry-After``, ``x-request-id``, ``content-type``, uvicorn's ``date`` and
  ``server``), the same metrics under the route's template, and the request id in the logs.

A heartbeat the registry answers without I/O (:meth:`tjobs.service.pools.PoolService.renew_now`: the
embedded registry always; an etcd node for a lease it renewed with more than half a TTL of it left) is
answered in the parser's callback, with no task; one that needs etcd is answered by a task awaiting
:meth:`~tjobs.service.pools.PoolService.renew`.

Anything else goes through ASGI unchanged, decided before anything is taken or counted: another
method or path, a query string or percent-escape, a body (``Content-Length`` other than 0, chunked,
``Expect``; so the body limits answer as before), HTTP/1.0 or ``Connection: close``, an upgrade,
forwarded headers (uvicorn's proxy-headers layer would rewrite the client), a missing, unknown,
refused or stale key, a disabled app, an app over its request rate (the app's 429 and hold), a
request pipelined behind another on its connection, or a server with a concurrency limit. An
unexpected failure answers the middleware's 500 (with ``content-length`` instead of chunks).

**Single creates** (``POST /v1/tasks``, issue 29: the ASGI layers and FastAPI's routing were over half a
create's node CPU) are served the same way, with what :func:`tjobs.api.routes_tasks.create_task` does:
the same authentication and request admission as a heartbeat, then the app's create token (429 with
``Retry-After``), the body parsed within ``limits.max_json_depth`` (422 naming the field,
:func:`tjobs.api.bodies.parse_json`), :meth:`tjobs.service.tasks.TaskService.create`, the registration
counted, and 201 (or 200 for an existing key) with the task's JSON; metrics under ``/v1/tasks``. Besides
what a heartbeat leaves to ASGI, a create goes there without a ``Content-Length`` (chunked), with a
body over ``api.max_body_bytes`` (the 413) or over uvicorn's read high-water mark (64 KiB; the protocol
would pause reading), or with a ``Content-Type`` that is not JSON or given twice (the 415).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from tjobs.api.bodies import is_json_media_type, parse_json
from tjobs.api.deps import error_content, error_headers
from tjobs.api.metrics_middleware import RequestMetrics, error_body, new_request_id, sane_request_id
from tjobs.api.render import task_json
from tjobs.api.routes_pools import heartbeat_route, pool_service_of
from tjobs.api.routes_tasks import create_routes
from tjobs.cluster.base import RENEW_LATER
from tjobs.errors import TjobsError
from tjobs.model import App
from tjobs.observability.logs import request_id
from tjobs.pools.model import Executor
from tjobs.service.apps import hash_api_key

if TYPE_CHECKING:
    from fastapi import FastAPI

    from tjobs.api.ratelimit import AdmissionMiddleware, ApiRateLimits
    from tjobs.node import Node
    from tjobs.service.pools import PoolService

logger = logging.getLogger(__name__)

# the heartbeat's path as sent, in visible ASCII (a percent-escape or a query string goes through ASGI)
_HEARTBEAT = re.compile(rb"/v1/pools/([^/?#%\x00-\x20\x7f-\xff]+)/executors/([^/?#%\x00-\x20\x7f-\xff]+)/heartbeat")
_CREATE = create_routes[0].path.encode()  # POST /v1/tasks
_CREATE_BODY_MAX = 65_536  # uvicorn's HIGH_WATER_LIMIT: a body up to it is read without pausing the reads
_NOT_LEAN = (b"transfer-encoding", b"expect", b"x-forwarded-for", b"x-forwarded-proto")
_SEPARATOR = b": "
_CRLF = b"\r\n"
_JSON_TYPE = b"content-type: application/json\r\n"


def _lean_heads(
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


class LeanHeartbeats:
    """What the lean path needs of the app (one per API), and how many heartbeats it answered."""

    def __init__(self, api: FastAPI) -> None:
        self.api = api
        self.node: Node = api.state.node
        self.limits: ApiRateLimits = api.state.rate_limits
        self.template = heartbeat_route.path
        self.create_template = create_routes[0].path
        self.metrics = RequestMetrics(self.node.metrics)
        self.served = 0  # heartbeats answered here (tests and benches read it)
        self.at_once = 0  # of those, answered in the protocol's callback (the registry needed no I/O)
        self.creates = 0  # creates answered here
        self.serve_creates = True  # False: every create goes through ASGI (a harness that watches requests there)
        self.pools: PoolService = pool_service_of(api.state, self.node)
        self.create_body_max = min(_CREATE_BODY_MAX, self.node.settings.api.max_body_bytes)

    def answer_now(self, app: App, pool: str, executor_id: str, rid: str) -> _Answer | None:
        """The heartbeat's answer when the registry renews (or refuses) it without I/O
        (:meth:`tjobs.service.pools.PoolService.renew_now`); ``None`` when only an await can tell."""
        try:
            found = self.pools.renew_now(app, pool, executor_id)
        except Exception as error:
            return _failed(error, rid)
        return None if found is RENEW_LATER else _renewed(found)

    async def create(self, app: App, raw: bytes) -> _Answer:
        """What :func:`tjobs.api.routes_tasks.create_task` does once the request is admitted."""
        node = self.node
        self.limits.admit_creates(app, 1)
        created = await node.tasks.create(app, parse_json(raw, node.settings.limits.max_json_depth))
        if created.created:
            node.metrics.registrations.labels(app.id).inc()
        return 201 if created.created else 200, orjson.dumps(task_json(created.task)), None, None

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
        app = self.node.apps.fresh_app(key_hash)
        if app is None or app.disabled_at_ms is not None:
            return None
        if limits.enabled:
            template = template or self.template
            if not limits.would_admit(app, method, template):
                return None
            limits.admit_request(app, method, template)
            admission.admitted(client, app.id)
        return app


class _LeanCycle:
    """Stands in for uvicorn's request cycle while a lean request is answered: the protocol queues a
    request pipelined behind it, and marks it on disconnect or shutdown, as it does a real cycle. A
    create's body is gathered here by the protocol's ``on_body``; ``on_message_complete`` clears
    ``more_body`` and sets the message event, which starts ``then`` (a heartbeat has no body to wait for)."""

    __slots__ = ("body", "disconnected", "keep_alive", "more_body", "response_complete", "then")

    def __init__(self, then: Callable[[_LeanCycle], None] | None = None) -> None:
        self.body = b""
        self.disconnected = False
        self.keep_alive = True
        self.more_body = then is not None
        self.response_complete = False
        self.then = then

    @property
    def message_event(self) -> _LeanCycle:
        return self

    def set(self) -> None:  # message_event.set(): more of the body, all of it, or a disconnect
        if self.then is not None and not self.more_body and not self.disconnected:
            then, self.then = self.then, None
            then(self)


class LeanHeartbeatProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering plain heartbeats itself (see the module)."""

    lean: ClassVar[LeanHeartbeats]

    def on_headers_complete(self) -> None:
        try:
            answered = self._answer_heartbeat() or self._take_create()
        except Exception:  # a bug here must not cost the request: the app answers it
            logger.exception("the lean path failed; answering through the app")
            answered = False
        if not answered:
            super().on_headers_complete()

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

    def _answer_heartbeat(self) -> bool:
        parser = self.parser
        if parser.get_method() != b"PUT":
            return False
        match = _HEARTBEAT.fullmatch(self.url)
        if match is None or not self._plain():
            return False
        heads = _lean_heads(self.headers)
        if heads is None or heads[2] not in (None, b"0"):  # a body goes through ASGI
            return False
        authorization, rid, _, _ = heads
        started = time.perf_counter()
        lean = self.lean
        app = lean.admit(authorization, self.client)
        if app is None:
            return False
        pool, executor_id = match[1].decode(), match[2].decode()
        cycle = _LeanCycle()
        self.cycle = cycle  # type: ignore[assignment]
        rid = rid or new_request_id()
        token = request_id.set(rid)  # every log record meanwhile carries it (a task's copy of the context too)
        try:
            answer = None if self.flow.write_paused else lean.answer_now(app, pool, executor_id, rid)
            if answer is not None:  # the registry renewed (or refused) it without I/O: answered here
                lean.at_once += 1
                lean.served += 1
                self._respond(cycle, answer, rid, started)
                return True
            task = self.loop.create_task(self._heartbeat(cycle, app, pool, executor_id, rid, started))
        finally:
            request_id.reset(token)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        return True

    def _take_create(self) -> bool:
        """Take a single create (``POST /v1/tasks``) when the protocol may answer it (see the module): its
        body is gathered into a lean cycle, and the create starts once it is complete."""
        lean = self.lean
        if not lean.serve_creates or self.parser.get_method() != b"POST" or self.url != _CREATE or not self._plain():
            return False
        heads = _lean_heads(self.headers)
        if heads is None:
            return False
        authorization, rid, length, content_type = heads
        if not (length is not None and length.isdigit() and int(length) <= lean.create_body_max):
            return False
        if not (content_type and is_json_media_type(content_type)):
            return False
        started = time.perf_counter()
        app = lean.admit(authorization, self.client, "POST", lean.create_template)
        if app is None:
            return False
        rid = rid or new_request_id()
        self.cycle = _LeanCycle(lambda cycle: self._start_create(cycle, app, rid, started))  # type: ignore[assignment]
        return True

    def _start_create(self, cycle: _LeanCycle, app: App, rid: str, started: float) -> None:
        token = request_id.set(rid)  # the task's copy of the context carries it into every log record
        try:
            task = self.loop.create_task(self._create(cycle, app, rid, started))
        finally:
            request_id.reset(token)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _create(self, cycle: _LeanCycle, app: App, rid: str, started: float) -> None:
        lean = self.lean
        try:
            answer = await lean.create(app, cycle.body)
        except Exception as error:
            answer = _failed(error, rid)
        if not cycle.disconnected and self.flow.write_paused:
            await self.flow.drain()
        lean.creates += 1
        self._respond(cycle, answer, rid, started, "POST", lean.create_template)

    def on_message_begin(self) -> None:
        # a request that follows, in the same bytes, one answered at once: it is not idle (as data_received
        # would have stopped the keep-alive timer that answer armed)
        self._unset_keepalive_if_required()
        super().on_message_begin()

    async def _heartbeat(
        self, cycle: _LeanCycle, app: App, pool: str, executor_id: str, rid: str, started: float
    ) -> None:
        lean = self.lean
        try:
            executor = await pool_service_of(lean.api.state, lean.node).renew(app, pool, executor_id)
            answer = _renewed(executor)
        except Exception as error:
            answer = _failed(error, rid)
        if not cycle.disconnected and self.flow.write_paused:
            await self.flow.drain()
        lean.served += 1
        self._respond(cycle, answer, rid, started)

    def _respond(
        self, cycle: _LeanCycle, answer: _Answer, rid: str, started: float, method: str = "PUT", template: str = ""
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


# (status, JSON body, extra headers, the exception of a 500)
_Answer = tuple[int, bytes, "dict[str, str] | None", "Exception | None"]


def _renewed(executor: Executor) -> _Answer:
    return 200, orjson.dumps({"id": executor.id, "ttl_s": executor.ttl_s}), None, None


def _failed(error: Exception, rid: str) -> _Answer:
    if isinstance(error, TjobsError):  # the route's answer: 404 unknown executor, 503 registry down
        return error.status_code, orjson.dumps(error_content(error)), error_headers(error), None
    return 500, error_body(rid), None, error  # a bug: the metrics middleware's 500, with the request id


def heartbeat_protocol(api: FastAPI) -> type[LeanHeartbeatProtocol]:
    """The HTTP protocol class to give uvicorn (``http=``) for ``api``; its :class:`LeanHeartbeats` is
    also ``api.state.lean_heartbeats``."""
    lean = LeanHeartbeats(api)
    api.state.lean_heartbeats = lean
    return type("LeanHeartbeatProtocol", (LeanHeartbeatProtocol,), {"lean": lean})
