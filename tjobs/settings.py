"""One typed settings object, built once at start-up and passed down.

Sources, highest first: keyword arguments, ``TJOBS_*`` environment variables (nested with ``__``, e.g.
``TJOBS_SCHEDULER__TICK_MS=20``), then a TOML file given to ``tjobs serve --config``. Nothing reads the
environment at import time.
"""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sharding import Topology
from tjobs.model import MisfirePolicy
from tjobs.targets.addresses import AddressAllowList


class SettingsSection(BaseModel):
    """A section of the settings (``[scheduler]`` in the TOML file): a key it does not define is a
    mistake (a misspelling would otherwise leave the default in force) and refuses the start."""

    model_config = ConfigDict(extra="forbid")


class StorageSettings(SettingsSection):
    # One URL per database server. Instance i of the topology uses urls[i % len(urls)], so one URL
    # is a fully merged deployment. SQLite: "sqlite+aiosqlite:///DIR" keeps one file per logical DB.
    urls: list[str] = Field(default_factory=lambda: ["sqlite+aiosqlite:///.tjobs/data"])
    topology: str = "8x4x16"
    pool_size: int = 8
    connect_timeout_s: float = 5.0
    # A create (single or batch) waits this long at most for its database server, then answers 503
    # (storage_unavailable if nothing was sent, storage_outcome_unknown if its write may have committed)
    create_timeout_s: float = Field(default=5.0, gt=0)
    # Logical databases are named "<prefix>_NN" (SQLite files "<prefix>_NN.db"); tests use their own.
    database_prefix: str = Field(default="tjobs", pattern=r"^[a-z][a-z0-9_]{0,40}$")

    @field_validator("topology")
    @classmethod
    def _valid_topology(cls, value: str) -> str:
        Topology.parse(value)
        return value

    def parsed_topology(self) -> Topology:
        return Topology.parse(self.topology)


class ApiSettings(SettingsSection):
    host: str = "127.0.0.1"
    port: int = 8080
    admin_key: str | None = None  # `tjobs serve` refuses a weak one (see weak_admin_key_reason)
    # request bodies are refused with 413 once they pass these, while being read
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    max_batch_body_bytes: int = Field(default=16 << 20, ge=1024)  # POST /v1/tasks/batch


class SchedulerSettings(SettingsSection):
    tick_ms: int = Field(default=10, ge=1, le=100)
    cycle_s: int = Field(default=300, ge=5)
    # load the next cycle this long before it starts; below cycle_s (checked with the default too)
    load_lead_s: int = Field(default=30, ge=1, validate_default=True)
    load_page_size: int = 5000
    # a cycle load's reads spread over this share of the time left before its cycle's first instant
    # (tjobs/firing/load_pace.py; 0: read at once, as before): the fire path keeps its tail meanwhile
    load_spread: float = Field(default=0.5, ge=0, lt=1)
    misfire_threshold_s: float = 60.0
    misfire_default_at: MisfirePolicy = MisfirePolicy.FIRE_NOW
    misfire_default_delay: MisfirePolicy = MisfirePolicy.FIRE_NOW
    misfire_default_cron: MisfirePolicy = MisfirePolicy.FIRE_SOON
    misfire_default_interval: MisfirePolicy = MisfirePolicy.FIRE_SOON
    misfire_default_fixed_delay: MisfirePolicy = MisfirePolicy.FIRE_NOW
    catch_up_max: int = 100  # at most this many missed occurrences fired by catch_up per misfire
    misfire_rate_per_s: float = 200.0  # pacing of fire_soon / catch_up fires per app
    fire_batch_max: int = 1000  # intents in one fire transaction
    # how often each node reads every calendar again (tjobs/service/calendars.py): a calendar written
    # through another node applies to this node's fires and previews within this (through this node: at once)
    calendar_refresh_s: float = Field(default=5.0, ge=0.5, le=300)

    @field_validator("load_lead_s")
    @classmethod
    def _lead_below_cycle(cls, value: int, info: ValidationInfo) -> int:
        # The cycle load skips the tasks it loaded before (not due yet); one the hot tier missed there
        # is read as overdue by the next load, which must therefore start after the current horizon
        # (tjobs/firing/runner.py, invariant 7 in docs/design.md).
        cycle_s = info.data.get("cycle_s")
        if cycle_s is not None and value >= cycle_s:
            raise ValueError(f"must be below scheduler.cycle_s ({cycle_s}), got {value}")
        return value


