"""Recording changes in the audit log: :class:`AuditMiddleware` sees every request that may change
something (API and console), and writes one entry for each that succeeded.

- **Which requests.** ``POST``/``PUT``/``PATCH``/``DELETE`` under ``/v1`` and ``/console`` answered
  with a status below 400 by a caller the authentication recorded (:mod:`tjobs.api.principal`). The
  action's name comes from :data:`ACTIONS` (``task.pause``, ``app.rotate_key`` ...); a change route not
  listed there is still recorded, as ``<resource>.<method>`` (``calendar.put``). Not recorded: task
  creates (``POST /v1/tasks``, batches; the data plane: the task itself records its creation),
  previews and plans that change nothing, executor registrations (a heartbeat), an executor's run
  reports and log lines (the data plane: the flow keeps its run and log) and console sign-in.
- **Before.** The middleware reads nothing before the route runs. It sets a recorder
  (:mod:`tjobs.service.audit_scope`) in the request's context; the service that changes a task, an
  app or a target hands it the object it loaded for the change, once the request's input passed its
  checks, and the middleware renders that object (:func:`task_json`, :func:`app_json`,
  :func:`target_json`) as ``before``. A refused or unauthenticated request causes no read for the
  audit at all; ``before`` is ``null`` for a create.
- **After.** Only once the change succeeded, tasks, apps and targets are read again (an admin-level
  read, of the app that owns the object); a redriven flow's owner is read the same way. Otherwise the
  entry keeps the JSON the route answered as ``after``. :mod:`tjobs.service.audit` redacts secrets and
  caps both.
- **Via.** ``console`` for ``/console`` paths; ``cli`` when the request carries ``X-Tjobs-Client: cli``
  (the CLI's client sends it); else ``api``.
- **Failure.** The route's answer is held until its entry is written; if the write fails the caller
  gets ``503 audit_unavailable`` (``field`` ``audit``) instead: the change WAS made (the entry lives in
  another database than tasks, so it cannot share their transaction), it is just not on record. A
  client must read the object before repeating a change that is not idempotent (docs/operations.md,
  "Audit log").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tjobs.api.deps import error_content, error_headers
from tjobs.api.principal import Principal
from tjobs.api.render import app_json, task_json
from tjobs.errors import NotFound, TjobsError
from tjobs.model import parse_flow_id
from tjobs.observability.logs import request_id
from tjobs.service import audit_scope
from tjobs.service.audit import AuditEntry
from tjobs.service.operator_jobs import job_json
from tjobs.targets.codec import target_json

if TYPE_CHECKING:
    from tjobs.node import Node

CLIENT_HEADER = "x-tjobs-client"
CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
NOT_RECORDED = re.compile(
    r"^/v1/tasks(/batch|:batch)?$|^/v1/schedules:preview$|^/v1/shards:plan$|^/v1/pools/[^/]+/executors"
    r"|^/console/sign|^/v1/pools/[^/]+/heartbeat|^/v1/flows/[^/]+/(report|log)$"
)
MAX_RESPONSE_BYTES = 256 * 1024  # an answer larger than this is not parsed for ``after``

# (method, path pattern) -> (action, kind of object): the pattern's first group is the object's id
ACTIONS: list[tuple[str, re.Pattern[str], str, str]] = [
    (method, re.compile(pattern), action, kind)
    for method, pattern, action, kind in [
        ("PATCH", r"^/v1/tasks/([^/]+)$", "task.update", "task"),
        ("DELETE", r"^/v1/tasks/([^/]+)$", "task.delete", "task"),
        ("POST", r"^/v1/tasks/([^/]+)/(pause|resume|trigger)$", "task.{1}", "task"),
        ("POST", r"^/console/tasks/([^/]+)/edit$", "task.update", "task"),
        ("POST", r"^/console/tasks/([^/]+)/(pause|resume|trigger|delete)$", "task.{1}", "task"),
        ("POST", r"^/v1/flows/([^/]+)/redrive$", "flow.redrive", "flow"),
        ("POST", r"^/v1/dead-letters/redrive$", "flow.redrive_dead_letters", ""),
        ("POST", r"^/console/dead-letters/redrive$", "flow.redrive_dead_letters", ""),
        ("POST", r"^/v1/dead-letters/redrive-jobs$", "operator_job.redrive", "operator_job"),
        ("POST", r"^/console/dead-letters/redrive-jobs/([^/]+)$", "operator_job.redrive", "operator_job"),
        ("POST", r"^/v1/tasks/[^/]+/backfill$", "operator_job.backfill", "operator_job"),
        ("POST", r"^/(?:v1|console)/operator-jobs/([^/]+)/cancel$", "operator_job.cancel", "operator_job"),
        ("POST", r"^/v1/apps$", "app.create", "app"),
        ("POST", r"^/console/apps$", "app.create", "app"),
        ("PATCH", r"^/v1/apps/([^/]+)$", "app.update", "app"),
        ("POST", r"^/console/apps/([^/]+)/limits$", "app.update", "app"),
        ("POST", r"^/(?:v1|console)/apps/([^/]+)/rotate$", "app.rotate_key", "app"),
        ("POST", r"^/(?:v1|console)/apps/([^/]+)/(disable|enable|delete)$", "app.{1}", "app"),
        ("DELETE", r"^/v1/apps/([^/]+)$", "app.delete", "app"),
        ("POST", r"^/v1/targets$", "target.create", "target"),
        ("PATCH", r"^/v1/targets/([^/]+)$", "target.update", "target"),
        ("DELETE", r"^/v1/targets/([^/]+)$", "target.delete", "target"),
        ("POST", r"^/console/targets/([^/]+)/delete$", "target.delete", "target"),
    ]
]
_VERBS = {"POST": "create", "PUT": "put", "PATCH": "update", "DELETE": "delete"}


@dataclass(frozen=True, slots=True)
class Change:
    """What a request would change: ``action`` on the object ``object_id`` of ``kind``."""

    action: str
    kind: str  # "task", "app", "target", "flow" or "" (no object read)
    object_id: str


def change_of(method: str, path: str) -> Change | None:
    """The change a ``method`` on ``path`` makes, ``None`` for one that is not recorded."""
    if method not in CHANGES or not path.startswith(("/v1/", "/console/")) or NOT_RECORDED.search(path):
        return None
    for each_method, pattern, action, kind in ACTIONS:
        match = pattern.match(path) if each_method == method else None
        if match is not None:
            groups = match.groups()
            return Change(
                action.replace("{1}", groups[1] if len(groups) > 1 else ""), kind, groups[0] if groups else ""
            )
    parts = [part for part in path.split("/")[2:] if part]
    resource = re.sub(r"[^a-z0-9_]", "_", parts[0].split(":")[0].lower()).rstrip("s") if parts else "request"
    return Change(f"{resource}.{_VERBS[method]}", "", "/".join(parts[1:])[:200])


def via_of(path: str, headers: dict[str, str]) -> str:
    if path.startswith("/console/"):
        return "console"
    return "cli" if headers.get(CLIENT_HEADER, "").strip().lower() == "cli" else "api"


class Snapshots:
    """The objects a change is about, as the API renders them (``None``: not there, or unknown)."""

    def __init__(self, node: Node) -> None:
        self._node = node

    @staticmethod
    def render(kind: str, obj: Any) -> tuple[str | None, Any]:
        """A recorded object's owning app and its JSON (``None, None`` for none)."""
        if kind == "task" and obj is not None:
            return obj.app_id, task_json(obj)
        if kind == "app" and obj is not None:
            return obj.id, app_json(obj)
        if kind == "target" and obj is not None:
            return obj.app_id, target_json(obj)
        if kind == "operator_job" and obj is not None:
            return obj.app_id, job_json(obj)
        return None, None

    async def read(self, change: Change, app_id: str | None) -> tuple[str | None, Any]:
        """The object's owning app and its JSON, read from the store (after a change only)."""
        node = self._node
        try:
            if change.kind == "task" and change.object_id.isdigit():
                owner = await node.tasks.owner_of(int(change.object_id))
                task = await node.tasks.get(await node.app_service.get(owner), int(change.object_id))
                return owner, task_json(task)
            if change.kind == "app" and change.object_id:
                return change.object_id, app_json(await node.app_service.get(change.object_id))
            if change.kind == "target" and change.object_id and app_id:
                target = await node.target_service.get(await node.app_service.get(app_id), change.object_id)
                return app_id, target_json(target)
            if change.kind == "flow":
                task_id, _ = parse_flow_id(change.object_id)
                return await node.tasks.owner_of(task_id), None
            if change.kind == "operator_job" and change.object_id:
                job = await node.operator_jobs.get(None, change.object_id)
                return job.app_id, job_json(job)
        except (NotFound, ValueError):
            return None, None
        return None, None


