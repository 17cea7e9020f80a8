"""Alert rules and their pure evaluation: a rule and the observed :class:`Figures` in, the subjects
that fire now out. Nothing here reads a clock or a store; ``now_ms`` is passed in (house style 3).

=====================  =================================================  ====================================
kind                   fires when                                         subjects
=====================  =================================================  ====================================
``dead_letters``       ``threshold`` or more flows went dead in the last  ``dead_letters`` (one)
                       ``window_minutes`` (the app's; global: every app)
``slo_missed``         the service levels over ``window`` (``5m``,        ``slo`` (one)
                       ``1h``, ``1d``, ``7d``) miss an objective (p99
                       delivery lateness or reach)
``pool_executors``     pool ``pool`` has fewer than ``min_executors``     ``pool:<name>``
                       live executors (an app's rule only)
``node_down``          a member is unhealthy, or fewer than               ``node:<id>``, ``nodes``
                       ``min_nodes`` are live (global only)
``database_unhealthy`` a database server does not answer (global only)    ``server:<host:port>``
``shard_move_stuck``   a move has been in progress for more than          ``move:<database>``
                       ``max_minutes`` (global only)
=====================  =================================================  ====================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tjobs.errors import InvalidInput

RuleKind = Literal[
    "dead_letters", "slo_missed", "pool_executors", "node_down", "database_unhealthy", "shard_move_stuck"
]
RULE_KINDS: tuple[RuleKind, ...] = (
    "dead_letters",
    "slo_missed",
    "pool_executors",
    "node_down",
    "database_unhealthy",
    "shard_move_stuck",
)
GLOBAL_ONLY: frozenset[str] = frozenset({"node_down", "database_unhealthy", "shard_move_stuck"})
SLO_WINDOWS = ("5m", "1h", "1d", "7d")
MS_PER_MINUTE = 60_000
DEFAULT_REPEAT_S = 3600
MAX_REPEAT_S = 7 * 86_400
MAX_CHANNELS = 10
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
POOL_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: what to watch (``kind`` and ``params``), whom to tell (channel ids) and how often to
    repeat a notification while it still fires (``repeat_s``; 0: never). ``app_id`` ``None``: global."""

    id: str
    app_id: str | None
    name: str
    kind: RuleKind
    params: Mapping[str, Any]
    channels: tuple[str, ...]
    repeat_s: int = DEFAULT_REPEAT_S
    enabled: bool = True

    def document(self) -> dict[str, Any]:
        """What the store keeps (:class:`tjobs.stores.contracts.alerts.AlertSetting`'s document)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "params": dict(self.params),
            "channels": list(self.channels),
            "repeat_s": self.repeat_s,
            "enabled": self.enabled,
        }


@dataclass(frozen=True, slots=True)
class SloVerdict:
    """The service levels over a window, judged against their objectives."""

    p99_met: bool
    reach_met: bool
    p99_label: str | None = None
    reach_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class Figures:
    """What the cluster looks like now, as far as the rules being evaluated need it.

    ``dead`` by (app, window minutes) and ``slo`` by (app, window): ``None`` for the app is every app;
    ``pools`` live executors by (app, pool); ``nodes`` (id, healthy) of the live members; ``servers``
    (name, reachable, error); ``moves`` (database, step, started at ms) of the moves in progress.
    """

    dead: Mapping[tuple[str | None, int], int] = field(default_factory=dict)
    slo: Mapping[tuple[str | None, str], SloVerdict] = field(default_factory=dict)
    pools: Mapping[tuple[str, str], int] = field(default_factory=dict)
    nodes: Sequence[tuple[str, bool]] = ()
    servers: Sequence[tuple[str, bool, str | None]] = ()
    moves: Sequence[tuple[int, str, int]] | None = None  # None: not read (or could not be)


@dataclass(frozen=True, slots=True)
class Finding:
    """One subject of a rule that fires now, with what to say about it."""

    subject: str
    summary: str
    extra: Mapping[str, Any] = field(default_factory=dict)


# ---- parsing (a request's or a stored document's) ------------------------------------------------


def whole(value: Any) -> int | None:
    """``value`` as an integer when it is one (``3`` or ``3.0``, as JSON Schema counts), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None


