"""A delivery target as a typed value: its protocol, the protocol's settings, credentials and retry policy.

A target belongs to one app and is named by it (``"orders-mq"``); a task names it instead of carrying
an inline HTTP callback. Every change moves ``version``; the next attempt of every flow that names the
target uses the version current then.

``credentials`` are write-only: stored and handed to the transport, never echoed by the API, a log
line or an error (:func:`redacted` is what may be shown). Which keys a protocol reads:

========================  =============================================================
protocol                  credentials keys
========================  =============================================================
``http``                  any header names (``authorization``, ``x-api-key``…), sent as headers
``grpc``                  ``authorization`` (sent as call metadata)
``amqp``                  ``username``, ``password``
``nats``                  ``username``, ``password`` or ``token``
``redis_stream``          ``username``, ``password``
========================  =============================================================

Transports receive the whole :class:`Target` on :attr:`tjobs.delivery.transport.CallbackRequest.target`
and must keep credentials out of :attr:`tjobs.delivery.transport.AttemptResult.error`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

NO_CREDENTIALS: Mapping[str, str] = MappingProxyType({})
REDACTED = "***"
TARGET_KEY_PREFIX = "target:"
"""A flow tracks each named target it sends to as ``target:<name>`` (inline URLs as themselves: an
``http(s)`` URL never starts so), in :attr:`tjobs.delivery.transport.AttemptResult.url` and the flow's
``last_error``: never an address or a credential."""


def tracking_key(name: str) -> str:
    return TARGET_KEY_PREFIX + name


class Protocol(StrEnum):
    HTTP = "http"
    GRPC = "grpc"
    AMQP = "amqp"
    NATS = "nats"
    REDIS_STREAM = "redis_stream"


BROKER_PROTOCOLS = frozenset({Protocol.AMQP, Protocol.NATS, Protocol.REDIS_STREAM})
"""The protocols that publish to a message broker (docs/targets.md "Message brokers")."""


@dataclass(frozen=True, slots=True)
class HttpTarget:
    """One request per URL (several URLs: multicast, each tracked separately)."""

    urls: tuple[str, ...]
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=lambda: NO_CREDENTIALS)
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class GrpcTarget:
    """``Receiver.Fire`` of ``proto/tjobs/callback/v1/receiver.proto`` at ``address`` (``host:port``)."""

    address: str
    tls: bool = False
    deadline_ms: int | None = None


@dataclass(frozen=True, slots=True)
class AmqpTarget:
    """A publish to ``exchange`` with ``routing_key`` on the broker at ``url`` (``amqp://host:port/vhost``,
    no user info: that is in the credentials); delivered = the broker's publisher confirm."""

    url: str
    exchange: str
    routing_key: str
    persistent: bool = True
    mandatory: bool = True  # an unroutable message comes back and counts as a failure


@dataclass(frozen=True, slots=True)
class NatsTarget:
    """A JetStream publish to ``subject`` (``Nats-Msg-Id`` = the flow id); delivered = the publish ack."""

    servers: tuple[str, ...]
    subject: str
    stream: str | None = None  # when set, the ack must come from this stream


@dataclass(frozen=True, slots=True)
class RedisStreamTarget:
    """``XADD`` to ``stream`` on the server at ``url`` (``redis://host:port/db``, no user info)."""

    url: str
    stream: str
    maxlen: int | None = None  # trimmed with ``MAXLEN ~ n`` when set


TargetSettings = HttpTarget | GrpcTarget | AmqpTarget | NatsTarget | RedisStreamTarget

PROTOCOL_OF: dict[type[TargetSettings], Protocol] = {
    HttpTarget: Protocol.HTTP,
    GrpcTarget: Protocol.GRPC,
    AmqpTarget: Protocol.AMQP,
    NatsTarget: Protocol.NATS,
    RedisStreamTarget: Protocol.REDIS_STREAM,
}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Overrides of the node's delivery budget (:class:`tjobs.settings.CallbackSettings`); unset = default."""

    max_attempts: int | None = None
    max_age_s: int | None = None
    backoff_base_ms: int | None = None
    backoff_max_ms: int | None = None


def pick_budget(explicit: int | None, policies: Sequence[RetryPolicy], name: str, default: int) -> int:
    """One field of a flow's retry budget (``max_attempts``, ``max_age_s``, ``backoff_base_ms``,
    ``backoff_max_ms``): the task's explicit value, else the largest of its targets' (a target
    without its own counts as the node's ``default``), else the node's ``default``."""
    if explicit is not None:
        return explicit
    values = [getattr(policy, name) for policy in policies]
    return max((default if value is None else value for value in values), default=default)


class RetryBudget(NamedTuple):
    """A flow's whole retry budget (the fields of :class:`RetryPolicy`, every one set)."""

    max_attempts: int
    max_age_s: int
    backoff_base_ms: int
    backoff_max_ms: int


@functools.lru_cache(maxsize=4096)
def retry_budget(
    max_attempts: int | None, max_age_s: int | None, policies: tuple[RetryPolicy, ...], defaults: RetryBudget
) -> RetryBudget:
    """Every field of a flow's budget by :func:`pick_budget`: the task's explicit ``max_attempts`` and
    ``max_age_s``, its targets' ``policies`` and the node's ``defaults``. Worked out once per
    combination (a handful per node: tasks share targets and mostly leave the budget alone), not
    field by field for every delivery."""
    return RetryBudget(
        pick_budget(max_attempts, policies, "max_attempts", defaults.max_attempts),
        pick_budget(max_age_s, policies, "max_age_s", defaults.max_age_s),
        pick_budget(None, policies, "backoff_base_ms", defaults.backoff_base_ms),
        pick_budget(None, policies, "backoff_max_ms", defaults.backoff_max_ms),
    )


@dataclass(frozen=True, slots=True)
class Target:
    app_id: str
    name: str
    settings: TargetSettings
    version: int = 1
    retry: RetryPolicy = RetryPolicy()
    credentials: Mapping[str, str] = field(default_factory=lambda: NO_CREDENTIALS)
    created_at_ms: int = 0
    updated_at_ms: int = 0

    @property
    def protocol(self) -> Protocol:
        return PROTOCOL_OF[type(self.settings)]

    def __repr__(self) -> str:  # never the credentials, even in a traceback or a debug log
        return (
            f"Target(app_id={self.app_id!r}, name={self.name!r}, protocol={self.protocol.value}, "
            f"version={self.version}, credentials={redacted(self.credentials)!r})"
        )


def redacted(credentials: Mapping[str, str]) -> dict[str, str]:
    """What may be shown of ``credentials``: their keys, each value replaced."""
    return dict.fromkeys(credentials, REDACTED)
