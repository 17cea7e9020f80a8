"""The bad-input table: every request field × the bad values of its kind, plus bad paths, ids, cursors,
query parameters and whole bodies. Each case must be refused with a 4xx (never a 5xx, never accepted),
and a 422 must name the field.

A case is data, not code: :func:`all_cases` builds the list systematically, so adding a field or a bad
value adds its cases everywhere that field appears (single create, batch item, update).
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass, field
from typing import Any

MAX_I64 = (1 << 63) - 1


class Raw:
    """A JSON literal spliced into the body as is (numbers orjson cannot represent exactly, deep nests)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:40]!r})"


def nested_list(depth: int) -> Raw:
    return Raw("[" * depth + "]" * depth)


def nested_object(depth: int) -> Raw:
    return Raw('{"a":' * depth + "1" + "}" * depth)


@dataclass
class Case:
    """One request that must be refused. ``field`` is what a 422 must name (a prefix of ``error.field``);
    ``statuses`` the acceptable answers (any 4xx by default)."""

    name: str
    method: str
    path: str
    body: Any = None  # a JSON-able structure, possibly holding Raw leaves
    content: bytes | None = None  # a raw body instead of ``body``
    headers: dict[str, str] = field(default_factory=dict)
    field: str | None = None
    statuses: tuple[int, ...] = ()
    batch_item: bool = False  # a batch: the answer is 200 and items[0] must be refused
    admin: bool = False