class CallbackSettings(SettingsSection):
    timeout_ms: int = 3000
    max_attempts: int = 8
    max_age_s: int = 86_400
    backoff_base_ms: int = 1000
    backoff_max_ms: int = 3_600_000
    default_rate_limit_per_s: float = 1000.0
    default_max_concurrency: int = 100
    global_max_in_flight: int = 1000
    max_retry_after_s: int = 3600
    user_agent: str = "tjobs/0.1"
    # "lean": pooled HTTP/1.1 on asyncio + llhttp (tjobs/delivery/lean_http.py); "aiohttp": the aiohttp
    # client (tjobs/delivery/http.py), for what the lean one does not cover
    transport: Literal["lean", "aiohttp"] = "lean"
    # connecting (TCP + TLS handshake) to one judged address; unset: bounded by timeout_ms only (lean only)
    connect_timeout_ms: int | None = Field(default=None, gt=0)
    # delivery outcomes are written at most this often, or as soon as outcome_flush_batch are pending
    # (tjobs/delivery/deliverer.py): longer and larger groups more flows of one shard table into one
    # UPDATE (less database CPU per fire at thousands a second), and leaves more delivered flows to be
    # re-driven if the node dies before writing them (docs/configuration.md, callbacks)
    outcome_flush_ms: int = Field(default=100, ge=10, le=5000)
    outcome_flush_batch: int = Field(default=500, ge=1, le=20_000)
    # an app's queue on a node keeps at least this many deliveries in memory, and more only while they are what
    # the app drains in 2 minutes; first attempts past that wait in the store (tjobs/delivery/spill.py)
    queue_keep_min: int = Field(default=100_000, ge=1, le=10_000_000)


class CompensatorSettings(SettingsSection):
    interval_s: float = 5.0
    grace_s: float = 30.0  # a flow must be this far past its next attempt before re-drive
    batch: int = 500


class RunSettings(SettingsSection):
    """Job runs (README "Job runs", docs/targets.md "Runs"): what a run's reports may hold, and the
    bounds of a run whose task sets none."""

    # a run with no final report this long after it started times out (a task's callback.run_timeout_ms wins)
    timeout_ms: int = Field(default=86_400_000, ge=1000, le=30 * 86_400_000)
    max_result_bytes: int = Field(default=65_536, ge=256, le=1_048_576)  # a report's result, as JSON
    max_log_lines: int = Field(default=1000, ge=1, le=100_000)  # log lines a flow keeps over all its runs
    max_log_line_bytes: int = Field(default=2048, ge=64, le=65_536)  # a longer line is cut
    max_log_lines_per_call: int = Field(default=500, ge=1, le=10_000)  # lines one log call may send
    cancel_grace_s: float = Field(default=60.0, ge=1, le=86_400)  # a cancel no executor confirms ends then


class RetentionSettings(SettingsSection):
    """Retention (docs/operations.md, "Capacity model"): flows and completed tasks older than ``days`` are
    purged, ``batch`` rows a statement, each shard until nothing old enough is left or the pass has spent
    ``pass_budget_s``; then the next pass comes after ``interval_s``, or after ``pass_budget_s`` when the
    budget ended it with rows left (the sweeper deletes at most half the time)."""

    days: float = Field(default=30.0, gt=0, le=36_500)
    interval_s: float = Field(default=60.0, gt=0, le=86_400)
    batch: int = Field(default=200, ge=1, le=10_000)
    pass_budget_s: float = Field(default=5.0, gt=0, le=600)


class LimitSettings(SettingsSection):
    max_payload_bytes: int = 64 * 1024
    max_url_chars: int = 2048
    max_headers: int = 20
    min_period_ms: int = 1000
    max_future_days: int = 3650
    max_active_tasks_per_app: int = 10_000_000  # per-app quota of active tasks (0: unlimited)
    # how old a node's read of an app's task counts may be for its quota before it is read again
    task_count_refresh_s: float = Field(default=30.0, gt=0)
    # the rest between two reconciliation steps, each recounting one shard table (a round of 512: 85 min)
    task_count_reconcile_step_s: float = Field(default=10.0, gt=0)
    max_json_depth: int = Field(default=64, ge=4, le=250)  # nesting of objects/arrays in a request body


