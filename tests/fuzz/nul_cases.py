"""NUL bytes with trailing text, in every string a request may carry: each must be refused, a 422 naming the field.

Python's C-level parsers stop at a NUL: ``datetime.fromisoformat("2030-01-01T00:00:00Z\\x00junk")`` answers
the instant and drops the rest (issue 28). So for each string leaf of a valid body (every schedule kind,
every target protocol, an app, an executor, a preview) and each string query parameter, the valid value
followed by ``"\\u0000junk"`` must be refused, never stored shortened. The free-form JSON a task carries
(``payload``, ``callback.body``) is sent as is and is not walked.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from tests.fuzz.cases import SEEDED_TARGET, VALID_SCHEDULES, VALID_TARGETS, Case, valid_target, valid_task

NUL_TAIL = "\u0000junk"
FREE_FORM = frozenset({"payload", "callback.body"})  # arbitrary JSON, passed through to the callback

TASK_SCHEDULES: dict[str, dict[str, Any]] = {
    **VALID_SCHEDULES,
    "cron": {**VALID_SCHEDULES["cron"], "dst_gap": "skip", "dst_overlap": "once", "start_at": "2030-01-01T00:00:00Z"},
    "interval": {**VALID_SCHEDULES["interval"], "start_at": "2030-01-01T00:00:00Z", "end_at": "2031-01-01T00:00:00Z"},
}


def _string_leaves(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _string_leaves(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _string_leaves(child, (*path, index))


def _dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in path)


def _with_nul(body: Any, path: tuple[str | int, ...]) -> Any:
    made = copy.deepcopy(body)
    holder = made
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = holder[path[-1]] + NUL_TAIL
    return made


def _body_cases(label: str, method: str, route: str, body: dict[str, Any], *, admin: bool = False) -> list[Case]:
    cases = []
    for path, _ in _string_leaves(body):
        dotted = _dotted(path)
        if any(dotted == f or dotted.startswith(f + ".") for f in FREE_FORM):
            continue
        # an update reads the task it changes, then judges the new values against it
        made = _with_nul(body, path)
        cases.append(
            Case(
                f"{label} {dotted} with NUL",
                method,
                route,
                made,
                field=str(path[0]),
                admin=admin,
                reaches_storage=method == "PATCH",
            )
        )
    return cases


def nul_cases() -> list[Case]:
    cases: list[Case] = []
    for kind, schedule in TASK_SCHEDULES.items():
        task = {
            **valid_task(),
            "key": "k1",
            "schedule": copy.deepcopy(schedule),
            "callback": {"url": "http://127.0.0.1:9/hook", "method": "POST", "headers": {"x-a": "v"}},
        }
        cases += _body_cases(f"task create ({kind})", "POST", "/v1/tasks", task)
        cases += _body_cases(
            f"preview ({kind})", "POST", "/v1/schedules:preview", {"schedule": copy.deepcopy(schedule)}
        )
    cases += _body_cases(
        "task create (target)", "POST", "/v1/tasks", {**valid_task(), "callback": {"target": SEEDED_TARGET}}
    )
    cases += _body_cases("task create (pool)", "POST", "/v1/tasks", {**valid_task(), "callback": {"pool": "fuzz"}})
    cases += _body_cases("task update", "PATCH", "/v1/tasks/{task}", {"name": "renamed"})
    cases += _body_cases(
        "preview from",
        "POST",
        "/v1/schedules:preview",
        {"schedule": {**VALID_SCHEDULES["cron"]}, "from": "2030-01-01T00:00:00Z"},
    )
    for protocol in VALID_TARGETS:
        target = {**valid_target(protocol, f"nul-{protocol}"), "credentials": {"token": "t"}}
        if protocol == "http":
            target["settings"]["headers"] = {"x-a": "v"}
        cases += _body_cases(f"target create ({protocol})", "POST", "/v1/targets", target)
    app = {"name": "nul-app", "allowed_callback_hosts": ["example.com"], "callback_defaults": {"headers": {"x-a": "v"}}}
    cases += _body_cases("app create", "POST", "/v1/apps", app, admin=True)
    executor = {"address": "http://127.0.0.1:9/", "id": "e1", "zone": "z1"}
    cases += _body_cases("executor register", "POST", "/v1/pools/fuzz/executors", executor)
    for route, name, value in [
        ("/v1/flows", "status", "dead"),
        ("/v1/flows", "from", "2030-01-01T00:00:00Z"),
        ("/v1/flows", "to", "2030-01-01T00:00:00Z"),
        ("/v1/tasks", "key", "k1"),
        ("/v1/tasks", "name_prefix", "a"),
        ("/v1/tasks", "status", "active"),
        ("/v1/tasks", "kind", "cron"),
        ("/v1/slo", "window", "5m"),
    ]:
        query = f"{name}={quote(value + NUL_TAIL, safe='')}"
        cases.append(Case(f"GET {route} {name} with NUL", "GET", f"{route}?{query}", field=name))
    return cases
