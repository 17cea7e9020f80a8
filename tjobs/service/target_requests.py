"""Validation of target create and update bodies (``/v1/targets``) into typed targets.

The keys, choices and bounds come from the request shapes of :mod:`tjobs.wire`
(:class:`~tjobs.wire.TargetCreate`, one settings shape per protocol); what this adds is what JSON
Schema cannot say (the URL model, header rules, broker URL and ``host:port`` forms, NATS subjects) and
field-named errors: every refusal is :class:`tjobs.errors.InvalidInput` naming the field by its dotted
path (``settings.exchange``, ``credentials.password``), never quoting a credential's value.

Credentials a protocol reads (see :mod:`tjobs.targets.model`): HTTP any header names (sent as
headers), gRPC ``authorization``, AMQP and Redis ``username``/``password``, NATS
``username``/``password`` or ``token``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, get_args

from annotated_types import Ge, Le, MaxLen
from pydantic import BaseModel

from tjobs.errors import InvalidInput, known_object
from tjobs.service.validation import UrlRules, check_headers, check_urls
from tjobs.settings import LimitSettings
from tjobs.targets.addresses import AddressRefused, addresses_of
from tjobs.targets.model import (
    NO_CREDENTIALS,
    AmqpTarget,
    GrpcTarget,
    HttpTarget,
    NatsTarget,
    Protocol,
    RedisStreamTarget,
    RetryPolicy,
    TargetSettings,
)
from tjobs.wire import (
    MAX_HEADER_VALUE_CHARS,
    MAX_TARGET_URLS,
    TARGET_NAME_PATTERN,
    TARGET_SETTINGS_SHAPES,
    TargetCreate,
    TargetMethod,
    TargetRetry,
    TargetUpdate,
)

CREATE_KEYS = frozenset(TargetCreate.model_fields)
UPDATE_KEYS = frozenset(TargetUpdate.model_fields)
_NAME = re.compile(TARGET_NAME_PATTERN)
_METHODS = frozenset(get_args(TargetMethod))
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NATS_TOKEN = re.compile(r"[^\s.*>]+")  # a subject token: no whitespace, no wildcard
_STREAM_NAME = re.compile(r"[^\s.*>/\\]{1,255}")
CREDENTIAL_KEYS: dict[Protocol, frozenset[str] | None] = {
    Protocol.HTTP: None,  # header names
    Protocol.GRPC: frozenset({"authorization"}),
    Protocol.AMQP: frozenset({"username", "password"}),
    Protocol.NATS: frozenset({"username", "password", "token"}),
    Protocol.REDIS_STREAM: frozenset({"username", "password"}),
}


@dataclass(frozen=True, slots=True)
class TargetFields:
    """What a create or update body sets; ``None``: not given (an update keeps the stored value)."""

    name: str | None
    settings: TargetSettings | None
    retry: RetryPolicy | None
    credentials: Mapping[str, str] | None
    version: int | None = None


def parse_create(body: Any, limits: LimitSettings) -> TargetFields:
    known_object(body, CREATE_KEYS)
    for required in ("name", "protocol", "settings"):
        if required not in body:
            raise InvalidInput(required, "is required", "missing")
    name = body["name"]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput("name", "must be 1..64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    protocol = parse_protocol(body["protocol"])
    settings = parse_settings(protocol, body["settings"], limits)
    retry = parse_retry(body["retry"]) if body.get("retry") is not None else RetryPolicy()
    raw_credentials = body.get("credentials")
    credentials = parse_credentials(protocol, {} if raw_credentials is None else raw_credentials, limits)
    return TargetFields(name, settings, retry, credentials)


def parse_update(
    body: Any, protocol: Protocol, limits: LimitSettings, stored_credentials: Mapping[str, str] = NO_CREDENTIALS
) -> TargetFields:
    """An update of a target of ``protocol`` holding ``stored_credentials``: the protocol changes only
    together with ``settings``. Credentials given are merged into the stored ones key by key (a null
    value removes that key): they are write-only, so a client cannot read a key back to send it again
    with the one it changes. ``{}`` (or null) clears them; with a change of protocol the credentials
    given replace the stored ones as a whole (those were for the old protocol)."""
    known_object(body, UPDATE_KEYS)
    old_protocol = protocol
    version = body.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise InvalidInput("version", "must be an integer")
    if body.get("protocol") is not None:
        new_protocol = parse_protocol(body["protocol"])
        if new_protocol is not protocol and body.get("settings") is None:
            raise InvalidInput("settings", f"is required to change the protocol to {new_protocol.value}", "missing")
        protocol = new_protocol
    settings = parse_settings(protocol, body["settings"], limits) if body.get("settings") is not None else None
    retry = parse_retry(body["retry"]) if "retry" in body else None
    credentials = None
    if "credentials" in body:
        raw = body["credentials"]  # null clears them, like {}
        if isinstance(raw, dict) and raw and protocol is old_protocol:
            raw = _merged(stored_credentials, raw)
        credentials = parse_credentials(protocol, {} if raw is None else raw, limits)
    return TargetFields(None, settings, retry, credentials, version)


def kept_credentials(
    stored: Mapping[str, str], old: Protocol, new: Protocol, limits: LimitSettings
) -> Mapping[str, str]:
    """The stored credentials, kept by an update that names none: they must fit the (maybe new)
    protocol, and never become an HTTP target's headers after a change of protocol (any name makes a
    header: an AMQP password would go to the new URL as a ``password:`` header)."""
    if new is not old and stored and CREDENTIAL_KEYS[new] is None:
        raise InvalidInput(
            "credentials",
            f"the stored credentials are the {old.value} target's: give the {new.value} target's "
            "(sent as headers), or {} for none",
        )
    return parse_credentials(new, dict(stored), limits)


def _merged(stored: Mapping[str, str], given: dict[str, Any]) -> dict[str, Any]:
    """``stored`` with ``given``'s keys set, or removed where their value is null."""
    merged: dict[str, Any] = dict(stored)
    for key, value in given.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def parse_protocol(value: Any) -> Protocol:
    try:
        return Protocol(value)
    except ValueError:
        raise InvalidInput("protocol", f"must be one of {', '.join(p.value for p in Protocol)}") from None


