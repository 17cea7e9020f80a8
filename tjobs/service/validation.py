"""Validation of the parts of a task request that are not its schedule: callback, payload, policies.

The callback's keys, methods, number of targets and budget bounds are read from its request shape
(:class:`tjobs.wire.CallbackRequest`); what validation adds is what JSON Schema cannot say (the URL
model, header names, reserved headers, the configured limits) and the field-named errors. Every
rejection is :class:`tjobs.errors.InvalidInput` naming the field by its dotted path, so the API
answers 422 with that field and nothing is stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

import orjson
from annotated_types import Ge, Le, MaxLen
from pydantic.fields import FieldInfo

from tjobs.errors import InvalidInput
from tjobs.model import DeliveryMode, MisfirePolicy
from tjobs.settings import LimitSettings
from tjobs.specs import CallbackSpec, FixedDelaySpec, ScheduleSpec, callback_to_json
from tjobs.specs.pool import parse_pool_route
from tjobs.targets.urls import UrlRefused, parse_callback_url
from tjobs.wire import MAX_HEADER_VALUE_CHARS, TARGET_NAME_PATTERN, CallbackBudget, CallbackRequest, Method

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: refused in names, keys and header values
_HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # the same, but HTAB is allowed
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_RESERVED_PREFIXES = ("webhook-", "tjobs-")
_TARGET_NAME = re.compile(TARGET_NAME_PATTERN)


def _int_bounds(field: FieldInfo) -> tuple[int, int]:
    low = next(m.ge for m in field.metadata if isinstance(m, Ge))
    high = next(m.le for m in field.metadata if isinstance(m, Le))
    return int(low), int(high)  # type: ignore[call-overload]


# what tjobs.wire declares: the keys, the methods, the number of targets and the budget's bounds
CALLBACK_KEYS = frozenset(CallbackRequest.model_fields)
CALLBACK_METHODS = frozenset(get_args(Method))
MAX_TARGETS = next(m.max_length for m in CallbackRequest.model_fields["urls"].metadata if isinstance(m, MaxLen))
BUDGET_BOUNDS: dict[str, tuple[int, int]] = {
    name: _int_bounds(field) for name, field in CallbackBudget.model_fields.items()
}
RUN_TIMEOUT_BOUNDS = _int_bounds(CallbackRequest.model_fields["run_timeout_ms"])


def normalize_callback(spec: Any, limits: LimitSettings) -> dict[str, Any]:
    """The stored JSON of :func:`parse_callback_request`'s spec."""
    return callback_to_json(parse_callback_request(spec, limits))


def parse_callback_request(spec: Any, limits: LimitSettings) -> CallbackSpec:
    """Validate a callback request and return its canonical spec (``urls`` always a tuple)."""
    if not isinstance(spec, dict):
        raise InvalidInput("callback", "must be an object")
    unknown = set(spec) - CALLBACK_KEYS
    if unknown:
        raise InvalidInput(f"callback.{sorted(unknown)[0]}", "unknown field", "unknown_field")
    if "pool" in spec:
        return _parse_pool_callback(spec, limits)
    if "target" in spec or "targets" in spec:
        return _parse_target_callback(spec, limits)
    urls = check_urls(spec, _CALLBACK_URLS, limits)
    method = spec.get("method", "POST")
    if not isinstance(method, str) or method.upper() not in CALLBACK_METHODS:
        raise InvalidInput("callback.method", f"must be one of {', '.join(sorted(CALLBACK_METHODS))}")
    headers = check_headers(spec.get("headers", {}), "callback.headers", limits)
    body = _body(spec, limits)
    budget = _budget(spec)
    _run_on_publish(spec, 0)
    return CallbackSpec(
        tuple(urls),
        method.upper(),
        headers,
        body,
        budget.get("timeout_ms"),
        budget.get("max_attempts"),
        budget.get("max_age_s"),
        run_timeout_ms=_run_timeout(spec),
    )


