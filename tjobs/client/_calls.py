"""Every API operation as data (method, path, params, body, idempotency, parser), shared by both clients."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote

from tjobs.client.models import (
    App,
    AppDeleted,
    AppStats,
    BatchResult,
    Flow,
    Page,
    RedriveResult,
    SchedulePreview,
    Target,
    Task,
)
from tjobs.client.schedules import Schedule

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    idempotent: bool = False  # safe to resend after a lost answer
    missing_ok: bool = False  # a 404 on a resend means the first attempt did it (delete)


class _Omitted(Enum):
    TASK_PAYLOAD = "the task's own payload"


TASK_PAYLOAD: Final = _Omitted.TASK_PAYLOAD  # a trigger without an override (None is a payload: JSON null)


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


def task_request(
    name: str,
    schedule: Schedule,
    url: str | None = None,
    *,
    callback: dict[str, Any] | None = None,
    key: str | None = None,
    payload: Any = None,
    misfire_policy: str | None = None,
    delivery: str | None = None,
) -> dict[str, Any]:
    """The body of a create request; ``url`` is shorthand for ``callback={"url": url}``."""
    if (url is None) == (callback is None):
        raise ValueError("give exactly one of url or callback")
    body: dict[str, Any] = {"name": name, "schedule": schedule, "callback": callback or {"url": url}}
    for name_, value in (
        ("key", key),
        ("payload", payload),
        ("misfire_policy", misfire_policy),
        ("delivery", delivery),
    ):
        if value is not None:
            body[name_] = value
    return body


def create_task(body: dict[str, Any]) -> Call[Task]:
    return Call("POST", "/v1/tasks", _task, json=body, idempotent=body.get("key") is not None)


def create_tasks(bodies: Sequence[dict[str, Any]]) -> Call[BatchResult]:
    items = list(bodies)
    return Call(
        "POST",
        "/v1/tasks/batch",
        BatchResult.model_validate,
        json={"tasks": items},
        idempotent=all(b.get("key") is not None for b in items),
    )


def get_task(task_id: str) -> Call[Task]:
    return Call("GET", f"/v1/tasks/{_seg(task_id)}", _task, idempotent=True)


def list_tasks(
    limit: int,
    cursor: str | None,
    status: str | None,
    kind: str | None,
    name_prefix: str | None,
    key: str | None = None,
) -> Call[Page[Task]]:
    params = {
        k: v
        for k, v in {
            "limit": limit,
            "cursor": cursor,
            "status": status,
            "kind": kind,
            "name_prefix": name_prefix,
            "key": key,
        }.items()
        if v is not None
    }
    return Call("GET", "/v1/tasks", Page[Task].model_validate, params=params, idempotent=True)


def search_flows(
    limit: int,
    cursor: str | None,
    status: str | None,
    task_id: str | None,
    from_: str | int | None,
    to: str | int | None,
) -> Call[Page[Flow]]:
    given = {"limit": limit, "cursor": cursor, "status": status, "task_id": task_id, "from": from_, "to": to}
    params = {k: v for k, v in given.items() if v is not None}
    return Call("GET", "/v1/flows", Page[Flow].model_validate, params=params, idempotent=True)


def update_task(task_id: str, fields: dict[str, Any]) -> Call[Task]:
    return Call("PATCH", f"/v1/tasks/{_seg(task_id)}", _task, json=fields)


def pause_task(task_id: str) -> Call[Task]:
    return Call("POST", f"/v1/tasks/{_seg(task_id)}/pause", _task, idempotent=True)


def resume_task(task_id: str) -> Call[Task]:
    return Call("POST", f"/v1/tasks/{_seg(task_id)}/resume", _task, idempotent=True)


def trigger_task(task_id: str, payload: Any = TASK_PAYLOAD) -> Call[Flow]:
    body = None if payload is TASK_PAYLOAD else {"payload": payload}
    return Call("POST", f"/v1/tasks/{_seg(task_id)}/trigger", _flow, json=body)


def delete_task(task_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/tasks/{_seg(task_id)}", _none, idempotent=True, missing_ok=True)


def list_flows(task_id: str, limit: int, before_ms: int | None) -> Call[list[Flow]]:
    params: dict[str, Any] = {"limit": limit}
    if before_ms is not None:
        params["before_ms"] = before_ms
    return Call(
        "GET",
        f"/v1/tasks/{_seg(task_id)}/flows",
        lambda raw: [_flow(f) for f in raw["items"]],
        params=params,
        idempotent=True,
    )


def get_flow(flow_id: str) -> Call[Flow]:
    return Call("GET", f"/v1/flows/{_seg(flow_id)}", _flow, idempotent=True)


def dead_letters(limit: int, cursor: str | None) -> Call[Page[Flow]]:
    params: dict[str, Any] = {"limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/dead-letters", Page[Flow].model_validate, params=params, idempotent=True)


def redrive(flow_ids: Sequence[str]) -> Call[RedriveResult]:
    return Call("POST", "/v1/dead-letters/redrive", RedriveResult.model_validate, json={"flow_ids": list(flow_ids)})


def preview_schedule(schedule: Schedule, count: int, from_: str | int | None) -> Call[SchedulePreview]:
    body: dict[str, Any] = {"schedule": schedule, "count": count}
    if from_ is not None:
        body["from"] = from_
    return Call("POST", "/v1/schedules:preview", SchedulePreview.model_validate, json=body, idempotent=True)


def me() -> Call[App]:
    return Call("GET", "/v1/app", _app, idempotent=True)


def stats() -> Call[AppStats]:
    return Call("GET", "/v1/stats", AppStats.model_validate, idempotent=True)


def create_app(fields: dict[str, Any]) -> Call[App]:
    return Call("POST", "/v1/apps", _app, json=fields)


def get_app(app_id: str) -> Call[App]:
    return Call("GET", f"/v1/apps/{_seg(app_id)}", _app, idempotent=True)


def update_app(app_id: str, fields: dict[str, Any]) -> Call[App]:
    return Call("PATCH", f"/v1/apps/{_seg(app_id)}", _app, json=fields, idempotent=True)


def rotate_app(app_id: str, api_key: bool, secret: bool, grace_s: int) -> Call[App]:
    return Call(
        "POST", f"/v1/apps/{_seg(app_id)}/rotate", _app, json={"api_key": api_key, "secret": secret, "grace_s": grace_s}
    )


def list_apps(limit: int, cursor: str | None) -> Call[Page[App]]:
    params: dict[str, Any] = {"limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/apps", Page[App].model_validate, params=params, idempotent=True)


def disable_app(app_id: str) -> Call[App]:
    return Call("POST", f"/v1/apps/{_seg(app_id)}/disable", _app, idempotent=True)


def enable_app(app_id: str) -> Call[App]:
    return Call("POST", f"/v1/apps/{_seg(app_id)}/enable", _app, idempotent=True)


def delete_app(app_id: str, confirm: str) -> Call[AppDeleted]:
    # idempotent: a repeat goes on where a cut-short call stopped; after it finished, 404
    return Call(
        "DELETE", f"/v1/apps/{_seg(app_id)}", AppDeleted.model_validate, params={"confirm": confirm}, idempotent=True
    )


def app_stats(app_id: str) -> Call[AppStats]:
    return Call("GET", f"/v1/apps/{_seg(app_id)}/stats", AppStats.model_validate, idempotent=True)


def _target(raw: Any) -> Target:
    return Target.model_validate(raw)


def target_request(
    name: str,
    protocol: str,
    settings: dict[str, Any],
    *,
    retry: dict[str, int] | None = None,
    credentials: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The body of a target create request."""
    body: dict[str, Any] = {"name": name, "protocol": protocol, "settings": settings}
    if retry is not None:
        body["retry"] = retry
    if credentials is not None:
        body["credentials"] = credentials
    return body


def create_target(body: dict[str, Any]) -> Call[Target]:
    return Call("POST", "/v1/targets", _target, json=body)


def get_target(name: str) -> Call[Target]:
    return Call("GET", f"/v1/targets/{_seg(name)}", _target, idempotent=True)


def list_targets(limit: int, cursor: str | None) -> Call[Page[Target]]:
    params: dict[str, Any] = {"limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/targets", Page[Target].model_validate, params=params, idempotent=True)


def update_target(name: str, fields: dict[str, Any]) -> Call[Target]:
    return Call("PATCH", f"/v1/targets/{_seg(name)}", _target, json=fields)


def delete_target(name: str) -> Call[None]:
    return Call("DELETE", f"/v1/targets/{_seg(name)}", _none, idempotent=True, missing_ok=True)


def slo(window: str | None, app_id: str | None) -> Call[dict[str, Any]]:
    params = {k: v for k, v in {"window": window, "app_id": app_id}.items() if v is not None}
    return Call("GET", "/v1/slo", dict, params=params, idempotent=True)


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", dict, idempotent=True)
