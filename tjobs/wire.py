"""The request shapes of the ``/v1`` task API, written once: the source of truth for the request.

Three readers, one declaration:

- validation (:func:`tjobs.schedules.parsing.parse_schedule_request`,
  :func:`tjobs.service.validation.parse_callback_request`, :class:`tjobs.service.tasks.TaskService`,
  :mod:`tjobs.service.apps`) takes each object's field names, the integer bounds, the choices and the
  target count from these models; it keeps its own code only for what JSON Schema cannot say (cron
  syntax, time zones, instants, horizons, the URL model, reserved headers) and for its field-named
  error codes;
- the OpenAPI document (:mod:`tjobs.api.schemas`) publishes these models as they are;
- the SDK (:mod:`tjobs.client.models`) reads a task's callback with :class:`StoredCallback`.

Only pydantic is imported, so the SDK stays importable without the server's dependencies. The typed
values the server keeps (:mod:`tjobs.specs`) share the field names; ``tests/unit/test_specs.py``
holds the two to each other.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

JsonValue = Any
MisfirePolicyName = Literal["fire_now", "fire_soon", "skip", "catch_up"]
DeliveryName = Literal["at_least_once", "at_most_once"]
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
DstGapName = Literal["skip", "shift"]
DstOverlapName = Literal["once", "twice"]

# what validation refuses in names, keys and header values: control characters (C0, DEL, C1), and a name
# or a key of whitespace only
NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
KEY_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"
MAX_HEADER_VALUE_CHARS = 4096
# what a JSON body may hold as an integer at all (signed 64-bit up to unsigned 64-bit): tjobs.api.bodies
# refuses the rest with a 422 naming the field, and an integer field with no narrower bound publishes these
JSON_INTEGER_MIN = -(1 << 63)
JSON_INTEGER_MAX = (1 << 64) - 1
HEADER_VALUE = Annotated[str, Field(max_length=MAX_HEADER_VALUE_CHARS, pattern=r"^[^\x00-\x08\x0a-\x1f\x7f-\x9f]*$")]
MAX_HEADERS = 20  # limits.max_headers by default
HEADER_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # an HTTP header name (RFC 9110 token)
RESERVED_HEADERS = ("host", "content-length", "transfer-encoding", "connection")  # tjobs sets them
RESERVED_HEADER_PREFIXES = ("webhook-", "tjobs-")


def _any_case(text: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in text)  # letters and '-' only


# a custom header's name: a token, and none that tjobs sets itself (in any case)
_RESERVED = "|".join([*(_any_case(n) + "$" for n in RESERVED_HEADERS), *map(_any_case, RESERVED_HEADER_PREFIXES)])
HEADER_NAME_PATTERN = f"^(?!{_RESERVED}){HEADER_TOKEN}$"
# on a headers field: the pattern has a look-ahead, which only the published JSON Schema reads
HEADER_NAMES: dict[str, Any] = {"propertyNames": {"pattern": HEADER_NAME_PATTERN}}
# an ISO-8601 instant with an offset: published as RFC 3339 date-time (what the parser takes is a superset)
INSTANT = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
# 5 fields, or 6 with seconds first, separated by whitespace (which fields are valid is the cron parser's)
CRON_PATTERN = r"^\s*\S+(\s+\S+){4,5}\s*$"
# what the callback URL model can take at all: http(s), a host without user info, no whitespace,
# control characters or backslashes (the host's spelling and where it resolves are judged beyond this)
CALLBACK_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f-\x9f\\@/?#]+([/?#][^\s\x00-\x1f\x7f-\x9f\\]*)?$"
TARGET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
POOL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
# the ids the API hands out, as a path may carry them (anything else is a 404, as an id never stored)
TASK_ID_PATTERN = r"^[0-9]{1,19}$"  # 1..2^63-1 (the range is judged beyond the pattern)
FLOW_ID_PATTERN = r"^[0-9]{1,19}-[0-9]{1,19}$"  # <task id>-<scheduled_at_ms>
APP_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # app_<12 hex digits>, or demo
CALENDAR_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MIN_FIXED_DELAY_MS = 1000  # a fixed_delay schedule's delay_ms: 1 s ..
MAX_FIXED_DELAY_MS = 366 * 86_400_000  # .. 366 days
MAX_JITTER_MS = 3_600_000  # a recurring schedule's jitter_ms: at most an hour (and its period)
MAX_URL_CHARS = 2048  # limits.max_url_chars by default
EXECUTOR_ADDRESS_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f-\x9f\\@/?#]+(/[^\s\x00-\x1f\x7f-\x9f\\?#]*)?$"
CALLBACK_URL = Annotated[str, Field(min_length=1, max_length=MAX_URL_CHARS, pattern=CALLBACK_URL_PATTERN)]


def _published(schema: dict[str, Any], shape: type[BaseModel]) -> None:
    """What a request shape publishes beyond its fields' types: validation reads an optional field's
    absence as its default but refuses null there, so null is dropped from every property not in the
    shape's ``NULLABLE``; and the shape's ``RULES`` (cross-field rules: one of, not both) are added."""
    nullable: frozenset[str] = getattr(shape, "NULLABLE", frozenset())
    for name, prop in schema.get("properties", {}).items():
        if name in nullable:
            continue
        alternatives = prop.get("anyOf")
        if alternatives and {"type": "null"} in alternatives:
            kept = [a for a in prop.pop("anyOf") if a != {"type": "null"}]
            if len(kept) == 1:
                prop.update(kept[0])
            else:
                prop["anyOf"] = kept
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    rules: tuple[dict[str, Any], ...] = getattr(shape, "RULES", ())
    if rules:
        schema["allOf"] = [*schema.get("allOf", []), *rules]


class RequestShape(BaseModel):
    """A request body's shape: unknown fields refused, null only where ``NULLABLE`` says, and the
    cross-field ``RULES`` (JSON Schema) validation applies."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset()
    RULES: ClassVar[tuple[dict[str, Any], ...]] = ()
    model_config = ConfigDict(extra="forbid", json_schema_extra=_published)


