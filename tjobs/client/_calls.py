"""Every API operation written once, as data (verb, path, params, body, idempotency, parser), for both clients.

:class:`Api` holds one method per operation; :class:`tjobs.client.Client` and
:class:`tjobs.client.AsyncClient` inherit them as methods that send the call (see ``_operation``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, Final, TypedDict, TypeVar, Unpack
from urllib.parse import quote

from tjobs.client._operation import Call, Flavour, Pages, operation, paging
from tjobs.client.models import (
    App,
    AppDeleted,
    AppStats,
    BatchResult,
    DeadLetterCount,
    Flow,
    FlowCount,
    OperatorJob,
    Page,
    RedriveResult,
    RunLogged,
    RunReportAnswer,
    SchedulePreview,
    Target,
    Task,
)
from tjobs.client.schedules import Schedule

M = TypeVar("M")


class _Omitted(Enum):
    TASK_PAYLOAD = "the task's own payload"
    NO_RESULT = "no result"


TASK_PAYLOAD: Final = _Omitted.TASK_PAYLOAD  # a trigger without an override (None is a payload: JSON null)
NO_RESULT: Final = _Omitted.NO_RESULT  # a run report without a result (None is a result: JSON null)


def _seg(value: str) -> str:
    return quote(str(value), safe="")


def _task(raw: Any) -> Task:
    return Task.model_validate(raw)


def _flow(raw: Any) -> Flow:
    return Flow.model_validate(raw)


def _app(raw: Any) -> App:
    return App.model_validate(raw)


def _none(raw: Any) -> None:
    return None


def _raw(raw: Any) -> Any:
    return raw


def _target(raw: Any) -> Target:
    return Target.model_validate(raw)


def _given(params: dict[str, Any]) -> dict[str, Any]:
    """The query parameters that have a value."""
    return {k: v for k, v in params.items() if v is not None}


def _filters(filters: dict[str, Any]) -> dict[str, Any]:
    """Search filters as query parameters: ``from_`` is ``from``; those without a value are left out."""
    return _given({("from" if name == "from_" else name): value for name, value in filters.items()})


class FlowFilters(TypedDict, total=False):
    """What :meth:`Api.search_flows` narrows by (a filter left out or ``None`` does not narrow)."""

    status: str | None
    task_id: str | None
    from_: str | int | None
    to: str | int | None
    task_name_prefix: str | None
    target: str | None
    last_answer: str | None
    window: str | None


class TaskFields(TypedDict, total=False):
    """A task create request's fields beside its name and schedule (one left out or ``None`` is not sent)."""

    callback: dict[str, Any] | None
    key: str | None
    payload: Any
    misfire_policy: str | None
    delivery: str | None


def _declared(given: Mapping[str, Any], shape: type[Any]) -> dict[str, Any]:
    """Keyword arguments typed by the TypedDict ``shape``: each of its keys in declared order, ``None``
    where not given; a name it does not declare is a ``TypeError``, as an unknown keyword argument is."""
    names = shape.__annotations__
    unknown = given.keys() - names.keys()
    if unknown:
        raise TypeError(f"unexpected keyword argument {min(unknown)!r}")
    return {name: given.get(name) for name in names}


def _listing(path: str, page: type[Page[M]], params: dict[str, Any]) -> Call[Page[M]]:
    """A page of a listing: the ``params`` that have a value (``limit``, ``cursor``, filters) as the query."""
    return Call("GET", path, page.model_validate, params=_given(params), idempotent=True)


def task_request(name: str, schedule: Schedule, url: str | None = None, **fields: Unpack[TaskFields]) -> dict[str, Any]:
    """The body of a create request; ``url`` is shorthand for ``callback={"url": url}``."""
    given = _declared(fields, TaskFields)
    callback = given.pop("callback")
    if (url is None) == (callback is None):
        raise ValueError("give exactly one of url or callback")
    body: dict[str, Any] = {"name": name, "schedule": schedule, "callback": callback or {"url": url}}
    return body | _given(given)