# ---- settings, per protocol ---------------------------------------------------------------------


def parse_settings(protocol: Protocol, raw: Any, limits: LimitSettings) -> TargetSettings:
    if not isinstance(raw, dict):
        raise InvalidInput("settings", f"must be an object (the {protocol.value} settings)")
    shape = TARGET_SETTINGS_SHAPES[protocol.value]
    unknown = set(raw) - set(shape.model_fields)
    if unknown:
        raise InvalidInput(f"settings.{sorted(unknown)[0]}", f"not a {protocol.value} setting", "unknown_field")
    for name, field in shape.model_fields.items():
        if field.is_required() and name not in raw:
            raise InvalidInput(f"settings.{name}", "is required", "missing")
    settings: TargetSettings
    if protocol is Protocol.HTTP:
        settings = _http(raw, limits)
    elif protocol is Protocol.GRPC:
        settings = GrpcTarget(
            _string(raw, "address", shape),
            _bool(raw, "tls", False),
            _optional_int(raw, "deadline_ms", shape),
        )
    elif protocol is Protocol.AMQP:
        settings = AmqpTarget(
            _string(raw, "url", shape),
            _string(raw, "exchange", shape, allow_empty=True),
            _string(raw, "routing_key", shape, allow_empty=True, default=""),
            _bool(raw, "persistent", True),
            _bool(raw, "mandatory", True),
        )
    elif protocol is Protocol.NATS:
        servers = raw["servers"]
        bound = _max_len(shape, "servers")
        if not isinstance(servers, list) or not 1 <= len(servers) <= bound:
            raise InvalidInput("settings.servers", f"must be a list of 1..{bound} server URLs")
        for i, server in enumerate(servers):
            if not isinstance(server, str) or not server or len(server) > limits.max_url_chars:
                raise InvalidInput(f"settings.servers[{i}]", "must be a nats:// or tls:// URL")
        subject = _string(raw, "subject", shape)
        if not all(_NATS_TOKEN.fullmatch(token) for token in subject.split(".")):
            raise InvalidInput("settings.subject", "must be dot-separated tokens without spaces or wildcards")
        stream = raw.get("stream")
        if stream is not None and (not isinstance(stream, str) or not _STREAM_NAME.fullmatch(stream)):
            raise InvalidInput("settings.stream", "must be a stream name (no spaces, '.', '*', '>', '/' or '\\')")
        settings = NatsTarget(tuple(servers), subject, stream)
    else:
        settings = RedisStreamTarget(
            _string(raw, "url", shape),
            _string(raw, "stream", shape),
            _optional_int(raw, "maxlen", shape),
        )
    try:
        addresses_of(settings)  # the broker URL / host:port forms (the allow-list is the caller's check)
    except AddressRefused as refused:
        raise InvalidInput(refused.field or "settings", refused.reason) from None
    return settings