_Strict = RequestShape


def _present(*names: str) -> dict[str, Any]:
    return {"required": list(names)}


def _given(**types: str) -> dict[str, Any]:
    """All of ``types``'s fields present and not null (each of its JSON type)."""
    return {"required": list(types), "properties": {name: {"type": kind} for name, kind in types.items()}}


def _set(name: str) -> dict[str, Any]:
    """``name`` present and not null."""
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


def _none_of(*names: str) -> dict[str, Any]:
    return {"not": {"anyOf": [_present(name) for name in names]}}


# ---- schedules ----------------------------------------------------------------------------------


class DelaySchedule(_Strict):
    kind: Literal["delay"]
    delay_ms: int = Field(ge=0)


class AtSchedule(_Strict):
    NULLABLE = frozenset({"at", "at_ms"})  # null is read as absent
    RULES = ({"oneOf": [_given(at="string"), _given(at_ms="integer")]},)  # exactly one of them

    kind: Literal["at"]
    at: INSTANT | None = Field(default=None, description="ISO-8601 instant with an offset")
    at_ms: int | None = Field(default=None, description="UTC epoch milliseconds (instead of at)")


class _Bounds(_Strict):
    NULLABLE = frozenset({"start_at", "start_at_ms", "end_at", "end_at_ms", "max_fires", "jitter_ms", "calendar"})
    RULES = (  # an instant or its _ms spelling, not both
        {
            "not": {
                "anyOf": [
                    _given(start_at="string", start_at_ms="integer"),
                    _given(end_at="string", end_at_ms="integer"),
                ]
            }
        },
    )

    start_at: INSTANT | None = None
    start_at_ms: int | None = None
    end_at: INSTANT | None = None
    end_at_ms: int | None = None
    max_fires: int | None = Field(default=None, ge=1)
    jitter_ms: int | None = Field(
        default=None,
        ge=0,
        le=MAX_JITTER_MS,
        description="fire each occurrence a reproducible 0..jitter_ms later (at most the schedule's period)",
    )
    calendar: Annotated[str, Field(pattern=CALENDAR_NAME_PATTERN)] | None = Field(
        default=None, description="the name of one of the app's calendars (/v1/calendars): its instants are skipped"
    )


