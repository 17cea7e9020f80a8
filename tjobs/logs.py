"""The only place log handlers are configured: plain text for a terminal, JSON lines for machines.

JSON records carry ``ts``, ``level``, ``logger``, ``message`` and every ``extra`` field given at the
call site (``action``, ``flow_id``, ``task_id``, ...), so operators can filter on stable actions.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


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
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for chatty in ("alembic", "aiosqlite", "asyncio"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
