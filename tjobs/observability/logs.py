"""The only place log handlers are configured: plain text for a terminal, JSON lines for machines.

JSON records carry ``ts``, ``level``, ``logger``, ``message`` and every ``extra`` field given at the
call site (``action``, ``flow_id``, ``task_id``, ...), so operators can filter on stable actions.

Every record emitted while the API serves a request also carries that request's ``request_id``
(:data:`request_id`, set by :class:`tjobs.api.metrics_middleware.MetricsMiddleware` and echoed in
the ``x-request-id`` response header), added by :class:`RequestIdFilter` on the handler, so a call
site never has to pass it.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import Any

import orjson

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}

request_id: ContextVar[str | None] = ContextVar("tjobs_request_id", default=None)
"""The id of the API request being served in this context (``None`` outside a request)."""


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to a record emitted while a request is served, unless the call site set one."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_id.get()
        if rid is not None and "request_id" not in record.__dict__:
            record.request_id = rid
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str = "INFO", json: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S"))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for chatty in ("alembic", "aiosqlite", "asyncio"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