def _parse_target_callback(spec: dict[str, Any], limits: LimitSettings) -> CallbackSpec:
    """A callback naming the app's targets: ``target`` (one) or ``targets`` (multicast), with an
    optional ``body`` and explicit budget. Inline URLs cannot be mixed in (a URL that should sit beside
    targets becomes an HTTP target), and the method and headers are the targets' own. Whether each
    name exists is the caller's check (:meth:`tjobs.service.targets.TargetService.check_named`)."""
    if "target" in spec and "targets" in spec:
        raise InvalidInput("callback.target", "give exactly one of target (unicast) or targets (multicast)")
    for inline in ("url", "urls", "method", "headers"):
        if inline in spec:
            raise InvalidInput(
                f"callback.{inline}",
                "not with target(s): a named target carries its own address, method and headers",
                "target_conflict",
            )
    if "target" in spec:
        names = [_target_name(spec["target"], "callback.target")]
    else:
        raw = spec["targets"]
        if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_TARGETS:
            raise InvalidInput("callback.targets", f"must be a list of 1..{MAX_TARGETS} target names")
        names = [_target_name(name, f"callback.targets[{i}]") for i, name in enumerate(raw)]
        if len(set(names)) != len(names):
            raise InvalidInput("callback.targets", "targets must be distinct")
    budget = _budget(spec)
    return CallbackSpec(
        (),
        "POST",
        {},
        _body(spec, limits),
        budget.get("timeout_ms"),
        budget.get("max_attempts"),
        budget.get("max_age_s"),
        tuple(names),
        run_timeout_ms=_run_timeout(spec),
        run_on_publish=_run_on_publish(spec, len(names)),
    )


def _parse_pool_callback(spec: dict[str, Any], limits: LimitSettings) -> CallbackSpec:
    """A callback naming one of the app's executor pools (:mod:`tjobs.specs.pool`), with the method,
    headers, body and budget of an inline callback; no URL or target beside it. Whether the pool has
    executors is not checked here: they may come later, and a fire with none waits for them."""
    for other in ("url", "urls", "target", "targets"):
        if other in spec:
            raise InvalidInput(
                f"callback.{other}", "not with pool: the pool's executors are the destinations", "pool_conflict"
            )
    route = parse_pool_route(spec["pool"])
    _run_on_publish(spec, 0)
    method = spec.get("method", "POST")
    if not isinstance(method, str) or method.upper() not in CALLBACK_METHODS:
        raise InvalidInput("callback.method", f"must be one of {', '.join(sorted(CALLBACK_METHODS))}")
    budget = _budget(spec)
    return CallbackSpec(
        (),
        method.upper(),
        check_headers(spec.get("headers", {}), "callback.headers", limits),
        _body(spec, limits),
        budget.get("timeout_ms"),
        budget.get("max_attempts"),
        budget.get("max_age_s"),
        pool=route,
        run_timeout_ms=_run_timeout(spec),
    )


def _target_name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _TARGET_NAME.fullmatch(value):
        raise InvalidInput(field, "must be a target name (letters, digits, '.', '_', '-'; at most 64)")
    return value


def _body(spec: dict[str, Any], limits: LimitSettings) -> str | None:
    body = spec.get("body")
    if body is not None:
        if not isinstance(body, str):
            raise InvalidInput("callback.body", "must be a string (the raw request body)")
        if len(body.encode()) > limits.max_payload_bytes:
            raise InvalidInput("callback.body", f"larger than {limits.max_payload_bytes} bytes")
    return body


def _run_timeout(spec: dict[str, Any]) -> int | None:
    value = spec.get("run_timeout_ms")
    if value is None:
        return None
    low, high = RUN_TIMEOUT_BOUNDS
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput("callback.run_timeout_ms", f"must be an integer within {low}..{high}")
    return value


def _run_on_publish(spec: dict[str, Any], targets: int) -> bool:
    """``run_on_publish``: a boolean, true only for a callback naming one target (whether that target is
    a broker's is the caller's check, :meth:`tjobs.service.targets.TargetService.check_named`)."""
    value = spec.get("run_on_publish", False)
    if type(value) is not bool:
        raise InvalidInput("callback.run_on_publish", "must be true or false")
    if value and targets != 1:
        raise InvalidInput(
            "callback.run_on_publish",
            "needs exactly one named target of a broker (amqp, nats, redis_stream): an HTTP receiver or an "
            "executor accepts a run by its answer (202 with tjobs-run: accepted)",
            "broker_run",
        )
    return value


def _budget(spec: dict[str, Any]) -> dict[str, int]:
    budget: dict[str, int] = {}
    for key, (low, high) in BUDGET_BOUNDS.items():
        if key in spec:
            value = spec[key]
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InvalidInput(f"callback.{key}", f"must be an integer within {low}..{high}")
            budget[key] = value
    return budget