class MetricsSettings(SettingsSection):
    # false: no-op metrics (nothing counted, GET /metrics answers 404); to measure their cost, or unscraped
    enabled: bool = True
    # Bearer token Prometheus sends ("authorization: {credentials: ...}"); also reads GET /v1/cluster
    scrape_token: str | None = Field(default=None, min_length=16)
    # "host:port" of a listener serving only /metrics; the API's listener then does not serve it
    listen: str | None = Field(default=None, pattern=r"^\[?[0-9A-Za-z_.:-]+\]?:[0-9]{1,5}$")
    # true: GET /metrics needs no token on the API's listener (tjobs serve refuses that otherwise)
    public: bool = False

    def listen_address(self) -> tuple[str, int] | None:
        if self.listen is None:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class RateLimitSettings(SettingsSection):
    """An app's rates are the cluster's: each of N live nodes takes 1/N of them (tjobs.cluster.limit_shares);
    the unauthenticated budget is per node and per source address."""

    enabled: bool = True
    app_requests_per_s: float = Field(default=1000.0, ge=0)  # per app; an app's api_rate_limit_per_s wins
    app_expensive_reads_per_s: float = Field(default=10.0, ge=0)  # per app: stats, task list, dead letters
    app_creates_per_s: float = Field(default=2000.0, ge=0)  # tasks registered per app (a batch counts each)
    burst_s: float = Field(default=2.0, gt=0)  # each bucket holds this many seconds of its rate
    unauthenticated_per_s: float = Field(default=50.0, ge=0)  # failed or missing keys, per source address
    unknown_key_ttl_s: float = Field(default=60.0, ge=0)  # a refused key is refused without a lookup this long
    unknown_keys_max: int = Field(default=100_000, ge=0)  # refused key hashes remembered (oldest go first)


class ClusterSettings(SettingsSection):
    """Cluster mode: on when ``etcd_endpoints`` is set (else the embedded, single-node coordinator)."""

    etcd_endpoints: list[str] = Field(default_factory=list)  # "http://127.0.0.1:2379", tried in order
    name: str = Field(default="tjobs", pattern=r"^[a-zA-Z0-9_.-]{1,64}$")  # etcd key prefix /tjobs/<name>/
    redis_url: str | None = None  # the hot tier; without it near-term changes go through a DB poll
    hot_tier: Literal["auto", "redis", "dbpoll", "off"] = "auto"
    lease_ttl_s: int = Field(default=5, ge=2, le=60)
    fence_margin_ms: int = 1000  # stop firing this long before the lease could have ended
    zone: str = ""  # the set (zone) label; a group's backups go to other sets where possible
    advertise_address: str | None = None  # defaults to http://<api.host>:<api.port>
    # Fence a node whose clock is off the database's by more than this (back at half); 0: never fence.
    clock_skew_max_ms: int = Field(default=500, ge=0, le=60_000)
    db_unreachable_max_s: float = 3.0  # step down after the database has been unreachable this long
    # A server this node found unreachable takes no new shards of the plan until it answered this long
    # (tjobs.cluster.reachability): a flapping link moves the node's shards of it away once.
    db_recovery_hold_s: float = Field(default=10.0, ge=0, le=600)
    sync_interval_ms: int = Field(default=200, ge=20)  # membership / plan / holder reconcile period
    hot_poll_interval_ms: int = Field(default=200, ge=10)  # DB-poll hot tier period
    redis_poll_interval_ms: int = Field(default=50, ge=5)  # Redis hot tier: owner's slice poll period
    pool_sync_interval_ms: int = Field(default=500, ge=20)  # re-read of every executor pool (tjobs.pools)


class ConsoleSettings(SettingsSection):
    """The web console at ``/console`` (:mod:`tjobs.console`)."""

    enabled: bool = True
    # Signs console session cookies; every node of a cluster must share it. Unset: derived from
    # api.admin_key (nodes share that), else random per process (sessions then end with the process).
    session_secret: str | None = None
    session_ttl_s: int = Field(default=8 * 3600, ge=60, le=30 * 86_400)
    # Sign-in through an OpenID Connect provider (authorization code flow; docs/console.md): on when the
    # issuer, client id and secret and this console's callback URL (.../console/oidc/callback) are all set.
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    oidc_redirect_url: str | None = None
    oidc_username_claim: str = "preferred_username"


class SloSettings(SettingsSection):
    """Cluster-wide service levels (``GET /v1/slo?window=``, :mod:`tjobs.observability.slo_recorder`)."""

    # How often each node adds its per-app, per-minute outcomes to the store: one statement per pass.
    # The cluster's answer trails the fires by up to this much.
    flush_s: float = Field(default=60.0, ge=1, le=600)