class Api(Flavour):
    """Every API operation as a typed method.

    Idempotent calls (reads, pause, resume, delete, creates that carry a ``key``) are resent up to
    ``retries`` times after a connection error or a 502/503/504 (or a 429 with ``Retry-After``), with
    jittered exponential backoff; anything else is sent once. Use the admin key for the ``*_app`` calls.
    """

    # ---- tasks ----------------------------------------------------------------------------------

    @operation
    def create_task(
        self, name: str, schedule: Schedule, url: str | None = None, **fields: Unpack[TaskFields]
    ) -> Call[Task]:
        """Register a task (the body :func:`task_request` builds)."""
        body = task_request(name, schedule, url, **fields)
        return Call("POST", "/v1/tasks", _task, json=body, idempotent=body.get("key") is not None)

    @operation
    def create_tasks(self, requests: Sequence[dict[str, Any]]) -> Call[BatchResult]:
        """Up to 1,000 create bodies (see :func:`tjobs.client.task_request`); one result per item."""
        items = list(requests)
        idempotent = all(b.get("key") is not None for b in items)
        return Call("POST", "/v1/tasks/batch", BatchResult.model_validate, json={"tasks": items}, idempotent=idempotent)

    @operation
    def get_task(self, task_id: str) -> Call[Task]:
        return Call("GET", f"/v1/tasks/{_seg(task_id)}", _task, idempotent=True)

    @operation
    def list_tasks(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        name_prefix: str | None = None,
        key: str | None = None,
        health: bool = False,
    ) -> Call[Page[Task]]:
        """The app's tasks across every shard: newest first, or by name with ``name_prefix``. With
        ``health``, each task's :class:`TaskHealth` too (its last result and last 24 h); a page then
        holds at most 100 tasks whatever the ``limit`` (``next_cursor`` goes on)."""
        params = {"limit": limit, "cursor": cursor, "status": status, "kind": kind, "name_prefix": name_prefix}
        return _listing("/v1/tasks", Page[Task], {**params, "key": key, "health": "true" if health else None})

    @paging
    def iter_tasks(
        self,
        *,
        status: str | None = None,
        kind: str | None = None,
        name_prefix: str | None = None,
        page_size: int = 500,
        health: bool = False,
    ) -> Pages[Task]:
        filters: dict[str, Any] = {"status": status, "kind": kind, "name_prefix": name_prefix, "health": health}
        return Pages(lambda cursor: Api.list_tasks.build(self, limit=page_size, cursor=cursor, **filters))

    @operation
    def update_task(self, /, task_id: str, *, version: int | None = None, **fields: Any) -> Call[Task]:
        """Change ``name``, ``schedule``, ``callback``, ``payload``, ``misfire_policy`` or ``delivery``;
        with ``version`` (the task's version as read), raise :class:`VersionConflict` if another edit
        (update, pause, resume) landed since; fires never count. Without it the last edit wins."""
        if version is not None:
            fields["version"] = version
        return Call("PATCH", f"/v1/tasks/{_seg(task_id)}", _task, json=fields)

    @operation
    def pause_task(self, task_id: str) -> Call[Task]:
        return Call("POST", f"/v1/tasks/{_seg(task_id)}/pause", _task, idempotent=True)

    @operation
    def resume_task(self, task_id: str) -> Call[Task]:
        return Call("POST", f"/v1/tasks/{_seg(task_id)}/resume", _task, idempotent=True)

    @operation
    def trigger_task(self, task_id: str, *, payload: Any = TASK_PAYLOAD) -> Call[Flow]:
        """Fire the task now, with a manual flow of its own; its schedule does not change.

        ``payload`` (any JSON value, ``None`` included: JSON null) is sent instead of the task's payload
        for this flow only, on every attempt; left out, the task's own is sent. It is validated as a
        create's payload; a task whose callback has its own ``body`` or is a ``GET`` refuses it
        (:class:`BadRequest`, ``field == "payload"``). Not resent after a lost answer (a second manual
        flow would fire)."""
        body = None if payload is TASK_PAYLOAD else {"payload": payload}
        return Call("POST", f"/v1/tasks/{_seg(task_id)}/trigger", _flow, json=body)

    @operation
    def delete_task(self, task_id: str) -> Call[None]:
        return Call("DELETE", f"/v1/tasks/{_seg(task_id)}", _none, idempotent=True, missing_ok=True)

    # ---- flows ----------------------------------------------------------------------------------

    @operation
    def search_flows(
        self, *, limit: int = 100, cursor: str | None = None, **filters: Unpack[FlowFilters]
    ) -> Call[Page[Flow]]:
        """The app's flows across every shard, newest first: ``status`` (a flow status or
        ``retrying``), one task's, of tasks whose name starts with ``task_name_prefix`` or whose
        callback names ``target``, by ``last_answer`` (``none``, ``5xx``, ``503``), scheduled in
        ``[from_, to)`` (ISO-8601 or epoch ms) or in the last ``window`` (``15m``, ``1h``, ``24h``, ``7d``)."""
        query = _filters(_declared(filters, FlowFilters))
        return _listing("/v1/flows", Page[Flow], {"limit": limit, "cursor": cursor, **query})

    @paging
    def iter_flows(self, *, page_size: int = 500, **filters: Unpack[FlowFilters]) -> Pages[Flow]:
        """Every flow :meth:`search_flows` finds with ``filters``, read ``page_size`` at a time."""
        return Pages(lambda cursor: Api.search_flows.build(self, limit=page_size, cursor=cursor, **filters))

    @operation
    def count_flows(self, /, **filters: Any) -> Call[FlowCount]:
        """How many flows :meth:`search_flows` with these filters finds (exact up to ``at_most``)."""
        return Call("GET", "/v1/flows:count", FlowCount.model_validate, params=_filters(filters), idempotent=True)

    @operation
    def list_flows(
        self, task_id: str, *, limit: int = 100, before_ms: int | None = None, after_ms: int | None = None
    ) -> Call[list[Flow]]:
        """A task's flows, newest first: its newest ``limit``, or the ``limit`` scheduled just before
        ``before_ms`` (an older page) or just after ``after_ms`` (a newer page; epoch ms)."""
        return Call(
            "GET",
            f"/v1/tasks/{_seg(task_id)}/flows",
            lambda raw: [_flow(f) for f in raw["items"]],
            params=_given({"limit": limit, "before_ms": before_ms, "after_ms": after_ms}),
            idempotent=True,
        )

    @operation
    def get_flow(self, flow_id: str) -> Call[Flow]:
        return Call("GET", f"/v1/flows/{_seg(flow_id)}", _flow, idempotent=True)

    @operation
    def report_run(
        self,
        flow_id: str,
        status: str,
        *,
        attempt: int | None = None,
        progress: int | str | None = None,
        result: Any = NO_RESULT,
        message: str | None = None,
    ) -> Call[RunReportAnswer]:
        """Report on a run this executor accepted (README "Job runs"): ``status`` ``running`` (progress,
        0..100 or a text: a heartbeat), or ``succeeded`` / ``failed`` (the end, with ``result``: JSON,
        capped by the server). ``attempt`` is the ``tjobs-attempt`` header of the request that started
        the run. The answer's ``cancel_requested`` asks the executor to stop. Sent again after a lost
        answer: the report that ended a run, repeated, changes nothing."""
        body = {"status": status, **_given({"attempt": attempt, "progress": progress, "message": message})}
        if result is not NO_RESULT:
            body["result"] = result
        return Call(
            "POST", f"/v1/flows/{_seg(flow_id)}/report", RunReportAnswer.model_validate, json=body, idempotent=True
        )

    @operation
    def append_run_log(self, flow_id: str, lines: Sequence[str], *, attempt: int | None = None) -> Call[RunLogged]:
        """Append log lines to the flow's runs (kept with the flow; past the server's cap they are dropped
        and counted). Not resent after a lost answer (the lines would be kept twice)."""
        body = {"lines": list(lines), **_given({"attempt": attempt})}
        return Call("POST", f"/v1/flows/{_seg(flow_id)}/log", RunLogged.model_validate, json=body)

    @operation
    def cancel_run(self, flow_id: str) -> Call[RunReportAnswer]:
        """Ask the flow's running run to stop: its executor learns it from the answer to its next report;
        one that confirms nothing ends ``cancelled`` after the server's grace."""
        return Call("POST", f"/v1/flows/{_seg(flow_id)}/cancel", RunReportAnswer.model_validate, idempotent=True)

    @operation
    def dead_letters(self, /, *, limit: int = 100, cursor: str | None = None, **filters: Any) -> Call[Page[Flow]]:
        """The app's dead flows newest first, filtered as :meth:`search_flows` (no ``status``)."""
        return _listing("/v1/dead-letters", Page[Flow], {"limit": limit, "cursor": cursor, **_filters(filters)})

    @paging
    def iter_dead_letters(self, /, *, page_size: int = 500, **filters: Any) -> Pages[Flow]:
        return Pages(lambda cursor: Api.dead_letters.build(self, limit=page_size, cursor=cursor, **filters))

    @operation
    def count_dead_letters(self, /, *, dead_before: str | int | None = None, **filters: Any) -> Call[DeadLetterCount]:
        """How many dead letters match and died before ``dead_before`` (default now): the count a
        :meth:`start_redrive_job` confirms."""
        params = {**_filters(filters), **_given({"dead_before": dead_before})}
        return Call("GET", "/v1/dead-letters:count", DeadLetterCount.model_validate, params=params, idempotent=True)

    @operation
    def start_redrive_job(
        self, /, confirm_count: int, *, dead_before: str | int | None = None, **filters: Any
    ) -> Call[OperatorJob]:
        """Redrive every dead letter matching ``filters`` that died before ``dead_before``, as one server-side
        job; ``confirm_count`` must be the count :meth:`count_dead_letters` answered for them."""
        body = {"filters": _filters(filters), "confirm_count": confirm_count, **_given({"dead_before": dead_before})}
        return Call("POST", "/v1/dead-letters/redrive-jobs", OperatorJob.model_validate, json=body)

    @operation
    def start_backfill(
        self, task_id: str, *, from_: str | int, to: str | int, pace_per_s: int | None = None
    ) -> Call[OperatorJob]:
        """Run the task's schedule over the past range ``[from_, to)`` (ISO-8601 with an offset, or epoch
        ms; ``to`` not in the future) as manual flows, at most ``pace_per_s`` a second (the server's
        default 10), as one server-side job of kind ``backfill``: an instant that has a flow already is
        left as it is. Follow it with :meth:`get_operator_job`, stop it with :meth:`cancel_operator_job`.
        Not resent after a lost answer (a second job would start)."""
        body = {"from": from_, "to": to, **_given({"pace_per_s": pace_per_s})}
        return Call("POST", f"/v1/tasks/{_seg(task_id)}/backfill", OperatorJob.model_validate, json=body)

    @operation
    def get_operator_job(self, job_id: str) -> Call[OperatorJob]:
        return Call("GET", f"/v1/operator-jobs/{_seg(job_id)}", OperatorJob.model_validate, idempotent=True)

    @operation
    def list_operator_jobs(self, *, limit: int = 20) -> Call[list[OperatorJob]]:
        return Call(
            "GET",
            "/v1/operator-jobs",
            lambda raw: [OperatorJob.model_validate(job) for job in raw["items"]],
            params={"limit": limit},
            idempotent=True,
        )

    @operation
    def cancel_operator_job(self, job_id: str) -> Call[OperatorJob]:
        """Ask a job to stop after its batch in progress (a finished job is answered as it is)."""
        return Call("POST", f"/v1/operator-jobs/{_seg(job_id)}/cancel", OperatorJob.model_validate, idempotent=True)

    @operation
    def redrive(self, flow_ids: str | Sequence[str]) -> Call[RedriveResult]:
        ids = [flow_ids] if isinstance(flow_ids, str) else list(flow_ids)
        return Call("POST", "/v1/dead-letters/redrive", RedriveResult.model_validate, json={"flow_ids": ids})

    # ---- schedules ------------------------------------------------------------------------------

    @operation
    def preview_schedule(
        self,
        schedule: Schedule,
        *,
        count: int = 10,
        from_: str | int | None = None,
        task_id: str | int | None = None,
    ) -> Call[SchedulePreview]:
        """The next ``count`` instants of ``schedule`` (at or after ``from_``: ISO-8601 or epoch ms),
        as a task registered now would fire, in UTC and in the schedule's zone; with ``jitter_ms`` each
        also says when it fires (``fires_at``) for the task ``task_id`` (0 by default)."""
        body: dict[str, Any] = {"schedule": schedule, "count": count}
        if from_ is not None:
            body["from"] = from_
        if task_id is not None:
            body["task_id"] = int(task_id)
        return Call("POST", "/v1/schedules:preview", SchedulePreview.model_validate, json=body, idempotent=True)

    # ---- the calling app, and app management (admin key) ---------------------------------------------

    @operation
    def app(self) -> Call[App]:
        return Call("GET", "/v1/app", _app, idempotent=True)

    @operation
    def stats(self) -> Call[AppStats]:
        return Call("GET", "/v1/stats", AppStats.model_validate, idempotent=True)

    @operation
    def create_app(self, /, name: str, **fields: Any) -> Call[App]:
        return Call("POST", "/v1/apps", _app, json={"name": name, **fields})

    @operation
    def get_app(self, app_id: str) -> Call[App]:
        return Call("GET", f"/v1/apps/{_seg(app_id)}", _app, idempotent=True)

    @operation
    def update_app(self, /, app_id: str, **fields: Any) -> Call[App]:
        return Call("PATCH", f"/v1/apps/{_seg(app_id)}", _app, json=fields, idempotent=True)

    @operation
    def rotate_app(self, app_id: str, *, api_key: bool = True, secret: bool = True, grace_s: int = 86_400) -> Call[App]:
        body = {"api_key": api_key, "secret": secret, "grace_s": grace_s}
        return Call("POST", f"/v1/apps/{_seg(app_id)}/rotate", _app, json=body)

    @operation
    def list_apps(self, *, limit: int = 100, cursor: str | None = None) -> Call[Page[App]]:
        return _listing("/v1/apps", Page[App], {"limit": limit, "cursor": cursor})

    @operation
    def disable_app(self, app_id: str) -> Call[App]:
        """Its key answers 403 and its tasks do not fire until :meth:`enable_app`."""
        return Call("POST", f"/v1/apps/{_seg(app_id)}/disable", _app, idempotent=True)

    @operation
    def enable_app(self, app_id: str) -> Call[App]:
        """Its tasks resume under their misfire policy."""
        return Call("POST", f"/v1/apps/{_seg(app_id)}/enable", _app, idempotent=True)

    @operation
    def delete_app(self, app_id: str, *, confirm: str) -> Call[AppDeleted]:
        """Delete the app with all its tasks and targets; ``confirm`` must repeat ``app_id``."""
        # idempotent: a repeat goes on where a cut-short call stopped; after it finished, 404
        path = f"/v1/apps/{_seg(app_id)}"
        return Call("DELETE", path, AppDeleted.model_validate, params={"confirm": confirm}, idempotent=True)

    @operation
    def app_stats(self, app_id: str) -> Call[AppStats]:
        return Call("GET", f"/v1/apps/{_seg(app_id)}/stats", AppStats.model_validate, idempotent=True)

    # ---- targets --------------------------------------------------------------------------------

    @operation
    def create_target(
        self,
        name: str,
        protocol: str,
        settings: dict[str, Any],
        *,
        retry: dict[str, int] | None = None,
        credentials: dict[str, str] | None = None,
    ) -> Call[Target]:
        """Create a named target (``protocol``: http, grpc, amqp, nats or redis_stream) the app's tasks
        name with ``callback={"target": name}``; ``credentials`` are stored and never answered."""
        body = {"name": name, "protocol": protocol, "settings": settings}
        return Call("POST", "/v1/targets", _target, json=body | _given({"retry": retry, "credentials": credentials}))

    @operation
    def get_target(self, name: str) -> Call[Target]:
        return Call("GET", f"/v1/targets/{_seg(name)}", _target, idempotent=True)

    @operation
    def list_targets(self, *, limit: int = 100, cursor: str | None = None) -> Call[Page[Target]]:
        return _listing("/v1/targets", Page[Target], {"limit": limit, "cursor": cursor})

    @operation
    def update_target(self, /, name: str, *, version: int | None = None, **fields: Any) -> Call[Target]:
        """Replace ``settings`` or ``retry``, or ``protocol`` with ``settings``; ``credentials`` are merged
        into the stored ones (a ``None`` value removes a key, ``{}`` clears them); with ``version`` (as
        read), raise :class:`VersionConflict` if it moved since."""
        if version is not None:
            fields["version"] = version
        return Call("PATCH", f"/v1/targets/{_seg(name)}", _target, json=fields)

    @operation
    def delete_target(self, name: str) -> Call[None]:
        """Delete a target; :class:`Conflict` (``code == "target_in_use"``, ``details["tasks"]``) while
        tasks that can still fire name it."""
        return Call("DELETE", f"/v1/targets/{_seg(name)}", _none, idempotent=True, missing_ok=True)

    @operation
    def slo(self, window: str | None = None, *, app_id: str | None = None) -> Call[dict[str, Any]]:
        """Service levels: the cluster's over ``window`` (``5m``, ``1h``, ``1d``, ``7d``; the same on every
        node), or without it this node's; the admin key names an app with ``app_id`` (default: all)."""
        return Call("GET", "/v1/slo", dict, params=_given({"window": window, "app_id": app_id}), idempotent=True)

    @operation
    def audit(
        self,
        *,
        app_id: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: str | None = None,
        until: str | None = None,
        object_id: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Call[dict[str, Any]]:
        """One page of the audit log, newest first: ``{"items": [...], "next_cursor": ...}`` (the admin key:
        every app, ``app_id`` narrows; an app key: its own). ``action`` is a name or a prefix
        (``task.``); ``since``/``until`` RFC 3339 instants or epoch ms."""
        params: dict[str, Any] = {"app": app_id, "actor": actor, "action": action, "since": since, "until": until}
        params |= {"object": object_id, "cursor": cursor, "limit": limit}
        return Call("GET", "/v1/audit", dict, params=_given(params), idempotent=True)

    @operation
    def health(self) -> Call[dict[str, Any]]:
        return Call("GET", "/healthz", dict, idempotent=True)

    @operation
    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None) -> Call[Any]:
        """Any API route the SDK has no method for (``/v1/users``, ``/v1/alerts/...``): its JSON answer
        (``None`` for none). ``GET``, ``PUT`` and ``DELETE`` are resent as reads are; a ``DELETE`` whose
        resend finds nothing (404) did its work the first time."""
        verb = method.upper()
        again = verb in ("GET", "HEAD", "PUT", "DELETE")
        return Call(
            verb, path, _raw, params=_given(params or {}), json=json, idempotent=again, missing_ok=verb == "DELETE"
        )