def _int(params: Mapping[str, Any], name: str, low: int, high: int, default: int | None = None) -> int:
    value = whole(params.get(name, default))
    if value is None or not low <= value <= high:
        raise InvalidInput(f"params.{name}", f"must be an integer from {low} to {high}")
    return value


def parse_params(kind: str, raw: Any, app_id: str | None) -> dict[str, Any]:
    """The parameters of a rule of ``kind``, checked (422 naming ``params.<field>``)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidInput("params", "must be a JSON object")
    if kind in GLOBAL_ONLY and app_id is not None:
        raise InvalidInput("kind", f"{kind} rules are global: the admin key manages them")
    params: dict[str, Any]
    if kind == "dead_letters":
        params = {
            "threshold": _int(raw, "threshold", 1, 10_000_000),
            "window_minutes": _int(raw, "window_minutes", 1, 10_080, default=5),
        }
    elif kind == "slo_missed":
        window = raw.get("window", "1h")
        if window not in SLO_WINDOWS:
            raise InvalidInput("params.window", f"must be one of {', '.join(SLO_WINDOWS)}")
        params = {"window": window}
    elif kind == "pool_executors":
        if app_id is None:
            raise InvalidInput("kind", "pool_executors rules belong to an app: create it with the app's key")
        pool = raw.get("pool")
        if not isinstance(pool, str) or not POOL_PATTERN.fullmatch(pool):
            raise InvalidInput("params.pool", "must be a pool name (lower case letters, digits, _ . -)")
        params = {"pool": pool, "min_executors": _int(raw, "min_executors", 1, 100_000, default=1)}
    elif kind == "node_down":
        params = {"min_nodes": _int(raw, "min_nodes", 0, 10_000, default=0)}
    elif kind == "database_unhealthy":
        params = {}
    elif kind == "shard_move_stuck":
        params = {"max_minutes": _int(raw, "max_minutes", 1, 100_000, default=60)}
    else:
        raise InvalidInput("kind", f"must be one of {', '.join(RULE_KINDS)}")
    unknown = sorted(set(raw) - set(params))
    if unknown:
        raise InvalidInput(f"params.{unknown[0]}", f"is not a parameter of {kind} rules")
    return params


class _Documented(Protocol):
    """A rule or a channel, as :func:`merged_body` reads it."""

    @property
    def kind(self) -> str: ...

    def document(self) -> dict[str, Any]: ...


def merged_body(
    body: Any, partial_of: _Documented | None, known: set[str], what: str, kinds: Sequence[str]
) -> tuple[dict[str, Any], str, Any]:
    """A rule's or channel's request body over ``partial_of``'s document (its fields checked against
    ``known``), with its name and kind checked: ``(merged, name, kind)``. The kind cannot change."""
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    unknown = sorted(set(body) - known)
    if unknown:
        raise InvalidInput(unknown[0], f"is not a field of an alert {what}")
    merged = {**(partial_of.document() if partial_of is not None else {}), **body}
    name = merged.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidInput("name", "must be 1-64 letters, digits, _ . - (starting with a letter or digit)")
    kind = merged.get("kind")
    if kind not in kinds:
        raise InvalidInput("kind", f"must be one of {', '.join(kinds)}")
    if partial_of is not None and kind != partial_of.kind:
        raise InvalidInput("kind", f"cannot be changed: create another {what}")
    return merged, name, kind


def parse_rule(rule_id: str, app_id: str | None, body: Any, *, partial_of: Rule | None = None) -> Rule:
    """A rule from a request body (or, with ``partial_of``, that rule with the body's fields changed)."""
    known = {"name", "kind", "params", "channels", "repeat_s", "enabled"}
    merged, name, kind = merged_body(body, partial_of, known, "rule", RULE_KINDS)
    params = parse_params(kind, merged.get("params"), app_id)
    channels = merged.get("channels", [])
    if (
        not isinstance(channels, list)
        or len(channels) > MAX_CHANNELS
        or not all(isinstance(c, str) and 0 < len(c) <= 64 for c in channels)
    ):
        raise InvalidInput("channels", f"must be a list of at most {MAX_CHANNELS} channel ids")
    repeat_s = whole(merged.get("repeat_s", DEFAULT_REPEAT_S))
    if repeat_s is None or not 0 <= repeat_s <= MAX_REPEAT_S:
        raise InvalidInput("repeat_s", f"must be an integer from 0 (never repeat) to {MAX_REPEAT_S}")
    enabled = merged.get("enabled", True)
    if not isinstance(enabled, bool):
        raise InvalidInput("enabled", "must be true or false")
    return Rule(rule_id, app_id, name, kind, params, tuple(dict.fromkeys(channels)), repeat_s, enabled)


def rule_from_document(rule_id: str, app_id: str | None, document: Mapping[str, Any]) -> Rule:
    """A stored rule (its document was checked when it was written)."""
    return Rule(
        rule_id,
        app_id,
        document["name"],
        document["kind"],
        dict(document.get("params", {})),
        tuple(document.get("channels", ())),
        int(document.get("repeat_s", DEFAULT_REPEAT_S)),
        bool(document.get("enabled", True)),
    )


# ---- evaluation ---------------------------------------------------------------------------------


def dead_letter_window(rule: Rule) -> tuple[str | None, int]:
    """The key of ``Figures.dead`` a ``dead_letters`` rule reads."""
    return rule.app_id, int(rule.params["window_minutes"])


def evaluate(rule: Rule, figures: Figures, now_ms: int) -> list[Finding] | None:
    """The subjects of ``rule`` that fire now, given ``figures`` observed at ``now_ms``; ``None`` when
    ``figures`` lacks what the rule needs (it could not be read): nothing is known, so nothing fires
    and nothing that fires is resolved (an outage of the store is ``database_unhealthy``'s to report)."""
    params = rule.params
    if rule.kind == "dead_letters":
        dead = figures.dead.get(dead_letter_window(rule))
        threshold = int(params["threshold"])
        if dead is None or dead < threshold:
            return None if dead is None else []
        minutes = int(params["window_minutes"])
        return [
            Finding("dead_letters", f"{dead} dead letters in {minutes} min (threshold {threshold})", {"dead": dead})
        ]
    if rule.kind == "slo_missed":
        verdict = figures.slo.get((rule.app_id, str(params["window"])))
        if verdict is None or (verdict.p99_met and verdict.reach_met):
            return None if verdict is None else []
        missed = [
            *([f"p99 delivery lateness {verdict.p99_label or '?'} > 1 s"] if not verdict.p99_met else []),
            *([f"reach {verdict.reach_ratio:.4%} < 99.99 %"] if not verdict.reach_met else []),
        ]
        summary = f"service level missed over {params['window']}: " + "; ".join(missed)
        return [Finding("slo", summary, {"p99_met": verdict.p99_met, "reach_met": verdict.reach_met})]
    if rule.kind == "pool_executors":
        pool, needed = str(params["pool"]), int(params["min_executors"])
        live = figures.pools.get((rule.app_id or "", pool))
        if live is None or live >= needed:
            return None if live is None else []
        return [Finding(f"pool:{pool}", f"pool {pool} has {live} live executors (needs {needed})", {"live": live})]
    if rule.kind == "node_down":
        findings = [
            Finding(f"node:{node}", f"node {node} is unhealthy") for node, healthy in figures.nodes if not healthy
        ]
        live, needed = sum(1 for _, healthy in figures.nodes if healthy), int(params["min_nodes"])
        if figures.nodes and live < needed:
            findings.append(Finding("nodes", f"{live} healthy nodes (needs {needed})", {"live": live}))
        return findings
    if rule.kind == "database_unhealthy":
        return [
            Finding(f"server:{name}", f"database server {name} does not answer: {error or 'no answer'}")
            for name, reachable, error in figures.servers
            if not reachable
        ]
    if rule.kind == "shard_move_stuck":
        limit_ms = int(params["max_minutes"]) * MS_PER_MINUTE
        if figures.moves is None:
            return None
        return [
            Finding(
                f"move:{database}",
                f"move of logical database {database} at step {step} for {(now_ms - started) // MS_PER_MINUTE} min",
                {"step": step},
            )
            for database, step, started in figures.moves
            if started and now_ms - started > limit_ms
        ]
    return []