class TargetsSettings(SettingsSection):
    """Named delivery targets (:mod:`tjobs.targets`)."""

    # The broker and gRPC addresses ("host:port", "[v6]:port") non-HTTP targets may connect to: none
    # unless the operator lists them (SSRF; tjobs.targets.addresses). A malformed entry refuses the start.
    allowed_addresses: list[str] = Field(default_factory=list)
    # How long a node serves a target from its cache before reading it again: a change made through
    # another node reaches this node's next attempt within this (through this node: at once).
    cache_ttl_s: float = Field(default=5.0, gt=0, le=300)

    @field_validator("allowed_addresses")
    @classmethod
    def _valid_addresses(cls, value: list[str]) -> list[str]:
        AddressAllowList.parse(value)  # AddressRefused is a ValueError: pydantic names the entry
        return value


class DirectorySettings(SettingsSection):
    """The apps and named targets a delivery needs, and the API keys' apps, cached per node
    (:mod:`tjobs.service.directory_cache`): they live on the server holding the apps table, and a
    delivery or a create on another server's shards must not wait on it (docs/operations.md, Database
    server outages)."""

    # How long a node serves an app from its cache before reading it again (read ahead of expiry while
    # in use): a change made through another node reaches this node within this (through this node: at once)
    app_ttl_s: float = Field(default=10.0, gt=0, le=300)
    # While the apps server does not answer, apps, targets and API keys are served from their last good
    # copy for at most this long past their TTL; then the node's deliveries of that app wait for the server
    # (their flows stay pending, the compensator re-drives them) and its requests wait at most
    # storage.create_timeout_s (then 503). 0: never served stale.
    serve_stale_s: float = Field(default=300.0, ge=0, le=86_400)
    # A delivery (or an API request) that finds its copy past its TTL waits this long at most for the read
    # before it is made from the copy; once a read has failed or outlived this, the copy is served without waiting
    read_deadline_ms: int = Field(default=200, ge=1, le=10_000)


class AlertingSettings(SettingsSection):
    """Alerts (:mod:`tjobs.alerts`): evaluated once per cluster, on the dispatcher leader."""

    enabled: bool = True
    interval_s: float = Field(default=30.0, ge=1, le=3600)  # how often the leader evaluates every rule
    send_timeout_ms: int = Field(default=5000, ge=100, le=60_000)  # one notification to one channel
    # The SMTP server e-mail channels send through (none: e-mail channels fail their sends, logged)
    smtp_host: str | None = None
    smtp_port: int = Field(default=25, ge=1, le=65_535)
    smtp_from: str = "tjobs-alerts@localhost"
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = False


