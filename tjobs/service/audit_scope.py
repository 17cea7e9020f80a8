"""The audit log's "before": the object a request changes, as the service that changes it loaded it.

:class:`tjobs.api.audit_trail.AuditMiddleware` sets a :class:`Recorder` in :data:`current` for each
change request it records, before the route runs; the services that change a task, an app or a target
already load it (for their version check) and, once the request's input is valid, hand it to
:func:`saw_before`. The route runs in the middleware's context, so the middleware reads back what was
seen: no store read of its own before the change, none at all for a request that is refused. Without a
recorder (tests, internal callers) :func:`saw_before` does nothing.
"""

from __future__ import annotations

import copy
from contextvars import ContextVar
from typing import Any


class Recorder:
    """The objects one request's services loaded before changing them, by (kind, id); the last load
    wins (a change retried on a newer version was applied to that one)."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], Any] = {}

    def before(self, kind: str, object_id: str) -> Any:
        """The domain object recorded for ``kind`` ``object_id``, ``None`` if none was."""
        return self.seen.get((kind, object_id))


current: ContextVar[Recorder | None] = ContextVar("tjobs_audit_recorder", default=None)


def saw_before(kind: str, object_id: str | int, obj: Any) -> None:
    """Record ``obj`` (a Task, App or Target as loaded, before the change) for the request's audit entry:
    a shallow copy, so a service may go on to change the object's fields."""
    recorder = current.get()
    if recorder is not None:
        recorder.seen[(kind, str(object_id))] = copy.copy(obj)
