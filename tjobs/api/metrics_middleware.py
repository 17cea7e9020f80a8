"""API request metrics and request ids, as one plain ASGI middleware (no per-request objects).

Every HTTP request is counted in ``tjobs_api_requests_total{route,method,status_class}`` and timed in
``tjobs_api_request_duration_seconds{route}``; ``route`` is the matched path template
(``/v1/tasks/{task_id}``), never the raw path, so labels stay bounded (``unmatched`` otherwise).

The request id is the caller's ``x-request-id`` when it is sane (1 to 128 visible ASCII characters:
no spaces, controls or non-ASCII, so it cannot forge or break a log line), else a fresh 32-hex one;
it is echoed in the response's ``x-request-id`` and held in :data:`tjobs.observability.logs.request_id` while the
request is served, so every log record emitted meanwhile carries it (:class:`tjobs.observability.logs.RequestIdFilter`).
Errors (5xx) are logged with ``action="api_request_failed"`` and the request id; an exception that
escapes the app before it answered is answered here (``500``, ``{"error": {"code": "internal_error"}}``,
with the ``x-request-id``) and logged with its traceback, instead of Starlette's bare text.

With ``metrics.enabled = false`` the requests are not counted or timed; request ids work the same.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

import orjson
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tjobs.observability.logs import request_id
from tjobs.observability.metrics import Metrics, status_class

logger = logging.getLogger(__name__)

_HEADER = b"x-request-id"
_SANE_ID = re.compile(rb"[\x21-\x7e]{1,128}")


class RequestMetrics:
    """Counts and times answered requests, and logs the 5xx ones (the middleware's accounting; the
    lean paths, :mod:`tjobs.api.lean_protocol`, record through one too)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._enabled = metrics.enabled
        self._counters: dict[tuple[str, str, int], Counter] = {}
        self._durations: dict[str, Histogram] = {}

    def observe(
        self, template: str, method: str, status: int, duration_s: float, rid: str, failure: Exception | None
    ) -> None:
        if status >= 500:
            logger.warning(
                "%s %s answered %d",
                method,
                template,
                status,
                exc_info=failure,
                extra={"action": "api_request_failed", "request_id": rid, "status": status},
            )
        if not self._enabled:
            return
        key = (template, method, status // 100)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.metrics.api_requests.labels(template, method, status_class(status))
        counter.inc()
        histogram = self._durations.get(template)
        if histogram is None:
            histogram = self._durations[template] = self.metrics.api_duration.labels(template)
        histogram.observe(duration_s)


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._requests = RequestMetrics(metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_request_id(scope) or new_request_id()
        token = request_id.set(rid)
        status = 0
        started = time.perf_counter()
        failure: Exception | None = None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (_HEADER, rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as error:
            if status:
                raise  # the response has begun: nothing better to answer
            # A bug: answer the API's error shape with the request id (logged below, with the traceback)
            failure = error
            await send_with_id({"type": "http.response.start", "status": 500, "headers": _ERROR_HEADERS})
            await send_with_id({"type": "http.response.body", "body": error_body(rid)})
        finally:
            request_id.reset(token)
            self._observe(scope, status or 500, time.perf_counter() - started, rid, failure)

    def _observe(self, scope: Scope, status: int, duration_s: float, rid: str, failure: Exception | None) -> None:
        route: Any = scope.get("route")
        template = str(getattr(route, "path", "unmatched"))
        self._requests.observe(template, str(scope.get("method", "")), status, duration_s, rid, failure)


_ERROR_HEADERS = [(b"content-type", b"application/json")]


def error_body(rid: str) -> bytes:
    return orjson.dumps(
        {"error": {"code": "internal_error", "message": f"internal error; quote request id {rid} when reporting it"}}
    )


def _incoming_request_id(scope: Scope) -> str | None:
    """The caller's ``x-request-id`` if it is sane (see the module doc), else ``None``."""
    for name, value in scope.get("headers", ()):
        if name == _HEADER:
            return sane_request_id(value)
    return None


def new_request_id() -> str:
    """A fresh request id: 32 random hex digits (``uuid.uuid4().hex`` spent twice the CPU on the same)."""
    return os.urandom(16).hex()


def sane_request_id(value: bytes) -> str | None:
    """An ``x-request-id`` header's value if it is sane (see the module doc), else ``None``."""
    return value.decode("ascii") if _SANE_ID.fullmatch(value) else None