class CronSchedule(_Bounds):
    NULLABLE = _Bounds.NULLABLE | {"timezone", "dst_gap", "dst_overlap"}  # null: the default

    kind: Literal["cron"]
    expr: str = Field(pattern=CRON_PATTERN, description="5 fields, or 6 with seconds first")
    timezone: str = Field(default="UTC", description="IANA time zone")
    dst_gap: DstGapName = "skip"
    dst_overlap: DstOverlapName = "once"


class IntervalSchedule(_Bounds):
    kind: Literal["interval"]
    every_ms: int = Field(ge=1)


class FixedDelaySchedule(_Strict):
    NULLABLE = frozenset({"start_at", "start_at_ms", "max_fires"})
    RULES = ({"not": _given(start_at="string", start_at_ms="integer")},)  # an instant or its _ms spelling

    kind: Literal["fixed_delay"]
    delay_ms: int = Field(
        ge=MIN_FIXED_DELAY_MS,
        le=MAX_FIXED_DELAY_MS,
        description="the next run starts this long after the previous run ended (its final outcome recorded)",
    )
    start_at: INSTANT | None = Field(default=None, description="the first run (default: delay_ms after registration)")
    start_at_ms: int | None = None
    max_fires: int | None = Field(default=None, ge=1)


SCHEDULE_SHAPES: tuple[type[BaseModel], ...] = (
    DelaySchedule,
    AtSchedule,
    CronSchedule,
    IntervalSchedule,
    FixedDelaySchedule,
)
Schedule = Annotated[
    DelaySchedule | AtSchedule | CronSchedule | IntervalSchedule | FixedDelaySchedule, Field(discriminator="kind")
]


# ---- callbacks ----------------------------------------------------------------------------------


class CallbackBudget(_Strict):
    """The integer options every callback takes, and an app's callback defaults may set."""

    timeout_ms: int | None = Field(default=None, ge=1, le=60_000)
    max_attempts: int | None = Field(default=None, ge=1, le=50)
    max_age_s: int | None = Field(default=None, ge=1, le=30 * 86_400)


class CallbackRequest(CallbackBudget):
    NULLABLE = frozenset({"body"})
    # one destination: url or urls (with method and headers), target or targets (their own method and
    # headers), or pool (with method and headers)
    RULES = (
        {
            "oneOf": [
                {"oneOf": [_present("url"), _present("urls")], **_none_of("target", "targets", "pool")},
                {
                    "oneOf": [_present("target"), _present("targets")],
                    **_none_of("url", "urls", "method", "headers", "pool"),
                },
                {**_present("pool"), **_none_of("url", "urls", "target", "targets")},
            ]
        },
    )

    url: CALLBACK_URL | None = Field(default=None, description="unicast target (http/https), or give urls")
    urls: list[CALLBACK_URL] | None = Field(
        default=None,
        min_length=1,
        max_length=10,
        json_schema_extra={"uniqueItems": True},
        description="multicast targets (1..10, distinct)",
    )
    target: Annotated[str, Field(pattern=TARGET_NAME_PATTERN)] | None = Field(
        default=None, description="the name of one of the app's targets (/v1/targets), instead of url/urls"
    )
    targets: list[Annotated[str, Field(pattern=TARGET_NAME_PATTERN)]] | None = Field(
        default=None,
        min_length=1,
        max_length=10,
        json_schema_extra={"uniqueItems": True},
        description="several named targets (multicast, 1..10, distinct)",
    )
    pool: PoolRouteRequest | Annotated[str, Field(pattern=POOL_NAME_PATTERN)] | None = Field(
        default=None, description="an executor pool of the app (/v1/pools), instead of url(s)/target(s)"
    )
    method: Method = "POST"
    headers: dict[str, HEADER_VALUE] = Field(
        default_factory=dict,
        max_length=MAX_HEADERS,
        json_schema_extra=HEADER_NAMES,
        description=f"at most {MAX_HEADERS} custom headers",
    )
    body: str | None = Field(default=None, description="raw request body (else the task payload as JSON)")
    run_timeout_ms: int | None = Field(
        default=None,
        ge=1000,
        le=30 * 86_400_000,
        description=(
            "a run the target accepts (202 with tjobs-run: accepted) with no final report within it ends "
            "timed_out, retried as a failed attempt; unset: the node's runs.timeout_ms"
        ),
    )
    run_on_publish: bool = Field(
        default=False,
        description=(
            "with one named broker target (amqp, nats, redis_stream): the broker's acknowledgement of a "
            "fire starts a run, which the consumer ends with POST /v1/flows/{id}/report"
        ),
    )