def render(value: Any) -> str:
    """JSON text of ``value`` with :class:`Raw` leaves spliced in verbatim."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{_string(k)}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    if isinstance(value, str):
        return _string(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    return repr(value)


def _string(text: str) -> str:
    import json

    return json.dumps(text)


# ---- bad values by kind --------------------------------------------------------------------------

NOT_JSON = {"1e400", "NaN"}  # literals no JSON parser accepts: the body itself is named
DEEP = [nested_list(300), nested_object(300), nested_list(1000)]
WRONG_SHAPES: list[Any] = [[], {}, True]

INTEGER_BAD: list[Any] = [
    "10",
    1.5,
    True,
    -1,
    [],
    {},
    Raw("18446744073709551616"),
    Raw("-18446744073709551616"),
    Raw("100000000000000000000000000000"),
    1 << 63,
    Raw("1e400"),
    Raw("NaN"),
    *DEEP,
]
ENUM_BAD: list[Any] = ["", "nope", "FIRE_NOW\u0000", 1, True, [], {}, *DEEP]
TEXT_BAD: list[Any] = ["", "   ", "a\u0000b", "a\u007fb", "a\u001bb", "a\nb", "x" * 201, 1, True, [], {}, *DEEP]
INSTANT_BAD: list[Any] = [
    "",
    "tomorrow",
    "2026-13-01T00:00:00Z",
    "2026-11-21T17:00:00",
    "2026-11-21T17:00:00+25:00",
    1,
    True,
    [],
    {},
    *DEEP,
]
EXPR_BAD: list[Any] = ["", "* * *", "61 * * * *", "a b c d e", "* * * * * * *", "0 0 30 2 *", 1, [], *DEEP]
TIMEZONE_BAD: list[Any] = ["", "Mars/Base", "../../etc/passwd", "UTC\u0000", 1, [], *DEEP]
URL_BAD: list[Any] = [
    "",
    "ftp://example.com/",
    "http://",
    "http:///x",
    "http://a b/",
    "http://127.0.0.1:99999/",
    "http://[::1/",
    "javascript:alert(1)",
    "http://u:p@example.com/",
    1,
    [],
    {},
    *DEEP,
]
HEADERS_BAD: list[Any] = [
    [],
    "x-a: b",
    {"bad name": "v"},
    {"x-a": 1},
    {"x-a": "a\u0000b"},
    {"x-a": "a\u007fb"},
    {"x-a": "a\rb"},
    {"x-a": "a\u0001b"},
    {"host": "x"},
    {"webhook-id": "x"},
    {"x-a": "v" * 4097},
    {"x-a": ["v"]},
    *DEEP,
]
BODY_BAD: list[Any] = [1, {}, [], True, "x" * 65_537, *DEEP]
PAYLOAD_BAD: list[Any] = [
    *DEEP,
    nested_list(255),
    nested_object(256),
    Raw("18446744073709551616"),
    Raw("-9223372036854775809"),
    Raw("-9223372036854775809000"),
    {"n": Raw("123456789012345678901234567890")},
    "x" * 65_537,
]

VALID_SCHEDULES: dict[str, dict[str, Any]] = {
    "delay": {"kind": "delay", "delay_ms": 3_600_000},
    "at": {"kind": "at", "at": "2030-01-01T00:00:00Z"},
    "cron": {"kind": "cron", "expr": "0 9 * * *", "timezone": "Asia/Shanghai"},
    "interval": {"kind": "interval", "every_ms": 30_000},
}


def valid_task() -> dict[str, Any]:
    return {
        "name": "fuzz",
        "schedule": dict(VALID_SCHEDULES["delay"]),
        "callback": {"url": "http://127.0.0.1:9/hook"},
        "payload": {"n": 1},
    }


# (path in the create body, bad values, the schedule kind it belongs to or None)
TASK_FIELDS: list[tuple[str, list[Any], str | None]] = [
    ("name", TEXT_BAD, None),
    ("key", [v for v in TEXT_BAD if v != "   "], None),
    ("misfire_policy", ENUM_BAD, None),
    ("delivery", ENUM_BAD, None),
    ("payload", PAYLOAD_BAD, None),
    ("schedule", [None, "delay", 1, [], {}, {"kind": "weekly"}, *DEEP], None),
    ("schedule.kind", ENUM_BAD, "delay"),
    ("schedule.delay_ms", INTEGER_BAD, "delay"),
    ("schedule.at", INSTANT_BAD, "at"),
    ("schedule.expr", EXPR_BAD, "cron"),
    ("schedule.timezone", TIMEZONE_BAD, "cron"),
    ("schedule.dst_gap", ENUM_BAD, "cron"),
    ("schedule.every_ms", [*INTEGER_BAD, 0, 999], "interval"),
    ("schedule.start_at", INSTANT_BAD, "interval"),
    ("schedule.end_at", INSTANT_BAD, "interval"),
    ("schedule.max_fires", [*INTEGER_BAD, 0], "interval"),
    ("callback", [None, "http://x/", 1, [], {}, *DEEP], None),
    ("callback.url", URL_BAD, None),
    (
        "callback.urls",
        [
            [],
            "http://127.0.0.1:9/",
            ["http://127.0.0.1:9/"] * 2,
            [1],
            ["ftp://x/"],
            ["http://127.0.0.1:9/a"] * 11,
            *DEEP,
        ],
        None,
    ),
    ("callback.method", ENUM_BAD, None),
    ("callback.headers", HEADERS_BAD, None),
    ("callback.body", BODY_BAD, None),
    ("callback.timeout_ms", [*INTEGER_BAD, 0, 60_001], None),
    ("callback.max_attempts", [*INTEGER_BAD, 0, 51], None),
    ("callback.max_age_s", [*INTEGER_BAD, 0], None),
]

# where a 422 may name a field more precisely than the one set (its own path, or a child of it)
NULL_IS_FINE = {"key", "misfire_policy", "delivery", "payload"}


def with_field(body: dict[str, Any], path: str, value: Any, kind: str | None) -> dict[str, Any]:
    made = copy.deepcopy(body)
    if kind is not None:
        made["schedule"] = dict(VALID_SCHEDULES[kind])
    parts = path.split(".")
    target: dict[str, Any] = made
    for part in parts[:-1]:
        target = target[part]
    if parts[-1] == "urls":
        target.pop("url", None)
    target[parts[-1]] = value
    return made


def _label(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field_cases() -> list[Case]:
    cases: list[Case] = []
    for path, values, kind in TASK_FIELDS:
        for value in values:
            if value is None and path in NULL_IS_FINE:
                continue
            body = with_field(valid_task(), path, value, kind)
            top = path.split(".")[0]
            expected = "body" if isinstance(value, Raw) and value.text in NOT_JSON else top
            cases.append(Case(f"create {path}={_label(value)}", "POST", "/v1/tasks", body, field=expected))
            cases.append(
                Case(f"batch {path}={_label(value)}", "POST", "/v1/tasks/batch", {"tasks": [body]}, batch_item=True)
            )
            if path != "key" and not path.startswith("schedule.") and value is not None:
                update = {top: body[top]}
                cases.append(
                    Case(
                        f"update {top} via {path}={_label(value)}", "PATCH", "/v1/tasks/{task}", update, field=expected
                    )
                )
    return cases


APP_FIELDS: list[tuple[str, list[Any]]] = [
    ("name", [v for v in TEXT_BAD if v != "x" * 201] + ["x" * 101]),
    ("rate_limit_per_s", ["10", True, 0, -1, Raw("1e400"), [], {}, *DEEP]),
    ("max_concurrency", [*INTEGER_BAD, 0, 10_001]),
    ("allowed_callback_hosts", ["example.com", [1], {}, True, *DEEP]),
    (
        "callback_defaults",
        ["x", [], {"method": "TRACE"}, {"timeout_ms": 0}, {"headers": {"x-a": "a\u0000"}}, {"nope": 1}, *DEEP],
    ),
    ("max_active_tasks", [*INTEGER_BAD]),
]


def app_cases() -> list[Case]:
    cases: list[Case] = []
    for name, values in APP_FIELDS:
        for value in values:
            body = {"name": "fuzz-app", name: value}
            expected = "body" if isinstance(value, Raw) and value.text in NOT_JSON else name
            cases.append(
                Case(f"app create {name}={_label(value)}", "POST", "/v1/apps", body, field=expected, admin=True)
            )
    return cases


BAD_TASK_IDS = [
    "9223372036854775808",
    "99999999999999999999",
    "18446744073709551616",
    "-1",
    "abc",
    "1e3",
    "\u0663",
    "0x10",
    "1.0",
    " 1",
    "00000000000000000000001",
]
TASK_ROUTES = [
    ("GET", "/v1/tasks/{id}"),
    ("DELETE", "/v1/tasks/{id}"),
    ("POST", "/v1/tasks/{id}/pause"),
    ("POST", "/v1/tasks/{id}/resume"),
    ("POST", "/v1/tasks/{id}/trigger"),
    ("GET", "/v1/tasks/{id}/flows"),
    ("PATCH", "/v1/tasks/{id}"),
]
BAD_FLOW_IDS = [
    "1-99999999999999999999",
    "9223372036854775808-1",
    "1-9223372036854775808",
    "1-",
    "-1",
    "a-b",
    "1-2-3",
    "99999999999999999999999-1",
]


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


BAD_CURSORS = [
    _cursor(t)
    for t in (
        "1.9223372036854775808",
        "9223372036854775808.0",
        "99999999999999999999.1",
        "-1.0",
        "1.2.3",
        "1",
        "a.b",
        "1.99999999999999999999999999",
        "1.9223372036854775808.9223372036854775808",
        "0.0.99999999999999999999",
    )
]
BAD_CURSORS += ["!!!", "%00", "a" * 201]


def id_cases() -> list[Case]:
    cases: list[Case] = []
    for method, route in TASK_ROUTES:
        for bad in BAD_TASK_IDS:
            body = {"name": "x"} if method == "PATCH" else None
            cases.append(Case(f"{method} {route} id={bad!r}", method, route.replace("{id}", _quote(bad)), body))
    for bad in BAD_FLOW_IDS:
        cases.append(Case(f"GET flow {bad!r}", "GET", f"/v1/flows/{_quote(bad)}"))
        cases.append(Case(f"redrive flow {bad!r}", "POST", f"/v1/flows/{_quote(bad)}/redrive"))
        cases.append(
            Case(f"redrive many {bad!r}", "POST", "/v1/dead-letters/redrive", {"flow_ids": [bad]}, statuses=(200,))
        )
    for cursor in BAD_CURSORS:
        cases.append(Case(f"list cursor {cursor!r}", "GET", f"/v1/tasks?cursor={_quote(cursor)}", field="cursor"))
        cases.append(
            Case(f"dead-letter cursor {cursor!r}", "GET", f"/v1/dead-letters?cursor={_quote(cursor)}", field="cursor")
        )
    for query in (
        "limit=0",
        "limit=1001",
        "limit=abc",
        "limit=99999999999999999999",
        "status=nope",
        "kind=weekly",
        "name_prefix=",
    ):
        cases.append(Case(f"list {query}", "GET", f"/v1/tasks?{query}"))
    for query in ("before_ms=-1", "before_ms=9223372036854775808", "before_ms=x", "limit=0"):
        cases.append(Case(f"flows {query}", "GET", f"/v1/tasks/{{task}}/flows?{query}"))
    return cases


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def body_cases() -> list[Case]:
    task = render(valid_task()).encode()
    json_type = {"content-type": "application/json"}
    cases = [
        Case("not JSON", "POST", "/v1/tasks", content=b"{nope", headers=json_type, field="body"),
        Case("empty body", "POST", "/v1/tasks", content=b"", headers=json_type, field="body"),
        Case("JSON array", "POST", "/v1/tasks", content=b"[]", headers=json_type, field="body"),
        Case("JSON string", "POST", "/v1/tasks", content=b'"x"', headers=json_type, field="body"),
        Case("invalid UTF-8", "POST", "/v1/tasks", content=b'{"name": "\xff"}', headers=json_type, field="body"),
        Case("lone surrogate", "POST", "/v1/tasks", content=b'{"name": "\\ud800"}', headers=json_type),
        Case("unknown field", "POST", "/v1/tasks", {**valid_task(), "color": "red"}, field="color"),
        Case("missing name", "POST", "/v1/tasks", {k: v for k, v in valid_task().items() if k != "name"}, field="name"),
        Case(
            "body nested 1,025",
            "POST",
            "/v1/tasks",
            content=render(nested_list(1025)).encode(),
            headers=json_type,
            field="body",
        ),
        Case("text/plain", "POST", "/v1/tasks", content=task, headers={"content-type": "text/plain"}, statuses=(415,)),
        Case(
            "form",
            "POST",
            "/v1/tasks",
            content=task,
            headers={"content-type": "application/x-www-form-urlencoded"},
            statuses=(415,),
        ),
        Case("no content-type", "POST", "/v1/tasks", content=task, headers={"content-type": ""}, statuses=(415,)),
        Case(
            "batch text/plain",
            "POST",
            "/v1/tasks/batch",
            content=b'{"tasks": [' + task + b"]}",
            headers={"content-type": "text/plain"},
            statuses=(415,),
        ),
        Case(
            "update text/plain",
            "PATCH",
            "/v1/tasks/{task}",
            content=b'{"name": "y"}',
            headers={"content-type": "text/plain"},
            statuses=(415,),
        ),
        Case(
            "body over 1 MiB", "POST", "/v1/tasks", content=b" " * (1 << 20) + task, headers=json_type, statuses=(413,)
        ),
        Case("batch not a list", "POST", "/v1/tasks/batch", {"tasks": {}}, field="tasks"),
        Case("batch empty", "POST", "/v1/tasks/batch", {"tasks": []}, field="tasks"),
        Case("batch 1,001", "POST", "/v1/tasks/batch", {"tasks": [valid_task()] * 1001}, field="tasks"),
        Case("batch unknown key", "POST", "/v1/tasks/batch", {"tasks": [valid_task()], "x": 1}, field="x"),
        Case(
            "batch deep",
            "POST",
            "/v1/tasks/batch",
            {"tasks": [{**valid_task(), "payload": nested_list(400)}]},
            field="tasks",
        ),
        Case("redrive not a list", "POST", "/v1/dead-letters/redrive", {"flow_ids": "1-2"}, field="flow_ids"),
        Case("redrive empty", "POST", "/v1/dead-letters/redrive", {"flow_ids": []}, field="flow_ids"),
        Case(
            "rotate grace_s huge",
            "POST",
            "/v1/apps/{app}/rotate",
            {"grace_s": Raw("18446744073709551616")},
            field="grace_s",
            admin=True,
        ),
        Case("rotate grace_s negative", "POST", "/v1/apps/{app}/rotate", {"grace_s": -1}, field="grace_s", admin=True),
        Case("wrong method on /v1/tasks", "PUT", "/v1/tasks", statuses=(405,)),
        Case("wrong method on a task", "PUT", "/v1/tasks/{task}", {"name": "x"}, statuses=(405,)),
    ]
    return cases


def all_cases() -> list[Case]:
    return [*field_cases(), *app_cases(), *id_cases(), *body_cases()]
