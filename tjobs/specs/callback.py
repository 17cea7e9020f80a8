"""A task's callback as a typed value: its destinations, the request to send, and its delivery budget.

The canonical form is what :func:`tjobs.service.validation.parse_callback_request` makes of a request
(one or many inline URLs as ``urls``, or one or many named targets as ``targets``, the method
upper-cased) and what the store keeps as JSON in the task's ``callback`` column::

    {"urls": [...], "method": "POST"[, "headers": {...}][, "body": "..."]
     [, "timeout_ms": n][, "max_attempts": n][, "max_age_s": n]}
    {"method": "POST"[, "body": "..."][, "timeout_ms": n][, "max_attempts": n][, "max_age_s": n],
     "targets": ["orders-mq", ...]}
    {"method": "POST"[, "headers": {...}]..., "pool": {"name": "workers"[, "mode": ...]}}

and each may end with ``"run_timeout_ms": n`` (how long a run the target accepts may take, README
"Job runs"; unset: the node's ``runs.timeout_ms``); a callback naming one broker target may end with
``"run_on_publish": true`` (the broker's acknowledgement starts a run, which its consumer ends by a
report: docs/targets.md "Runs from a broker"; false is not stored).

The JSON keys are the field names, in field order; ``headers``, ``urls`` and ``targets`` are left out
when empty and the other optional fields when unset, so :func:`callback_to_json` writes exactly the
bytes the store has always held for an inline callback. A callback has inline URLs, named targets
(:mod:`tjobs.targets`) or an executor pool (:mod:`tjobs.specs.pool`, stored by its ``to_json``): one
kind. An unset ``timeout_ms``, ``max_attempts`` or ``max_age_s`` takes the node's default
(:class:`tjobs.settings.CallbackSettings`) when the callback is sent, so a changed default applies to
existing tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from tjobs.specs.pool import PoolRoute, parse_pool_route

NO_HEADERS: Mapping[str, str] = MappingProxyType({})
LEGACY_URL = "url"  # a unicast target as some early rows (and requests) spell it


@dataclass(frozen=True, slots=True)
class CallbackSpec:
    """Immutable, so one parsed spec may serve every fire of its task (and of tasks stored alike)."""

    urls: tuple[str, ...]
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=lambda: NO_HEADERS)  # the task's own, read-only
    body: str | None = None  # sent verbatim instead of the JSON envelope
    timeout_ms: int | None = None
    max_attempts: int | None = None
    max_age_s: int | None = None
    targets: tuple[str, ...] = ()  # names of the app's targets (instead of urls); delivery resolves them
    pool: PoolRoute | None = None  # an executor pool of the app (instead of urls/targets; tjobs.specs.pool)
    run_timeout_ms: int | None = None  # a run the target accepts ends timed_out past it (None: the node's)
    run_on_publish: bool = False  # a publish its broker acknowledged starts a run (one broker target)

    def __post_init__(self) -> None:
        if type(self.urls) is not tuple:
            object.__setattr__(self, "urls", tuple(self.urls))
        if type(self.targets) is not tuple:
            object.__setattr__(self, "targets", tuple(self.targets))
        if type(self.headers) is not MappingProxyType:
            object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)) if self.headers else NO_HEADERS)

    @property
    def sends_payload(self) -> bool:
        """Whether a fire's payload reaches the receiver: not when the callback sends its own ``body`` or
        is a ``GET`` (neither carries the JSON envelope), so a trigger's payload override is refused."""
        return self.body is None and self.method.upper() != "GET"


_FIELDS = tuple(f.name for f in fields(CallbackSpec))
_URLS = _FIELDS[0]
_OMITTED_WHEN_EMPTY = frozenset({"urls", "targets"})


def callback_to_json(spec: CallbackSpec) -> dict[str, Any]:
    """The stored JSON object of ``spec`` (see the module docstring for its keys and their order)."""
    stored: dict[str, Any] = {}
    for name in _FIELDS:  # per create twice (its answer, its row): no ABC isinstance checks
        value = getattr(spec, name)
        if value is None or value is False:
            continue
        if type(value) is tuple:
            if not value and name in _OMITTED_WHEN_EMPTY:
                continue
            value = list(value)
        elif type(value) is MappingProxyType:  # the headers (always one: CallbackSpec.__post_init__)
            if not value:
                continue
            value = dict(value)
        elif isinstance(value, PoolRoute):
            value = value.to_json()
        stored[name] = value
    return stored


def callback_from_json(stored: dict[str, Any]) -> CallbackSpec:
    """The spec of a stored callback object (trusted: it was validated when the task was registered).

    Unknown keys are ignored. A row with a single ``url`` (older rows) reads as one target; a row with
    no destination at all reads as ``urls=()`` and ``targets=()``, which delivery dead-letters as
    unusable instead of failing the fire that produced it.
    """
    values = {name: stored[name] for name in _FIELDS if stored.get(name) is not None}
    if "pool" in values:
        values["pool"] = parse_pool_route(values["pool"])
    if _URLS not in values:
        single = stored.get(LEGACY_URL)
        values[_URLS] = () if single is None else (single,)
    return CallbackSpec(**values)
