"""How a callback points at a pool: :class:`PoolRoute`, parsed once from the request and stored as JSON.

Request and stored form (``callback.pool``)::

    {"name": "workers", "mode": "one", "strategy": "round_robin", "hash_on": "task_id",
     "path": "/jobs/refresh", "shard_total": 8, "shard_params": ["a", "b", ...]}

Only ``name`` is required. ``mode``: ``one`` (default), ``one_per_zone``, ``all`` or ``sharded``.
``strategy`` (``one`` and ``one_per_zone``): ``round_robin`` (default), ``consistent_hash`` (on
``hash_on``: the task id, default, or the task's ``key``) or ``least_in_flight``. ``path`` is appended
to every executor's address. ``shard_total`` (1..1024) is required by ``sharded`` and refused
elsewhere; ``shard_params``, if given, has one string per item (item ``i`` gets ``shard_params[i]``).
``overlap`` (``allow``, default; ``skip_if_running``; ``queue_one``) says what a fire does while the
task's previous flow still runs (:class:`Overlap`; the deliverer keeps it by :mod:`tjobs.pools.overlap`).
The stored JSON leaves out what equals its default, so a route written once reads back the same.
A pool's name follows :func:`valid_pool_name` here and in the registry (:mod:`tjobs.service.pools`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from tjobs.errors import InvalidInput
from tjobs.wire import MAX_SHARD_TOTAL, POOL_NAME_PATTERN

MAX_SHARD_PARAM_CHARS = 1024
MAX_PATH_CHARS = 512
_PATH = re.compile(r"^/[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*$")
E = TypeVar("E", bound=StrEnum)
_POOL_NAME = re.compile(POOL_NAME_PATTERN)


def valid_pool_name(name: str) -> bool:
    return bool(_POOL_NAME.fullmatch(name))


POOL_KEY_PREFIX = "pool:"
"""A flow tracks its pool destinations as ``pool:<name>`` and, once expanded by the route's mode,
``pool:<name>@<zone>``, ``pool:<name>/<executor id>`` or ``pool:<name>#<item>``
(:mod:`tjobs.delivery.pool_dispatcher`)."""


def pool_key(pool: str) -> str:
    return POOL_KEY_PREFIX + pool


class Mode(StrEnum):
    ONE = "one"
    ONE_PER_ZONE = "one_per_zone"
    ALL = "all"
    SHARDED = "sharded"


class Strategy(StrEnum):
    ROUND_ROBIN = "round_robin"
    CONSISTENT_HASH = "consistent_hash"
    LEAST_IN_FLIGHT = "least_in_flight"


class HashOn(StrEnum):
    TASK_ID = "task_id"
    KEY = "key"


class Overlap(StrEnum):
    """What a fire does while its task's previous flow still runs (:mod:`tjobs.pools.overlap`)."""

    ALLOW = "allow"
    SKIP_IF_RUNNING = "skip_if_running"
    QUEUE_ONE = "queue_one"


@dataclass(frozen=True, slots=True)
class PoolRoute:
    pool: str
    mode: Mode = Mode.ONE
    strategy: Strategy = Strategy.ROUND_ROBIN
    hash_on: HashOn = HashOn.TASK_ID
    path: str = ""
    shard_total: int | None = None
    shard_params: tuple[str, ...] = ()
    overlap: Overlap = Overlap.ALLOW

    def url_of(self, address: str) -> str:
        """The callback URL for an executor at ``address``."""
        return address.rstrip("/") + self.path if self.path else address

    def to_json(self) -> dict[str, Any]:
        stored: dict[str, Any] = {"name": self.pool}
        if self.mode is not Mode.ONE:
            stored["mode"] = self.mode.value
        if self.strategy is not Strategy.ROUND_ROBIN:
            stored["strategy"] = self.strategy.value
        if self.hash_on is not HashOn.TASK_ID:
            stored["hash_on"] = self.hash_on.value
        if self.path:
            stored["path"] = self.path
        if self.shard_total is not None:
            stored["shard_total"] = self.shard_total
        if self.shard_params:
            stored["shard_params"] = list(self.shard_params)
        if self.overlap is not Overlap.ALLOW:
            stored["overlap"] = self.overlap.value
        return stored


_KEYS = frozenset({"name", "mode", "strategy", "hash_on", "path", "shard_total", "shard_params", "overlap"})


def parse_pool_route(raw: Any, field: str = "callback.pool") -> PoolRoute:
    """The route a request (or a stored row) gives; :class:`InvalidInput` naming the field otherwise."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, "must be an object with a pool name, or a pool name")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise InvalidInput(f"{field}.{unknown[0]}", "unknown field", "unknown_field")
    name = raw.get("name")
    if not isinstance(name, str) or not valid_pool_name(name):
        raise InvalidInput(f"{field}.name", "must be a pool name: lower-case letters, digits, '_', '.', '-' (1..63)")
    mode = _choice(raw, "mode", Mode, Mode.ONE, field)
    strategy = _choice(raw, "strategy", Strategy, Strategy.ROUND_ROBIN, field)
    hash_on = _choice(raw, "hash_on", HashOn, HashOn.TASK_ID, field)
    overlap = _choice(raw, "overlap", Overlap, Overlap.ALLOW, field)
    if mode in (Mode.ALL, Mode.SHARDED) and "strategy" in raw:
        raise InvalidInput(f"{field}.strategy", f"does not apply to mode {mode.value}")
    if strategy is not Strategy.CONSISTENT_HASH and "hash_on" in raw:
        raise InvalidInput(f"{field}.hash_on", "applies only to strategy consistent_hash")
    path = raw.get("path", "")
    if not isinstance(path, str) or len(path) > MAX_PATH_CHARS or (path and not _PATH.fullmatch(path)):
        raise InvalidInput(f"{field}.path", f"must be a URL path starting with '/' (at most {MAX_PATH_CHARS} chars)")
    shard_total = raw.get("shard_total")
    shard_params_raw = raw.get("shard_params")
    if mode is Mode.SHARDED:
        if not isinstance(shard_total, int) or isinstance(shard_total, bool) or not 1 <= shard_total <= MAX_SHARD_TOTAL:
            raise InvalidInput(f"{field}.shard_total", f"mode sharded needs an integer 1..{MAX_SHARD_TOTAL}")
    elif shard_total is not None or shard_params_raw is not None:
        name_given = "shard_total" if shard_total is not None else "shard_params"
        raise InvalidInput(f"{field}.{name_given}", "applies only to mode sharded")
    shard_params: tuple[str, ...] = ()
    if shard_params_raw is not None:
        if not isinstance(shard_params_raw, list) or len(shard_params_raw) != shard_total:
            raise InvalidInput(f"{field}.shard_params", "must be a list of one string per item (shard_total)")
        for index, param in enumerate(shard_params_raw):
            if not isinstance(param, str) or len(param) > MAX_SHARD_PARAM_CHARS or not _header_safe(param):
                raise InvalidInput(
                    f"{field}.shard_params[{index}]",
                    f"must be printable ASCII of at most {MAX_SHARD_PARAM_CHARS} chars (it travels as a header)",
                )
        shard_params = tuple(shard_params_raw)
    return PoolRoute(name, mode, strategy, hash_on, path, shard_total, shard_params, overlap)


def _header_safe(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _choice(raw: Mapping[str, Any], key: str, kind: type[E], default: E, field: str) -> E:
    value = raw.get(key)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise InvalidInput(f"{field}.{key}", f"must be one of {choices}") from None