def check_headers(headers: Any, field: str, limits: LimitSettings) -> dict[str, str]:
    """Custom request headers: valid names, none that tjobs sets itself, values without control
    characters (a refusal names the header, never quotes its value)."""
    if not isinstance(headers, dict):
        raise InvalidInput(field, "must be an object of string values")
    if len(headers) > limits.max_headers:
        raise InvalidInput(field, f"at most {limits.max_headers} custom headers")
    for name, value in headers.items():
        named = f"{field}.{name}"
        if not _HEADER_NAME.match(name):
            raise InvalidInput(named, "not a valid header name")
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered.startswith(_RESERVED_PREFIXES):
            raise InvalidInput(named, "reserved header; tjobs sets it")
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE_CHARS or _HEADER_VALUE_FORBIDDEN.search(value):
            raise InvalidInput(
                named, f"must be a string of at most {MAX_HEADER_VALUE_CHARS} characters without control characters"
            )
    return headers


@dataclass(frozen=True)
class UrlRules:
    """How a request gives its URLs: ``url``, or ``urls`` (a list of 1..``most``, none twice), in the object
    at ``where``; ``neither_or_both`` and ``repeated`` are the refusals' messages."""

    where: str
    most: int
    neither_or_both: str
    repeated: str


_CALLBACK_URLS = UrlRules(
    "callback",
    MAX_TARGETS,
    "give exactly one of url (unicast) or urls (multicast), or target(s)",
    "targets must be distinct",
)


def check_urls(spec: Mapping[str, Any], rules: UrlRules, limits: LimitSettings) -> list[str]:
    """The URLs ``spec`` gives as ``rules`` say, each one :func:`check_url` accepts; a refusal names
    ``<where>.url``, ``<where>.urls`` or ``<where>.urls[i]``."""
    where = rules.where
    if ("url" in spec) == ("urls" in spec):
        raise InvalidInput(f"{where}.url", rules.neither_or_both)
    if "url" in spec:
        return [_url(spec["url"], f"{where}.url", limits)]
    listed = spec["urls"]
    if not isinstance(listed, list) or not 1 <= len(listed) <= rules.most:
        raise InvalidInput(f"{where}.urls", f"must be a list of 1..{rules.most} URLs")
    urls = [_url(url, f"{where}.urls[{i}]", limits) for i, url in enumerate(listed)]
    if len(set(urls)) != len(urls):
        raise InvalidInput(f"{where}.urls", rules.repeated)
    return urls


def check_url(value: Any, field: str, limits: LimitSettings) -> str:
    """A callback URL (inline, or of an HTTP target) the URL model accepts, as given."""
    return _url(value, field, limits)


def _url(value: Any, field: str, limits: LimitSettings) -> str:
    """A callback URL the URL model (:func:`tjobs.targets.urls.parse_callback_url`) accepts, as given."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(field, "must be a non-empty string")
    if len(value) > limits.max_url_chars:
        raise InvalidInput(field, f"longer than {limits.max_url_chars} characters")
    try:
        parse_callback_url(value)
    except UrlRefused as refused:
        raise InvalidInput(field, refused.reason, refused.code) from None
    return value


def check_payload(payload: Any, limits: LimitSettings) -> None:
    size = len(orjson.dumps(payload))
    if size > limits.max_payload_bytes:
        raise InvalidInput("payload", f"{size} bytes is larger than {limits.max_payload_bytes}", "too_large")


def parse_misfire_policy(value: Any, default: MisfirePolicy) -> MisfirePolicy:
    if value is None:
        return default
    try:
        return MisfirePolicy(value)
    except ValueError:
        allowed = ", ".join(p.value for p in MisfirePolicy)
        raise InvalidInput("misfire_policy", f"must be one of {allowed}") from None


def check_fixed_delay_policy(schedule: ScheduleSpec, policy: MisfirePolicy) -> None:
    """A fixed_delay schedule has no backlog of instants to catch up on (each follows a run's end)."""
    if type(schedule) is FixedDelaySpec and policy is MisfirePolicy.CATCH_UP:
        raise InvalidInput(
            "misfire_policy",
            "catch_up does not apply to a fixed_delay schedule (use fire_now, fire_soon or skip)",
            "invalid_combination",
        )


def parse_delivery(value: Any) -> DeliveryMode:
    if value is None:
        return DeliveryMode.AT_LEAST_ONCE
    try:
        return DeliveryMode(value)
    except ValueError:
        allowed = ", ".join(m.value for m in DeliveryMode)
        raise InvalidInput("delivery", f"must be one of {allowed}") from None


def check_name(value: Any, field: str = "name", max_len: int = 200) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > max_len:
        raise InvalidInput(field, f"must be a non-empty string of at most {max_len} characters")
    if _CONTROL.search(value):
        raise InvalidInput(field, "must not contain control characters")
    return value


def check_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise InvalidInput("key", "must be a string of 1..200 characters")
    if _CONTROL.search(value):
        raise InvalidInput("key", "must not contain control characters")
    return value