def _seen_before(recorder: audit_scope.Recorder, change: Change) -> Any:
    """The object the services recorded for ``change`` (a task's id as the service wrote it: ``007`` is 7)."""
    object_id = change.object_id
    if change.kind == "task" and object_id.isdigit():
        object_id = str(int(object_id))
    return recorder.before(change.kind, object_id)


def _json_of(body: bytes, headers: list[tuple[bytes, bytes]]) -> Any:
    content_type = next((value for name, value in headers if name.lower() == b"content-type"), b"")
    if not body or b"json" not in content_type or len(body) > MAX_RESPONSE_BYTES:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


class AuditMiddleware:
    """Writes an audit entry for every successful change (see the module docstring)."""

    def __init__(self, app: ASGIApp, node: Node) -> None:
        self.app = app
        self._node = node
        self._snapshots = Snapshots(node)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        change = change_of(scope.get("method", ""), scope.get("path", "")) if scope["type"] == "http" else None
        if change is None:
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        held: list[Message] = []

        async def hold(message: Message) -> None:
            held.append(message)

        recorder = audit_scope.Recorder()
        token = audit_scope.current.set(recorder)
        try:
            await self.app(scope, receive, hold)
        finally:
            audit_scope.current.reset(token)
        start = next((m for m in held if m["type"] == "http.response.start"), None)
        principal = scope.get("state", {}).get("principal")
        if start is None or start["status"] >= 400 or not isinstance(principal, Principal):
            await _replay(held, send)
            return
        body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body")
        try:
            answered = _json_of(body, start.get("headers", []))
            owner, before = self._snapshots.render(change.kind, _seen_before(recorder, change))
            await self._record(change, principal, owner, before, answered, via_of(scope["path"], headers))
        except TjobsError as error:
            await _answer_error(error, send)
            return
        await _replay(held, send)

    async def _record(
        self,
        change: Change,
        principal: Principal,
        owner: str | None,
        before: Any,
        answered: Any,
        via: str,
    ) -> None:
        object_id = change.object_id
        if not object_id and isinstance(answered, dict):  # a create: the id (or name) it was given
            given = answered.get("id", answered.get("name"))
            object_id = str(given) if isinstance(given, str | int) else ""
        after: Any = answered
        if change.kind in ("task", "app", "target", "operator_job"):
            app_of = principal.app_id or owner
            found, read = await self._snapshots.read(Change(change.action, change.kind, object_id), app_of)
            owner = owner or found
            if change.kind != "target" or app_of:  # a target of no known app keeps the route's answer
                after = read
        elif change.kind == "flow" and principal.app_id is None:  # the admin: the flow's app
            owner, _ = await self._snapshots.read(change, None)
        app_id = principal.app_id or owner
        if change.kind == "app":
            app_id = object_id or app_id
        entry = AuditEntry(
            at_ms=0,
            actor_kind=principal.kind,
            actor_name=principal.name,
            app_id=app_id,
            action=change.action,
            object_id=object_id,
            before=before,
            after=after,
            source=principal.source,
            via=via,
            request_id=request_id.get() or "",
        )
        await self._node.audit.record(entry)


async def _replay(held: list[Message], send: Send) -> None:
    for message in held:
        await send(message)


async def _answer_error(error: TjobsError, send: Send) -> None:
    body = orjson.dumps(error_content(error))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(name.encode(), value.encode()) for name, value in (error_headers(error) or {}).items()]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