class CallbackDefaults(CallbackBudget):
    """An app's defaults under each of its tasks' callbacks (the task's own fields win)."""

    method: Method | None = None
    headers: dict[str, HEADER_VALUE] | None = Field(
        default=None, max_length=MAX_HEADERS, json_schema_extra=HEADER_NAMES
    )


class StoredCallback(BaseModel):
    """A task's callback as the API answers it (its canonical stored form: inline URLs always as urls,
    named targets always as targets; a callback has one or the other)."""

    urls: list[str] = Field(default_factory=list)
    method: Method = "POST"
    headers: dict[str, str] | None = None
    body: str | None = None
    timeout_ms: int | None = None
    max_attempts: int | None = None
    max_age_s: int | None = None
    targets: list[str] | None = None
    pool: dict[str, Any] | None = None
    run_timeout_ms: int | None = None
    run_on_publish: bool = False


# ---- tasks --------------------------------------------------------------------------------------


class TaskChildrenRequest(_Strict):
    """The tasks of the app a flow of this task triggers when it ends (README "Child tasks"), each with
    the flow's result as its payload."""

    NULLABLE = frozenset({"on_success", "on_failure"})

    on_success: list[str] | None = Field(default=None, description="task ids triggered when a flow ends delivered")
    on_failure: list[str] | None = Field(default=None, description="task ids triggered when a flow ends dead")


class TaskCreate(_Strict):
    NULLABLE = frozenset({"key", "payload", "misfire_policy", "delivery", "children"})  # null: none, or the default

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    key: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=KEY_PATTERN, description="idempotency key, unique per app"
    )
    schedule: Schedule
    callback: CallbackRequest
    payload: JsonValue = None
    misfire_policy: MisfirePolicyName | None = None
    delivery: DeliveryName | None = None
    children: TaskChildrenRequest | None = None


class TaskUpdate(_Strict):
    NULLABLE = frozenset({"children"})  # null: none

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN)
    schedule: Schedule | None = None
    callback: CallbackRequest | None = None
    payload: JsonValue = None
    misfire_policy: MisfirePolicyName | None = None
    delivery: DeliveryName | None = None
    children: TaskChildrenRequest | None = None
    version: int | None = Field(
        default=None,
        ge=JSON_INTEGER_MIN,
        le=JSON_INTEGER_MAX,
        description=(
            "the task's version as last read: 409 version_conflict if another edit (update, pause, resume) "
            "landed since; fires never move it. Without it the last edit wins"
        ),
    )


