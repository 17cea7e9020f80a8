"""API request metrics and request ids, as one plain ASGI middleware (no per-request objects).

Every HTTP request is counted in ``tjobs_api_requests_total{route,method,status_class}`` and timed in
``tjobs_api_request_duration_seconds{route}``; ``route`` is the matched path template
(``/v1/tasks/{task_id}``), never the raw path, so labels stay bounded (``unmatched`` otherwise).

The request id is the caller's ``x-request-id`` when it sent one (up to 128 characters), else a fresh
one; it is echoed in the response's ``x-request-id`` and held in :data:`request_id` for the duration
of the request, so log lines written while serving it can carry it (``extra={"request_id": ...}``).
Errors (5xx) are logged with ``action="api_request_failed"`` and the request id.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextvars import ContextVar
from typing import Any

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tjobs.metrics import Metrics, status_class

logger = logging.getLogger(__name__)

request_id: ContextVar[str | None] = ContextVar("tjobs_request_id", default=None)

_HEADER = b"x-request-id"


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._counters: dict[tuple[str, str, int], Counter] = {}
        self._durations: dict[str, Histogram] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_request_id(scope) or uuid.uuid4().hex
        token = request_id.set(rid)
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (_HEADER, rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)
            self._observe(scope, status, time.perf_counter() - started, rid)

    def _observe(self, scope: Scope, status: int, duration_s: float, rid: str) -> None:
        route: Any = scope.get("route")
        template = str(getattr(route, "path", "unmatched"))
        method = str(scope.get("method", ""))
        key = (template, method, status // 100)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.metrics.api_requests.labels(
                template, method, status_class(status)
            )
        counter.inc()
        histogram = self._durations.get(template)
        if histogram is None:
            histogram = self._durations[template] = self.metrics.api_duration.labels(template)
        histogram.observe(duration_s)
        if status >= 500:
            logger.warning("%s %s answered %d", method, template, status,
                           extra={"action": "api_request_failed", "request_id": rid, "status": status})


def _incoming_request_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == _HEADER:
            text = str(value.decode("latin-1"))
            return text[:128] if text else None
    return None
