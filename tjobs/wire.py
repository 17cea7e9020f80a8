"""The request shapes of the ``/v1`` task API, written once: the source of truth for the request.

Three readers, one declaration:

- validation (:func:`tjobs.schedules.spec.parse_schedule_request`,
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

from typing import Annotated, Any, Literal

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
HEADER_VALUE = Annotated[str, Field(max_length=MAX_HEADER_VALUE_CHARS, pattern=r"^[^\x00-\x08\x0a-\x1f\x7f-\x9f]*$")]
MAX_HEADERS = 20  # limits.max_headers by default


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- schedules ----------------------------------------------------------------------------------


class DelaySchedule(_Strict):
    kind: Literal["delay"]
    delay_ms: int = Field(ge=0)


class AtSchedule(_Strict):
    kind: Literal["at"]
    at: str | None = Field(default=None, description="ISO-8601 instant with an offset")
    at_ms: int | None = Field(default=None, description="UTC epoch milliseconds (instead of at)")


class _Bounds(_Strict):
    start_at: str | None = None
    start_at_ms: int | None = None
    end_at: str | None = None
    end_at_ms: int | None = None
    max_fires: int | None = Field(default=None, ge=1)


class CronSchedule(_Bounds):
    kind: Literal["cron"]
    expr: str = Field(description="5 fields, or 6 with seconds first")
    timezone: str = Field(default="UTC", description="IANA time zone")
    dst_gap: DstGapName = "skip"
    dst_overlap: DstOverlapName = "once"


class IntervalSchedule(_Bounds):
    kind: Literal["interval"]
    every_ms: int = Field(ge=1)


SCHEDULE_SHAPES: tuple[type[BaseModel], ...] = (DelaySchedule, AtSchedule, CronSchedule, IntervalSchedule)
Schedule = Annotated[DelaySchedule | AtSchedule | CronSchedule | IntervalSchedule, Field(discriminator="kind")]


# ---- callbacks ----------------------------------------------------------------------------------


class CallbackBudget(_Strict):
    """The integer options every callback takes, and an app's callback defaults may set."""

    timeout_ms: int | None = Field(default=None, ge=1, le=60_000)
    max_attempts: int | None = Field(default=None, ge=1, le=50)
    max_age_s: int | None = Field(default=None, ge=1, le=30 * 86_400)


class CallbackRequest(CallbackBudget):
    url: str | None = Field(default=None, description="unicast target (http/https), or give urls")
    urls: list[str] | None = Field(default=None, min_length=1, max_length=10, description="multicast targets (1..10)")
    target: str | None = Field(
        default=None, description="the name of one of the app's targets (/v1/targets), instead of url/urls"
    )
    targets: list[str] | None = Field(
        default=None, min_length=1, max_length=10, description="several named targets (multicast, 1..10)"
    )
    pool: PoolRouteRequest | str | None = Field(
        default=None, description="an executor pool of the app (/v1/pools), instead of url(s)/target(s)"
    )
    method: Method = "POST"
    headers: dict[str, HEADER_VALUE] = Field(
        default_factory=dict, max_length=MAX_HEADERS, description=f"at most {MAX_HEADERS} custom headers"
    )
    body: str | None = Field(default=None, description="raw request body (else the task payload as JSON)")


class CallbackDefaults(CallbackBudget):
    """An app's defaults under each of its tasks' callbacks (the task's own fields win)."""

    method: Method | None = None
    headers: dict[str, HEADER_VALUE] | None = Field(default=None, max_length=MAX_HEADERS)


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


# ---- tasks --------------------------------------------------------------------------------------


class TaskCreate(_Strict):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    key: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=KEY_PATTERN, description="idempotency key, unique per app"
    )
    schedule: Schedule
    callback: CallbackRequest
    payload: JsonValue = None
    misfire_policy: MisfirePolicyName | None = None
    delivery: DeliveryName | None = None


class TaskUpdate(_Strict):
    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN)
    schedule: Schedule | None = None
    callback: CallbackRequest | None = None
    payload: JsonValue = None
    misfire_policy: MisfirePolicyName | None = None
    delivery: DeliveryName | None = None
    version: int | None = Field(
        default=None,
        description=(
            "the task's version as last read: 409 version_conflict if another edit (update, pause, resume) "
            "landed since; fires never move it. Without it the last edit wins"
        ),
    )