class TaskTrigger(_Strict):
    """The optional body of ``POST /v1/tasks/{id}/trigger``: no body, or ``{}``, sends the task's payload."""

    NULLABLE = frozenset({"payload"})  # null is a payload like any other

    payload: JsonValue = Field(
        default=None,
        description=(
            "this manual flow's payload instead of the task's (same limits as a create's); sent on every "
            "attempt of the flow, the stored task is unchanged"
        ),
    )


# ---- targets ------------------------------------------------------------------------------------

ProtocolName = Literal["http", "grpc", "amqp", "nats", "redis_stream"]
TargetMethod = Literal["POST", "PUT", "PATCH", "DELETE"]  # a target always sends the signed body
MAX_TARGET_URLS = 10


NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"  # a broker string setting: no control characters
NO_CONTROL_NON_EMPTY = r"^[^\x00-\x1f\x7f-\x9f]+$"


class HttpTargetSettings(_Strict):
    NULLABLE = frozenset({"timeout_ms"})
    RULES = ({"oneOf": [_present("url"), _present("urls")]},)

    url: CALLBACK_URL | None = Field(default=None, description="one URL (http/https), or give urls")
    urls: list[CALLBACK_URL] | None = Field(
        default=None, min_length=1, max_length=MAX_TARGET_URLS, json_schema_extra={"uniqueItems": True}
    )
    method: TargetMethod = "POST"
    headers: dict[str, HEADER_VALUE] = Field(
        default_factory=dict, max_length=MAX_HEADERS, json_schema_extra=HEADER_NAMES
    )
    timeout_ms: int | None = Field(default=None, ge=1, le=60_000)


class GrpcTargetSettings(_Strict):
    NULLABLE = frozenset({"deadline_ms"})

    address: str = Field(max_length=300, pattern=NO_CONTROL_NON_EMPTY, description="host:port of a Receiver service")
    tls: bool = False
    deadline_ms: int | None = Field(default=None, ge=1, le=60_000)


class AmqpTargetSettings(_Strict):
    url: str = Field(
        max_length=2048, pattern=NO_CONTROL_NON_EMPTY, description="amqp://host:port/vhost or amqps://…, no user info"
    )
    exchange: str = Field(max_length=255, pattern=NO_CONTROL, description='"" is the default exchange')
    routing_key: str = Field(default="", max_length=255, pattern=NO_CONTROL)
    persistent: bool = True
    mandatory: bool = True


class NatsTargetSettings(_Strict):
    NULLABLE = frozenset({"stream"})

    servers: list[Annotated[str, Field(min_length=1, max_length=MAX_URL_CHARS)]] = Field(
        min_length=1, max_length=10, description="nats://host:port or tls://host:port"
    )
    subject: str = Field(max_length=255, pattern=NO_CONTROL_NON_EMPTY)
    stream: str | None = Field(default=None, max_length=255, description="the ack must come from this stream")


class RedisStreamTargetSettings(_Strict):
    NULLABLE = frozenset({"maxlen"})

    url: str = Field(
        max_length=2048, pattern=NO_CONTROL_NON_EMPTY, description="redis://host:port/db or rediss://…, no user info"
    )
    stream: str = Field(max_length=512, pattern=NO_CONTROL_NON_EMPTY, description="the stream key")
    maxlen: int | None = Field(default=None, ge=1, le=1_000_000_000, description="XADD MAXLEN ~ n")


TARGET_SETTINGS_SHAPES: dict[str, type[BaseModel]] = {
    "http": HttpTargetSettings,
    "grpc": GrpcTargetSettings,
    "amqp": AmqpTargetSettings,
    "nats": NatsTargetSettings,
    "redis_stream": RedisStreamTargetSettings,
}
TargetSettingsShape = (
    HttpTargetSettings | GrpcTargetSettings | AmqpTargetSettings | NatsTargetSettings | RedisStreamTargetSettings
)


