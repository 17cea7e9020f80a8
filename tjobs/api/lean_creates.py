"""Single creates answered below ASGI (:mod:`tjobs.api.lean_protocol`).

``POST /v1/tasks`` (issue 29: the ASGI layers and FastAPI's routing were over half a create's node CPU)
is served with what :func:`tjobs.api.routes_tasks.create_task` does: the authentication and request
admission the module above keeps, then the app's create token (429 with ``Retry-After``), the body parsed
within ``limits.max_json_depth`` (422 naming the field, :func:`tjobs.api.bodies.parse_json`),
:meth:`tjobs.service.tasks.TaskService.create`, the registration counted, and 201 (or 200 for an existing
key) with the task's JSON; metrics under ``/v1/tasks``. What goes through ASGI instead is what the module
above leaves there for a route with a JSON body.
"""

from __future__ import annotations

import orjson

from tjobs.api.bodies import parse_json
from tjobs.api.lean_protocol import Answer, LeanProtocol
from tjobs.api.render import task_json
from tjobs.api.routes_tasks import create_routes
from tjobs.model import App

_CREATE = create_routes[0].path.encode()  # POST /v1/tasks


class CreatePath(LeanProtocol):
    """Takes plain single creates (see the module); anything else is the next route's."""

    def _take(self) -> bool:
        return self._take_create() or super()._take()

    def _take_create(self) -> bool:
        lean = self.lean
        if not lean.serve_creates or self.parser.get_method() != b"POST" or self.url != _CREATE:
            return False
        return self._take_json(lean.create_template, self._create)

    async def _create(self, app: App, raw: bytes) -> Answer:
        """What :func:`tjobs.api.routes_tasks.create_task` does once the request is admitted."""
        lean = self.lean
        node = lean.node
        try:
            lean.limits.admit_creates(app, 1)
            created = await node.tasks.create(app, parse_json(raw, node.settings.limits.max_json_depth))
            if created.created:
                node.metrics.registrations.labels(app.id).inc()
            return 201 if created.created else 200, orjson.dumps(task_json(created.task)), None, None
        finally:
            lean.creates += 1
