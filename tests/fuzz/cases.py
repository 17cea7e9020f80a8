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
    # gets past validation to the store, so it runs on SQLite and MariaDB too: set by the generators below,
    # checked by tests/fuzz/test_bad_input.py, which records each request's store calls on the in-memory twin
    reaches_storage: bool = False


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


def read_as_json(body: Any) -> bool:
    """``body`` has no :class:`Raw` leaf: a Raw (a number beyond 64 bits, NaN, a nest deeper than the
    parser takes) is refused as the body is read, before any handler looks at the store."""
    if isinstance(body, Raw):
        return False
    if isinstance(body, dict):
        return all(read_as_json(v) for v in body.values())
    if isinstance(body, list):
        return all(read_as_json(v) for v in body)
    return True


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
                        f"update {top} via {path}={_label(value)}",
                        "PATCH",
                        "/v1/tasks/{task}",
                        update,
                        field=expected,
                        # an update reads the task it changes, then judges the new values against it
                        reaches_storage=read_as_json(update),
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
BAD_APP_IDS = ["a\u0000b", "a b", "x" * 65, "-x", "a/b", "\u00e9"]
APP_ROUTES = [
    ("GET", "/v1/apps/{id}"),
    ("PATCH", "/v1/apps/{id}"),
    ("DELETE", "/v1/apps/{id}"),
    ("POST", "/v1/apps/{id}/rotate"),
    ("POST", "/v1/apps/{id}/disable"),
    ("POST", "/v1/apps/{id}/enable"),
    ("GET", "/v1/apps/{id}/stats"),
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
    for method, route in APP_ROUTES:  # refused by their form, before any store is asked (404, as unknown)
        for bad in BAD_APP_IDS:
            body = {} if method in ("PATCH", "POST") else None
            cases.append(
                Case(
                    f"{method} {route} id={bad!r}",
                    method,
                    route.replace("{id}", _quote(bad)),
                    body,
                    statuses=(404,),
                    admin=True,
                )
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


# ---- the endpoints added after the table: targets, pools, search, service levels, previews, shards --------

SEEDED_TARGET = "fuzz-hook"  # an HTTP target the fixture creates, for the update cases
MISSING_TARGET = "nope"  # a well-formed target name that is never created
SERVER0 = "{server0}"  # the shard map's first server (memory-0, sqlite-0, 127.0.0.1:3306): the fixture fills it in
BAD_TARGET_NAMES: list[Any] = [
    "",
    "-x",
    ".x",
    "a b",
    "a/b",
    "x" * 65,
    "a\u0000b",
    "\u00e9t\u00e9",
    1,
    True,
    [],
    {},
    *DEEP,
]
VALID_TARGETS: dict[str, dict[str, Any]] = {
    "http": {"url": "http://127.0.0.1:9/hook"},
    "grpc": {"address": "127.0.0.1:50051"},
    "amqp": {"url": "amqp://127.0.0.1:5672/", "exchange": ""},
    "nats": {"servers": ["nats://127.0.0.1:4222"], "subject": "fuzz.fires"},
    "redis_stream": {"url": "redis://127.0.0.1:6379/0", "stream": "fuzz"},
}
TARGET_ALLOWED_ADDRESSES = ["127.0.0.1:50051", "127.0.0.1:5672", "127.0.0.1:4222", "127.0.0.1:6379"]
BOOLEAN_BAD: list[Any] = ["true", 1, 0, None, [], {}, *DEEP]
NOT_ALLOWED_HOST = "10.0.0.9"  # private and not in the node's targets.allowed_addresses

# (path in the create body, bad values, the protocol whose settings it belongs to or None)
TARGET_FIELDS: list[tuple[str, list[Any], str | None]] = [
    ("name", BAD_TARGET_NAMES, None),
    ("protocol", [*ENUM_BAD, "HTTP", "smtp"], None),
    ("settings", [None, "http://127.0.0.1:9/", 1, [], {}, *DEEP], None),
    ("retry", ["x", 1, [], {"nope": 1}, *DEEP], None),
    ("retry.max_attempts", [*INTEGER_BAD, 0, 51], None),
    ("retry.max_age_s", [*INTEGER_BAD, 0, 30 * 86_400 + 1], None),
    ("retry.backoff_base_ms", [*INTEGER_BAD, 0, 3_600_001], None),
    ("retry.backoff_max_ms", [*INTEGER_BAD, 0, 86_400_001], None),
    ("credentials", [[], "k=v", {"k": 1}, {"k": "a\u0000b"}, {"k": "a\rb"}, {"k": "v" * 4097}, *DEEP], None),
    ("settings.url", [*URL_BAD, f"http://{NOT_ALLOWED_HOST}/", "http://169.254.169.254/"], "http"),
    ("settings.urls", [[], "http://127.0.0.1:9/", [1], ["ftp://x/"], ["http://127.0.0.1:9/a"] * 11, *DEEP], "http"),
    ("settings.method", [*ENUM_BAD, "GET"], "http"),
    ("settings.headers", HEADERS_BAD, "http"),
    ("settings.timeout_ms", [*INTEGER_BAD, 0, 60_001], "http"),
    ("settings.nope", [1], "http"),
    (
        "settings.address",
        [
            "",
            "nohost",
            "127.0.0.1:99999",
            "127.0.0.1:0",
            "[::1",
            "a b:1",
            "x" * 301,
            f"{NOT_ALLOWED_HOST}:50051",
            1,
            [],
        ],
        "grpc",
    ),
    ("settings.tls", BOOLEAN_BAD, "grpc"),
    ("settings.deadline_ms", [*INTEGER_BAD, 0, 60_001], "grpc"),
    (
        "settings.url",
        [
            "",
            "http://127.0.0.1:5672/",
            "amqp://u:p@127.0.0.1:5672/",
            "amqp://127.0.0.1:99999/",
            f"amqp://{NOT_ALLOWED_HOST}:5672/",
            "amqp://127.0.0.1:5673/",
            "amqps://127.0.0.1:5672/?no_verify_ssl=1",  # client options are the node's, never a tenant's
            "amqp://127.0.0.1:5672/?keyfile=/etc/shadow",
            "amqp://127.0.0.1:5672/#x",
            "x" * 2049,
            1,
            [],
            *DEEP,
        ],
        "amqp",
    ),
    ("settings.exchange", [1, True, [], "x" * 256, "a\u0000b", *DEEP], "amqp"),
    ("settings.routing_key", [1, [], "x" * 256, "a\u0000b"], "amqp"),
    ("settings.persistent", BOOLEAN_BAD, "amqp"),
    ("settings.mandatory", BOOLEAN_BAD, "amqp"),
    (
        "settings.servers",
        [
            [],
            "nats://127.0.0.1:4222",
            [1],
            [""],
            ["http://127.0.0.1:4222"],
            ["nats://u:p@127.0.0.1:4222"],
            [f"nats://{NOT_ALLOWED_HOST}:4222"],
            ["nats://127.0.0.1:4222"] * 11,
            ["nats://127.0.0.1:4222/?x=1"],
            *DEEP,
        ],
        "nats",
    ),
    ("settings.subject", ["", "a b", "a.>.b", "a.*", "a..b", "x" * 256, "a\u0000b", 1, [], *DEEP], "nats"),
    ("settings.stream", [1, "", "a b", "x" * 256, []], "nats"),
    (
        "settings.url",
        [
            "",
            "http://127.0.0.1:6379/",
            "redis://u:p@127.0.0.1:6379/0",
            "redis://127.0.0.1:99999/0",
            f"redis://{NOT_ALLOWED_HOST}:6379/0",
            "redis://127.0.0.1:6379/x",  # redis-py reads a path that is no number as database 0
            "redis://127.0.0.1:6379/1/2",  # ... and this one as database 12
            "rediss://127.0.0.1:6379/0?ssl_cert_reqs=none",
            "redis://127.0.0.1:6379/0?db=5",
            1,
            [],
            *DEEP,
        ],
        "redis_stream",
    ),
    ("settings.stream", ["", 1, [], "x" * 513, "a\u0000b"], "redis_stream"),
    ("settings.maxlen", [*INTEGER_BAD, 0, 1_000_000_001], "redis_stream"),
]


def valid_target(protocol: str = "http", name: str = "fuzz-target") -> dict[str, Any]:
    return {"name": name, "protocol": protocol, "settings": copy.deepcopy(VALID_TARGETS[protocol])}


def _target_with(path: str, value: Any, protocol: str | None, name: str) -> dict[str, Any]:
    made = valid_target(protocol or "http", name)
    parts = path.split(".")
    if parts[0] == "retry" and len(parts) > 1:
        made["retry"] = {}
    target: dict[str, Any] = made
    for part in parts[:-1]:
        target = target[part]
    if parts == ["settings", "urls"]:
        target.pop("url", None)
    target[parts[-1]] = value
    return made


def _expected(value: Any, field: str) -> str:
    return "body" if isinstance(value, Raw) and value.text in NOT_JSON else field


def target_cases() -> list[Case]:
    cases: list[Case] = []
    for path, values, protocol in TARGET_FIELDS:
        for value in values:
            # each create its own name: one wrongly accepted must not turn the next ones into 409s
            body = _target_with(path, value, protocol, f"fuzz-target-{len(cases)}")
            label = f"{protocol or 'http'} {path}={_label(value)}"
            top = path.split(".")[0]
            cases.append(Case(f"target create {label}", "POST", "/v1/targets", body, field=_expected(value, top)))
            # an update's null means "not given" (kept; null credentials clear them), as in a task update
            if top in ("settings", "retry", "credentials") and protocol in (None, "http") and value is not None:
                update = {top: body[top]}
                cases.append(
                    Case(
                        f"target update {label}",
                        "PATCH",
                        f"/v1/targets/{SEEDED_TARGET}",
                        update,
                        field=_expected(value, top),
                        reaches_storage=read_as_json(update),  # read first, as a task update
                    )
                )
    seeded = f"/v1/targets/{SEEDED_TARGET}"
    cases += [
        Case("target create unknown field", "POST", "/v1/targets", {**valid_target(), "color": "red"}, field="color"),
        Case("target create no name", "POST", "/v1/targets", {"protocol": "http", "settings": {}}, field="name"),
        Case(
            "target create url and urls",
            "POST",
            "/v1/targets",
            {**valid_target(), "settings": {"url": "http://127.0.0.1:9/", "urls": ["http://127.0.0.1:9/"]}},
            field="settings",
        ),
        Case(
            "target create settings of another protocol",
            "POST",
            "/v1/targets",
            {"name": "fuzz-target", "protocol": "grpc", "settings": VALID_TARGETS["amqp"]},
            field="settings",
        ),
        Case(
            "target create duplicate name",
            "POST",
            "/v1/targets",
            valid_target(name=SEEDED_TARGET),
            statuses=(409,),
            reaches_storage=True,  # the store's unique name answers
        ),
        *(
            Case(name, "PATCH", seeded, body, field=field, statuses=statuses, reaches_storage=read_as_json(body))
            for name, body, field, statuses in [
                ("target update protocol alone", {"protocol": "grpc"}, "settings", ()),
                ("target update unknown field", {"color": "red"}, "color", ()),
                ("target update name", {"name": "other"}, "name", ()),
                ("target update stale version", {"version": 99, "retry": {}}, None, (409,)),
                *(
                    (f"target update version={_label(v)}", {"version": v}, _expected(v, "version"), ())
                    for v in [v for v in INTEGER_BAD if v != -1]
                ),
            ]
        ),
    ]
    # names refused by their form, and a well-formed one that is not there (looked up: 404)
    for bad in ["x" * 65, "-x", "a b", "a\u0000b", "\u00e9", MISSING_TARGET]:
        path = f"/v1/targets/{_quote(bad)}"
        looked_up = bad == MISSING_TARGET
        cases += [
            Case(f"target get {bad!r}", "GET", path, statuses=(404,), reaches_storage=looked_up),
            Case(f"target update {bad!r}", "PATCH", path, {"retry": {}}, statuses=(404,), reaches_storage=looked_up),
            Case(f"target delete {bad!r}", "DELETE", path, statuses=(404,), reaches_storage=looked_up),
        ]
    for query in ("limit=0", "limit=1001", "limit=abc", "limit=99999999999999999999", "cursor=" + "a" * 201):
        cases.append(Case(f"targets list {query[:20]}", "GET", f"/v1/targets?{query}"))
    for cursor in [*BAD_CURSORS, _position_cursor("apps", "fuzz"), _position_cursor("targets", "a b")]:
        cases.append(
            Case(f"targets cursor {cursor[:30]!r}", "GET", f"/v1/targets?cursor={_quote(cursor)}", field="cursor")
        )
    return cases


def _position_cursor(kind: str, *position: Any) -> str:
    """A well-formed cursor of another listing, or with a position the listing cannot hold."""
    import json

    return base64.urlsafe_b64encode(json.dumps([kind, *position]).encode()).decode().rstrip("=")


BAD_POOL_NAMES = ["P", "-x", "a b", "x" * 64, "a/b", "a\u0000b", "\u00e9"]
EXECUTOR_FIELDS: list[tuple[str, list[Any]]] = [
    (
        "address",
        [
            *URL_BAD,
            f"http://{NOT_ALLOWED_HOST}/",
            "http://169.254.169.254/",
            "http://127.0.0.1:9/?q=1",
            "http://127.0.0.1:9/a#b",
        ],
    ),
    ("id", ["", "-x", "a b", "a/b", "x" * 129, "a\u0000b", 1, True, [], {}, *DEEP]),
    ("zone", ["a b", "a/b", "x" * 65, "a\u0000b", 1, [], {}, *DEEP]),
    ("weight", [*INTEGER_BAD, 0, 1001]),
    ("capacity", [*INTEGER_BAD, 0, 100_001]),
    ("ttl_s", [*INTEGER_BAD, 0, 1, 301]),
]


def pool_cases() -> list[Case]:
    valid = {"address": "http://127.0.0.1:9/"}
    cases: list[Case] = []
    for name, values in EXECUTOR_FIELDS:
        for value in values:
            body = {**valid, name: value}
            cases.append(
                Case(
                    f"executor register {name}={_label(value)}",
                    "POST",
                    "/v1/pools/fuzz/executors",
                    body,
                    field=_expected(value, name),
                )
            )
    cases += [
        Case("executor register no address", "POST", "/v1/pools/fuzz/executors", {"zone": "a"}, field="address"),
        Case("executor register unknown field", "POST", "/v1/pools/fuzz/executors", {**valid, "x": 1}, field="x"),
        Case("executor register not an object", "POST", "/v1/pools/fuzz/executors", [valid], field="body"),
    ]
    for bad in BAD_POOL_NAMES:
        pool = _quote(bad)
        cases += [
            Case(f"executor register pool={bad!r}", "POST", f"/v1/pools/{pool}/executors", valid, field="pool"),
            Case(f"heartbeat pool={bad!r}", "PUT", f"/v1/pools/{pool}/executors/e1/heartbeat", statuses=(404,)),
            Case(f"deregister pool={bad!r}", "DELETE", f"/v1/pools/{pool}/executors/e1", statuses=(404,)),
            Case(f"pool get {bad!r}", "GET", f"/v1/pools/{pool}", statuses=(404,)),
        ]
    for bad in ["nope", "x" * 129, "a b", "a\u0000b"]:
        executor = _quote(bad)
        cases += [
            Case(
                f"heartbeat executor={bad!r}", "PUT", f"/v1/pools/fuzz/executors/{executor}/heartbeat", statuses=(404,)
            ),
            Case(f"deregister executor={bad!r}", "DELETE", f"/v1/pools/fuzz/executors/{executor}", statuses=(404,)),
        ]
    return cases


def search_cases() -> list[Case]:
    cases: list[Case] = []
    flow_queries = {
        "status": ["nope", "DEAD", "", "dead\u0000"],
        "task_id": ["abc", "-1", "9223372036854775808", "99999999999999999999", "1e3", "\u0663", "", "0x10"],
        "from": ["tomorrow", "", "2026-13-01T00:00:00Z", "2026-11-21T17:00:00", "99999999999999999999", "-1", "x" * 41],
        "to": ["tomorrow", "2026-11-21T17:00:00+25:00", "9223372036854775808", "1.5"],
        "limit": ["0", "1001", "abc", "99999999999999999999"],
    }
    for name, values in flow_queries.items():
        for value in values:
            query = f"{name}={_quote(value)}"
            cases.append(Case(f"flows search {query[:40]}", "GET", f"/v1/flows?{query}", field=name))
    flow_cursors = [
        *BAD_CURSORS,
        _position_cursor("tasks", 1),
        _position_cursor("flows", 1),
        _position_cursor("flows", "1", 1),
        _position_cursor("flows", 1, 1 << 63),
        _position_cursor("flows", -1, 1),
        _position_cursor("flows", 1, 1, 1),
    ]
    for cursor in flow_cursors:
        cases.append(
            Case(f"flows search cursor {cursor[:30]!r}", "GET", f"/v1/flows?cursor={_quote(cursor)}", field="cursor")
        )
    task_queries = {
        "key": ["", "x" * 201, "a\u0000b", "a\u001bb"],
        "name_prefix": ["x" * 201, "a\u0000b"],
        "status": ["", "ACTIVE", "deleted"],
        "kind": ["", "CRON", "once"],
    }
    for name, values in task_queries.items():
        for value in values:
            query = f"{name}={_quote(value)}"
            cases.append(Case(f"tasks search {query[:40]}", "GET", f"/v1/tasks?{query}", field=name))
    task_cursors = [
        _position_cursor("flows", 1, 1),
        _position_cursor("tasks", "1"),
        _position_cursor("tasks", 1 << 63),
        _position_cursor("tasks-by-name", 1),
        _position_cursor("tasks-by-name", "a", 1 << 63),
        _position_cursor("apps", "x"),
    ]
    for cursor in task_cursors:
        cases.append(
            Case(f"tasks search cursor {cursor[:30]!r}", "GET", f"/v1/tasks?cursor={_quote(cursor)}", field="cursor")
        )
    cases.append(
        Case(
            "tasks by name with a newest-first cursor",
            "GET",
            f"/v1/tasks?name_prefix=a&cursor={_position_cursor('tasks', 1)}",
            field="cursor",
        )
    )
    return cases


def slo_cases() -> list[Case]:
    cases = [
        Case(f"slo window={w!r}", "GET", f"/v1/slo?window={_quote(w)}", field="window")
        for w in ["", "1m", "5M", "5 m", "300s", "30d", "7d\u0000", "x" * 100]
    ]
    cases += [
        Case(f"slo admin window={w!r}", "GET", f"/v1/slo?window={_quote(w)}", field="window", admin=True)
        for w in ["", "1m", "7"]
    ]
    cases += [
        Case("slo admin without window", "GET", "/v1/slo", field="window", admin=True),
        Case("slo admin app_id too long", "GET", f"/v1/slo?window=5m&app_id={'x' * 65}", field="app_id", admin=True),
        Case("slo another app's id", "GET", "/v1/slo?window=5m&app_id=someone-else", statuses=(404,)),
    ]
    return cases


PREVIEW_SCHEDULE_FIELDS = [(path, values, kind) for path, values, kind in TASK_FIELDS if path.startswith("schedule")]


def preview_cases() -> list[Case]:
    valid = {"schedule": dict(VALID_SCHEDULES["cron"]), "count": 3}
    cases: list[Case] = []
    for path, values, kind in PREVIEW_SCHEDULE_FIELDS:
        for value in values:
            body = with_field({"schedule": {}}, path, value, kind)
            cases.append(
                Case(
                    f"preview {path}={_label(value)}",
                    "POST",
                    "/v1/schedules:preview",
                    body,
                    field=_expected(value, "schedule"),
                )
            )
    for value in [*INTEGER_BAD, 0, 101]:
        body = {**valid, "count": value}
        cases.append(
            Case(
                f"preview count={_label(value)}", "POST", "/v1/schedules:preview", body, field=_expected(value, "count")
            )
        )
    epoch_ms_is_fine = [v for v in INSTANT_BAD if type(v) is not int]  # from takes epoch ms too
    for value in [*epoch_ms_is_fine, -1, 1 << 63, 1.5, Raw("1e400"), "99999999999999999999", "2999-01-01T00:00:00Z"]:
        body = {**valid, "from": value}
        cases.append(
            Case(f"preview from={_label(value)}", "POST", "/v1/schedules:preview", body, field=_expected(value, "from"))
        )
    cases += [
        Case("preview unknown field", "POST", "/v1/schedules:preview", {**valid, "x": 1}, field="x"),
        Case("preview no schedule", "POST", "/v1/schedules:preview", {"count": 3}, field="schedule"),
        Case("preview not an object", "POST", "/v1/schedules:preview", [valid], field="body"),
        Case(
            "preview text/plain",
            "POST",
            "/v1/schedules:preview",
            content=render(valid).encode(),
            headers={"content-type": "text/plain"},
            statuses=(415,),
        ),
    ]
    return cases


def shard_cases() -> list[Case]:
    plan = "/v1/shards:plan"
    servers_bad: list[Any] = [
        None,
        [],
        "a:1",
        {},
        [1],
        [True],
        [[]],
        [""],
        [SERVER0, ""],
        [SERVER0, "x" * 300],
        [SERVER0, SERVER0],
        [SERVER0, "a:1", "a:1"],
        *DEEP,
    ]
    against_the_map: list[Any] = [["not-the-first:1"]]  # well formed: the stored shard map refuses it
    cases = [
        Case(
            f"shards plan servers={_label(v)}",
            "POST",
            plan,
            {"servers": v},
            field=_expected(v, "servers"),
            admin=True,
            reaches_storage=v in against_the_map,
        )
        for v in [*servers_bad, *against_the_map]
    ]
    cases += [
        Case("shards plan unknown field", "POST", plan, {"servers": [SERVER0], "x": 1}, field="x", admin=True),
        Case("shards plan no servers", "POST", plan, {}, field="servers", admin=True),
        Case("shards plan not an object", "POST", plan, [SERVER0], field="body", admin=True),
        Case("shards plan with an app key", "POST", plan, {"servers": [SERVER0]}, statuses=(401, 403)),
        Case("shards with an app key", "GET", "/v1/shards", statuses=(401, 403)),
        Case("shards wrong method", "DELETE", "/v1/shards", statuses=(405,), admin=True),
        Case("shard moves with an app key", "GET", "/v1/shards/moves", statuses=(401, 403)),
        Case("shard moves wrong method", "POST", "/v1/shards/moves", statuses=(405,), admin=True),
    ]
    moves_bad = [("outcome", v) for v in ("", "done", "IN_PROGRESS", "x" * 300)] + [
        ("database", v) for v in ("", "-1", "one", "1.5", "99999", "1e3", "9" * 30)
    ]
    cases += [
        Case(f"shard moves {name}={_label(v)}", "GET", f"/v1/shards/moves?{name}={v}", field=name, admin=True)
        for name, v in moves_bad
    ]
    return cases


def later_endpoint_cases() -> list[Case]:
    return [*target_cases(), *pool_cases(), *search_cases(), *slo_cases(), *preview_cases(), *shard_cases()]


def all_cases() -> list[Case]:
    return [*field_cases(), *app_cases(), *id_cases(), *body_cases(), *later_endpoint_cases()]