class TargetRetry(_Strict):
    """Overrides of the node's delivery budget for the tasks naming the target (a task's own wins)."""

    NULLABLE = frozenset({"max_attempts", "max_age_s", "backoff_base_ms", "backoff_max_ms"})  # null: the node's

    max_attempts: int | None = Field(default=None, ge=1, le=50)
    max_age_s: int | None = Field(default=None, ge=1, le=30 * 86_400)
    backoff_base_ms: int | None = Field(default=None, ge=1, le=3_600_000)
    backoff_max_ms: int | None = Field(default=None, ge=1, le=86_400_000)


def _settings_of(protocol: str) -> dict[str, Any]:
    """``protocol``, and settings of its shape: its fields only, its required ones present (each shape
    has a field the others lack, so the settings' own anyOf then holds them to this shape's types)."""
    fields = TARGET_SETTINGS_SHAPES[protocol].model_fields
    shape = {"propertyNames": {"enum": list(fields)}, "required": [n for n, f in fields.items() if f.is_required()]}
    return {"required": ["protocol"], "properties": {"protocol": {"const": protocol}, "settings": shape}}


class TargetCreate(_Strict):
    NULLABLE = frozenset({"retry", "credentials"})  # null: none
    RULES = ({"oneOf": [_settings_of(protocol) for protocol in TARGET_SETTINGS_SHAPES]},)  # the protocol's settings

    name: str = Field(pattern=TARGET_NAME_PATTERN, description="unique per app; tasks name it")
    protocol: ProtocolName
    settings: TargetSettingsShape = Field(description="the shape of the protocol's settings")
    retry: TargetRetry | None = None
    credentials: dict[str, HEADER_VALUE] | None = Field(
        default=None, max_length=MAX_HEADERS, description="write-only: stored and used, never answered"
    )


class TargetUpdate(_Strict):
    NULLABLE = frozenset(
        {"protocol", "settings", "retry", "credentials", "version"}
    )  # null: unchanged (credentials: cleared)
    RULES = (  # with a protocol, that protocol's settings
        {
            "anyOf": [
                {"not": _set("protocol")},
                {"not": _set("settings")},
                *(_settings_of(p) for p in TARGET_SETTINGS_SHAPES),
            ]
        },
    )

    protocol: ProtocolName | None = Field(default=None, description="changes only together with settings")
    settings: TargetSettingsShape | None = Field(default=None, description="replaces the settings as a whole")
    retry: TargetRetry | None = Field(default=None, description="replaces the retry policy as a whole")
    credentials: dict[str, HEADER_VALUE | None] | None = Field(
        default=None,
        max_length=MAX_HEADERS,
        description="merged into the stored credentials key by key (a null value removes that key; {} clears "
        "them all; with a new protocol they replace them); absent: kept. Never shown back",
    )
    version: int | None = Field(
        default=None,
        ge=JSON_INTEGER_MIN,
        le=JSON_INTEGER_MAX,
        description="the target's version as last read: 409 version_conflict if it moved since",
    )


class StoredTarget(BaseModel):
    """A target as the API answers it: credentials by key only, every value ``***``."""

    name: str
    protocol: ProtocolName
    version: int
    settings: dict[str, Any]
    retry: dict[str, int] = Field(default_factory=dict)
    credentials: dict[str, str] = Field(default_factory=dict)
    created_at: str | None = None
    updated_at: str | None = None


class StoredTargetPage(BaseModel):
    items: list[StoredTarget]
    next_cursor: str | None = None


# ---- executor pools -----------------------------------------------------------------------------

EXECUTOR_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
ZONE_PATTERN = r"^[A-Za-z0-9_.:-]{0,64}$"
EXECUTOR_MIN_TTL_S = 2  # etcd's own floor for a lease
EXECUTOR_MAX_TTL_S = 300
EXECUTOR_DEFAULT_TTL_S = 10
EXECUTOR_MAX_WEIGHT = 1000
EXECUTOR_MAX_CAPACITY = 100_000


PoolModeName = Literal["one", "one_per_zone", "all", "sharded"]
PoolStrategyName = Literal["round_robin", "consistent_hash", "least_in_flight"]
MAX_SHARD_TOTAL = 1024