_HTTP_URLS = UrlRules("settings", MAX_TARGET_URLS, "give exactly one of url or urls", "URLs must be distinct")


def _http(raw: dict[str, Any], limits: LimitSettings) -> HttpTarget:
    urls = check_urls(raw, _HTTP_URLS, limits)
    method = raw.get("method", "POST")
    if not isinstance(method, str) or method.upper() not in _METHODS:
        raise InvalidInput("settings.method", f"must be one of {', '.join(sorted(_METHODS))} (a target sends a body)")
    headers = check_headers(raw.get("headers", {}), "settings.headers", limits)
    timeout_ms = _optional_int(raw, "timeout_ms", TARGET_SETTINGS_SHAPES["http"])
    return HttpTarget(tuple(urls), method.upper(), MappingProxyType(dict(headers)), timeout_ms)


def _string(
    raw: dict[str, Any], key: str, shape: type[BaseModel], *, allow_empty: bool = False, default: str | None = None
) -> str:
    value = raw.get(key, default)
    bound = _max_len(shape, key)
    if not isinstance(value, str) or (not value and not allow_empty) or len(value) > bound or _CONTROL.search(value):
        empty = "" if allow_empty else "non-empty "
        raise InvalidInput(f"settings.{key}", f"must be a {empty}string of at most {bound} characters")
    return value


def _bool(raw: dict[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise InvalidInput(f"settings.{key}", "must be true or false")
    return value


def _optional_int(raw: dict[str, Any], key: str, shape: type[BaseModel], prefix: str = "settings") -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    low, high = _int_bounds(shape, key)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{prefix}.{key}", f"must be an integer within {low}..{high}")
    return value


def _int_bounds(shape: type[BaseModel], key: str) -> tuple[int, int]:
    metadata = shape.model_fields[key].metadata
    low = next(m.ge for m in metadata if isinstance(m, Ge))
    high = next(m.le for m in metadata if isinstance(m, Le))
    return int(low), int(high)  # type: ignore[call-overload]


def _max_len(shape: type[BaseModel], key: str) -> int:
    return int(next(m.max_length for m in shape.model_fields[key].metadata if isinstance(m, MaxLen)))


# ---- retry and credentials ----------------------------------------------------------------------


def parse_retry(raw: Any) -> RetryPolicy:
    if raw is None:
        return RetryPolicy()
    if not isinstance(raw, dict):
        raise InvalidInput("retry", "must be an object")
    unknown = set(raw) - set(TargetRetry.model_fields)
    if unknown:
        raise InvalidInput(f"retry.{sorted(unknown)[0]}", "unknown field", "unknown_field")
    values = {key: _optional_int(raw, key, TargetRetry, "retry") for key in TargetRetry.model_fields}
    policy = RetryPolicy(**values)
    base, most = policy.backoff_base_ms, policy.backoff_max_ms
    if base is not None and most is not None and most < base:
        raise InvalidInput("retry.backoff_max_ms", "must be at least backoff_base_ms")
    return policy


def parse_credentials(protocol: Protocol, raw: Any, limits: LimitSettings) -> Mapping[str, str]:
    """The credentials of a ``protocol`` target. A refusal names the key, never the value."""
    if not isinstance(raw, dict):
        raise InvalidInput("credentials", "must be an object of string values")
    if not raw:
        return NO_CREDENTIALS
    allowed = CREDENTIAL_KEYS[protocol]
    if allowed is None:
        check_headers(raw, "credentials", limits)  # sent as headers
    else:
        unknown = set(raw) - allowed
        if unknown:
            raise InvalidInput(
                f"credentials.{sorted(unknown)[0]}",
                f"a {protocol.value} target takes {', '.join(sorted(allowed))}",
                "unknown_field",
            )
        for key, value in raw.items():
            if not isinstance(value, str) or not value or len(value) > MAX_HEADER_VALUE_CHARS or _CONTROL.search(value):
                raise InvalidInput(
                    f"credentials.{key}",
                    f"must be a non-empty string of at most {MAX_HEADER_VALUE_CHARS} characters without control "
                    "characters",
                )
        if protocol is Protocol.NATS and "token" in raw and set(raw) & {"username", "password"}:
            raise InvalidInput(
                "credentials.token", "give a token or a username and password, not both (null removes a stored key)"
            )
    return MappingProxyType(dict(raw))
