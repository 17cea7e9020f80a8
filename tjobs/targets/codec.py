"""A target's JSON form: what the store keeps (``settings``, ``retry`` and ``credentials`` columns) and
what the API answers (:func:`target_json`, credentials redacted).

The settings object's keys are the field names of the protocol's settings class, so
:func:`settings_from_json` reads back exactly what :func:`settings_to_json` wrote. Stored documents are
trusted (validated when the target was written): unknown keys are ignored, so a field added later
reads as its default on older rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from tjobs.targets.model import (
    NO_CREDENTIALS,
    AmqpTarget,
    GrpcTarget,
    HttpTarget,
    NatsTarget,
    Protocol,
    RedisStreamTarget,
    RetryPolicy,
    Target,
    TargetSettings,
    redacted,
)

SETTINGS_CLASS: dict[Protocol, type[TargetSettings]] = {
    Protocol.HTTP: HttpTarget,
    Protocol.GRPC: GrpcTarget,
    Protocol.AMQP: AmqpTarget,
    Protocol.NATS: NatsTarget,
    Protocol.REDIS_STREAM: RedisStreamTarget,
}
_TUPLE_FIELDS = frozenset({"urls", "servers"})


def settings_to_json(settings: TargetSettings) -> dict[str, Any]:
    """Every field of ``settings`` (tuples as lists, mappings as objects, unset ones as ``null``)."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def settings_from_json(protocol: Protocol, stored: Mapping[str, Any]) -> TargetSettings:
    cls = SETTINGS_CLASS[protocol]
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in stored:
            continue
        value = stored[f.name]
        if f.name in _TUPLE_FIELDS:
            value = tuple(value)
        elif f.name == "headers":
            value = MappingProxyType(dict(value or {}))
        values[f.name] = value
    return cls(**values)


def retry_to_json(retry: RetryPolicy) -> dict[str, int]:
    """The overrides that are set (an empty object: every value is the node's default)."""
    return {f.name: getattr(retry, f.name) for f in fields(retry) if getattr(retry, f.name) is not None}


def retry_from_json(stored: Mapping[str, Any]) -> RetryPolicy:
    return RetryPolicy(**{f.name: stored[f.name] for f in fields(RetryPolicy) if stored.get(f.name) is not None})


def credentials_from_json(stored: Mapping[str, Any]) -> Mapping[str, str]:
    return MappingProxyType({str(k): str(v) for k, v in stored.items()}) if stored else NO_CREDENTIALS


def target_json(target: Target, instant: Any = None) -> dict[str, Any]:
    """A target as the API answers it: credentials by key, each value ``***`` (never the value).
    ``instant`` formats the epoch-ms timestamps (ISO-8601 in the API)."""
    body: dict[str, Any] = {
        "name": target.name,
        "protocol": target.protocol.value,
        "version": target.version,
        "settings": settings_to_json(target.settings),
        "retry": retry_to_json(target.retry),
        "credentials": redacted(target.credentials),
    }
    if instant is not None:
        body["created_at"] = instant(target.created_at_ms)
        body["updated_at"] = instant(target.updated_at_ms)
    return body