class PoolRouteRequest(_Strict):
    """``callback.pool``: which executors of the app's pool get each fire (a bare string names the pool)."""

    NULLABLE = frozenset({"mode", "strategy", "hash_on", "overlap", "shard_total", "shard_params"})  # null: default
    RULES = (
        {
            "anyOf": [  # sharded needs shard_total and takes no strategy; the other modes take no shard_*
                {
                    "required": ["mode", "shard_total"],
                    "properties": {"mode": {"const": "sharded"}, "shard_total": {"type": "integer"}},
                    **_none_of("strategy", "hash_on"),
                },
                {
                    "properties": {"mode": {"enum": ["one", "one_per_zone", "all", None]}},
                    "not": {"anyOf": [_set("shard_total"), _set("shard_params")]},
                },
            ]
        },
        # mode all takes no strategy
        {
            "anyOf": [
                {"not": {"required": ["mode"], "properties": {"mode": {"const": "all"}}}},
                _none_of("strategy", "hash_on"),
            ]
        },
        # hash_on only with strategy consistent_hash
        {
            "anyOf": [
                _none_of("hash_on"),
                {"required": ["strategy"], "properties": {"strategy": {"const": "consistent_hash"}}},
            ]
        },
    )

    name: str = Field(pattern=POOL_NAME_PATTERN)
    mode: PoolModeName = "one"
    strategy: PoolStrategyName | None = Field(default=None, description="one and one_per_zone: default round_robin")
    hash_on: Literal["task_id", "key"] | None = Field(default=None, description="consistent_hash: default task_id")
    path: str | None = Field(
        default=None,
        max_length=512,
        pattern=r"^(/[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*)?$",
        description="appended to every executor's address",
    )
    shard_total: int | None = Field(default=None, ge=1, le=MAX_SHARD_TOTAL, description="sharded: the item count")
    shard_params: list[Annotated[str, Field(max_length=1024, pattern=r"^[\x20-\x7e]*$")]] | None = Field(
        default=None, description="sharded: one parameter per item (printable ASCII, travels as a header)"
    )
    overlap: Literal["allow", "skip_if_running", "queue_one"] = Field(
        default="allow", description="a fire while the task's previous flow still runs: go, skip, or wait (one)"
    )


class ExecutorRegistration(_Strict):
    """``POST /v1/pools/{pool}/executors``: an instance of the app's service joins the pool (again)."""

    NULLABLE = frozenset({"id", "capacity"})  # null: derived from the address, none

    address: str = Field(
        min_length=1,
        max_length=MAX_URL_CHARS,
        pattern=EXECUTOR_ADDRESS_PATTERN,
        description="the executor's base URL (http/https, no query or fragment), judged like a callback URL",
    )
    id: str | None = Field(
        default=None, pattern=EXECUTOR_ID_PATTERN, description="stable id; default: derived from the address"
    )
    zone: str = Field(default="", pattern=ZONE_PATTERN, description="for one_per_zone routing")
    weight: int = Field(default=1, ge=1, le=EXECUTOR_MAX_WEIGHT, description="share in round robin and hashing")
    capacity: int | None = Field(
        default=None, ge=1, le=EXECUTOR_MAX_CAPACITY, description="callbacks in flight per node it prefers (soft)"
    )
    ttl_s: int = Field(
        default=EXECUTOR_DEFAULT_TTL_S,
        ge=EXECUTOR_MIN_TTL_S,
        le=EXECUTOR_MAX_TTL_S,
        description="lease: out of the pool once this long without a heartbeat",
    )


class StoredExecutor(BaseModel):
    id: str
    address: str
    zone: str
    weight: int
    capacity: int | None = None
    ttl_s: int
    registered_at: str | None = None


CallbackRequest.model_rebuild()  # its ``pool`` shape is declared with the pools, below it