class AuditSettings(SettingsSection):
    """The audit log (docs/operations.md, "Audit log"): entries older than ``retention_days`` are purged
    every ``interval_s``, ``batch`` per statement."""

    retention_days: float = Field(default=90.0, gt=0, le=36_500)
    interval_s: float = Field(default=300.0, ge=1, le=86_400)
    batch: int = Field(default=1000, ge=1, le=100_000)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TJOBS_", env_nested_delimiter="__", extra="forbid")

    node_id: str | None = None
    storage: StorageSettings = Field(default_factory=StorageSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    callbacks: CallbackSettings = Field(default_factory=CallbackSettings)
    compensator: CompensatorSettings = Field(default_factory=CompensatorSettings)
    runs: RunSettings = Field(default_factory=RunSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    rate_limits: RateLimitSettings = Field(default_factory=RateLimitSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    targets: TargetsSettings = Field(default_factory=TargetsSettings)
    directory: DirectorySettings = Field(default_factory=DirectorySettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    slo: SloSettings = Field(default_factory=SloSettings)
    alerts: AlertingSettings = Field(default_factory=AlertingSettings)
    allow_loopback_callbacks: bool = False

    def node_identity(self) -> str:
        """This node's id among the cluster's members: ``node_id``, else ``<host name>-<api.port>``."""
        return self.node_id or f"{socket.gethostname()}-{self.api.port}"

    def default_misfire_policy(self, schedule_kind: str) -> MisfirePolicy:
        policy: MisfirePolicy = getattr(self.scheduler, f"misfire_default_{schedule_kind}")
        return policy


def metrics_exposure_problem(settings: Settings) -> str | None:
    """Why ``tjobs serve`` must not start with these settings' metrics exposure (None: it may).

    ``GET /metrics`` names every app in its per-app series; on the API's listener, without a scrape
    token, anyone who reaches the node reads them. That takes ``metrics.public = true`` on purpose.
    """
    metrics, api = settings.metrics, settings.api
    listen = metrics.listen_address()
    if listen is not None and listen[1] == api.port and listen[0] in (api.host, "0.0.0.0", "::"):
        return f"metrics.listen ({metrics.listen}) is the API's own address: name a different port"
    if not metrics.enabled or listen is not None or metrics.scrape_token is not None or metrics.public:
        return None
    return (
        f"GET /metrics would be open to anyone who reaches {api.host}:{api.port}: set metrics.scrape_token "
        "(Prometheus sends it as a bearer token), or metrics.listen (a separate metrics listener), or "
        "metrics.public = true (open on purpose), or metrics.enabled = false"
    )


_PLACEHOLDER_KEYS = frozenset(
    {
        "changeme",
        "change",
        "admin",
        "administrator",
        "password",
        "secret",
        "test",
        "default",
        "example",
        "key",
        "adminkey",
        "token",
        "letmein",
        "root",
    }
)
_PLACEHOLDER_WORDS = ("changeme", "replace", "placeholder")
MIN_ADMIN_KEY_CHARS = 16


def weak_admin_key_reason(settings: Settings) -> str | None:
    """Why ``tjobs serve`` must not start with this ``api.admin_key`` (None: it may, or it is unset).

    Weak (:func:`weak_secret_reason`): shorter than :data:`MIN_ADMIN_KEY_CHARS`, fewer than 8 distinct
    characters, or a placeholder (``change-me``, ``admin``, ``password``...). ``tjobs dev`` mints its
    own random key.
    """
    return weak_secret_reason("api.admin_key", settings.api.admin_key)


def weak_scrape_token_reason(settings: Settings) -> str | None:
    """Why ``tjobs serve`` must not start with this ``metrics.scrape_token`` (None: it may, or it is
    unset): it reads every app's series and the cluster view, so the admin key's rules hold for it."""
    return weak_secret_reason("metrics.scrape_token", settings.metrics.scrape_token)


def weak_secret_reason(setting: str, secret: str | None) -> str | None:
    """Why ``secret`` (the value of ``setting``) is too weak to serve with, or None (strong, or unset)."""
    if secret is None:
        return None
    folded = "".join(c for c in secret.lower() if c.isalnum())
    placeholder = folded in _PLACEHOLDER_KEYS or any(word in folded for word in _PLACEHOLDER_WORDS)
    if len(secret) < MIN_ADMIN_KEY_CHARS or len(set(secret)) < 8 or placeholder:
        return (
            f"{setting} is too weak (at least {MIN_ADMIN_KEY_CHARS} random characters, not a placeholder "
            "like 'change-me'): generate one with `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    return None


class InvalidSettings(ValueError):
    """The settings cannot be used: the message names each bad setting (``cluster.lease_ttl_s: …``) or
    the file that is not TOML, one line each, for an operator to fix before the node starts."""


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings: ``overrides`` > environment > ``config_file`` (TOML) > defaults.

    Raises :class:`InvalidSettings` for an unknown setting, a value out of its bounds or a file that
    is not TOML."""
    file_values: dict[str, Any] = {}
    try:
        if config_file is not None:
            with config_file.open("rb") as handle:
                file_values = tomllib.load(handle)
        env_values = Settings().model_dump(exclude_unset=True)
        merged = _deep_merge(_deep_merge(file_values, env_values), overrides)
        return Settings.model_validate(merged)
    except tomllib.TOMLDecodeError as error:
        raise InvalidSettings(f"{config_file}: not TOML: {error}") from None
    except ValidationError as error:
        raise InvalidSettings(_describe(error)) from None


def _describe(error: ValidationError) -> str:
    """One line per problem: the setting's dotted name (as in the TOML file; ``TJOBS_A__B`` in the
    environment is ``a.b``) and what is wrong with it."""
    lines = []
    for problem in error.errors(include_url=False, include_input=False):
        name = ".".join(str(part) for part in problem["loc"]) or "settings"
        message = "unknown setting" if problem["type"] == "extra_forbidden" else problem["msg"]
        lines.append(f"{name}: {message}")
    return "\n".join(lines)


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