# ---- targets ------------------------------------------------------------------------------------

TARGET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
ProtocolName = Literal["http", "grpc", "amqp", "nats", "redis_stream"]
TargetMethod = Literal["POST", "PUT", "PATCH", "DELETE"]  # a target always sends the signed body
MAX_TARGET_URLS = 10


class HttpTargetSettings(_Strict):
    url: str | None = Field(default=None, description="one URL (http/https), or give urls")
    urls: list[str] | None = Field(default=None, min_length=1, max_length=MAX_TARGET_URLS)
    method: TargetMethod = "POST"
    headers: dict[str, HEADER_VALUE] = Field(default_factory=dict, max_length=MAX_HEADERS)
    timeout_ms: int | None = Field(default=None, ge=1, le=60_000)


class GrpcTargetSettings(_Strict):
    address: str = Field(max_length=300, description="host:port of a Receiver service")
    tls: bool = False
    deadline_ms: int | None = Field(default=None, ge=1, le=60_000)


class AmqpTargetSettings(_Strict):
    url: str = Field(max_length=2048, description="amqp://host:port/vhost or amqps://…, no user info")
    exchange: str = Field(max_length=255, description='"" is the default exchange')
    routing_key: str = Field(default="", max_length=255)
    persistent: bool = True
    mandatory: bool = True


class NatsTargetSettings(_Strict):
    servers: list[str] = Field(min_length=1, max_length=10, description="nats://host:port or tls://host:port")
    subject: str = Field(max_length=255)
    stream: str | None = Field(default=None, max_length=255, description="the ack must come from this stream")


class RedisStreamTargetSettings(_Strict):
    url: str = Field(max_length=2048, description="redis://host:port/db or rediss://…, no user info")
    stream: str = Field(max_length=512, description="the stream key")
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

    max_attempts: int | None = Field(default=None, ge=1, le=50)
    max_age_s: int | None = Field(default=None, ge=1, le=30 * 86_400)
    backoff_base_ms: int | None = Field(default=None, ge=1, le=3_600_000)
    backoff_max_ms: int | None = Field(default=None, ge=1, le=86_400_000)


class TargetCreate(_Strict):
    name: str = Field(pattern=TARGET_NAME_PATTERN, description="unique per app; tasks name it")
    protocol: ProtocolName
    settings: TargetSettingsShape = Field(description="the shape of the protocol's settings")
    retry: TargetRetry | None = None
    credentials: dict[str, HEADER_VALUE] | None = Field(
        default=None, max_length=MAX_HEADERS, description="write-only: stored and used, never answered"
    )


class TargetUpdate(_Strict):
    protocol: ProtocolName | None = Field(default=None, description="changes only together with settings")
    settings: TargetSettingsShape | None = Field(default=None, description="replaces the settings as a whole")
    retry: TargetRetry | None = Field(default=None, description="replaces the retry policy as a whole")
    credentials: dict[str, HEADER_VALUE] | None = Field(
        default=None, max_length=MAX_HEADERS, description="replaces the credentials ({} clears); absent: kept"
    )
    version: int | None = Field(
        default=None, description="the target's version as last read: 409 version_conflict if it moved since"
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

POOL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
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

    name: str = Field(pattern=POOL_NAME_PATTERN)
    mode: PoolModeName = "one"
    strategy: PoolStrategyName | None = Field(default=None, description="one and one_per_zone: default round_robin")
    hash_on: Literal["task_id", "key"] | None = Field(default=None, description="consistent_hash: default task_id")
    path: str | None = Field(default=None, max_length=512, description="appended to every executor's address")
    shard_total: int | None = Field(default=None, ge=1, le=MAX_SHARD_TOTAL, description="sharded: the item count")
    shard_params: list[str] | None = Field(default=None, description="sharded: one parameter per item")
    overlap: Literal["allow", "skip_if_running", "queue_one"] = Field(
        default="allow", description="a fire while the task's previous flow still runs: go, skip, or wait (one)"
    )


class ExecutorRegistration(_Strict):
    """``POST /v1/pools/{pool}/executors``: an instance of the app's service joins the pool (again)."""

    address: str = Field(description="the executor's base URL (http/https), judged like a callback URL")
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
