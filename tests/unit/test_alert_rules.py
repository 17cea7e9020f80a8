"""Alert rules: parsed with every bad field named, evaluated purely from the figures and ``now``."""

from __future__ import annotations

from typing import Any

import pytest

from tjobs.alerts.rules import Figures, Finding, Rule, SloVerdict, evaluate, parse_rule
from tjobs.errors import InvalidInput

NOW = 1_800_000_000_000
MIN = 60_000


def rule(kind: str, app_id: str | None = "a", **params: Any) -> Rule:
    return parse_rule("rule_0", app_id, {"name": "r", "kind": kind, "params": params})


SLO_OK = SloVerdict(p99_met=True, reach_met=True)
SLO_LATE = SloVerdict(p99_met=False, reach_met=True, p99_label="≤ 2.5 s", reach_ratio=1.0)

CASES: list[tuple[str, Rule, Figures, list[str] | None]] = [
    ("dead letters under the threshold", rule("dead_letters", threshold=5), Figures(dead={("a", 5): 4}), []),
    ("dead letters at the threshold", rule("dead_letters", threshold=5), Figures(dead={("a", 5): 5}), ["dead_letters"]),
    (
        "a global rule sums every app",
        rule("dead_letters", None, threshold=1),
        Figures(dead={(None, 5): 3}),
        ["dead_letters"],
    ),
    ("dead letters not read: unknown", rule("dead_letters", threshold=1), Figures(), None),
    ("service levels met", rule("slo_missed", window="1h"), Figures(slo={("a", "1h"): SLO_OK}), []),
    ("p99 lateness missed", rule("slo_missed", window="1h"), Figures(slo={("a", "1h"): SLO_LATE}), ["slo"]),
    (
        "another window's verdict is not this rule's",
        rule("slo_missed", window="5m"),
        Figures(slo={("a", "1h"): SLO_LATE}),
        None,
    ),
    (
        "a pool with enough executors",
        rule("pool_executors", pool="p", min_executors=2),
        Figures(pools={("a", "p"): 2}),
        [],
    ),
    (
        "a pool short of executors",
        rule("pool_executors", pool="p", min_executors=2),
        Figures(pools={("a", "p"): 1}),
        ["pool:p"],
    ),
    ("every node healthy", rule("node_down", None), Figures(nodes=[("n1", True), ("n2", True)]), []),
    ("an unhealthy node", rule("node_down", None), Figures(nodes=[("n1", True), ("n2", False)]), ["node:n2"]),
    (
        "fewer nodes than wanted",
        rule("node_down", None, min_nodes=3),
        Figures(nodes=[("n1", True), ("n2", True)]),
        ["nodes"],
    ),
    ("database servers answer", rule("database_unhealthy", None), Figures(servers=[("db1:3306", True, None)]), []),
    (
        "a server that does not answer",
        rule("database_unhealthy", None),
        Figures(servers=[("db1:3306", True, None), ("db2:3306", False, "refused")]),
        ["server:db2:3306"],
    ),
    (
        "a young move",
        rule("shard_move_stuck", None, max_minutes=30),
        Figures(moves=[(3, "copying", NOW - 29 * MIN)]),
        [],
    ),
    (
        "a stuck move",
        rule("shard_move_stuck", None, max_minutes=30),
        Figures(moves=[(3, "copying", NOW - 31 * MIN)]),
        ["move:3"],
    ),
    ("moves not read: unknown", rule("shard_move_stuck", None), Figures(), None),
]


@pytest.mark.parametrize(("case", "the_rule", "figures", "subjects"), CASES, ids=[case[0] for case in CASES])
def test_a_rule_fires_on_exactly_the_subjects_its_figures_call_for(
    case: str, the_rule: Rule, figures: Figures, subjects: list[str] | None
) -> None:
    found = evaluate(the_rule, figures, NOW)
    assert (None if found is None else [finding.subject for finding in found]) == subjects
    assert all(isinstance(finding, Finding) and finding.summary for finding in found or [])


BAD: list[tuple[str | None, dict[str, Any], str]] = [
    ("a", {"kind": "dead_letters", "params": {"threshold": 1}}, "name"),
    ("a", {"name": "x", "kind": "nope"}, "kind"),
    ("a", {"name": "x", "kind": "dead_letters", "params": {}}, "params.threshold"),
    ("a", {"name": "x", "kind": "dead_letters", "params": {"threshold": 0}}, "params.threshold"),
    ("a", {"name": "x", "kind": "dead_letters", "params": {"threshold": True}}, "params.threshold"),
    ("a", {"name": "x", "kind": "dead_letters", "params": {"threshold": 1, "colour": 2}}, "params.colour"),
    ("a", {"name": "x", "kind": "dead_letters", "params": []}, "params"),
    ("a", {"name": "x", "kind": "slo_missed", "params": {"window": "2h"}}, "params.window"),
    ("a", {"name": "x", "kind": "pool_executors", "params": {"pool": "Bad Name"}}, "params.pool"),
    (None, {"name": "x", "kind": "pool_executors", "params": {"pool": "p"}}, "kind"),
    ("a", {"name": "x", "kind": "node_down"}, "kind"),
    ("a", {"name": "x", "kind": "database_unhealthy"}, "kind"),
    (None, {"name": "x", "kind": "node_down", "channels": "c"}, "channels"),
    (None, {"name": "x", "kind": "node_down", "repeat_s": -1}, "repeat_s"),
    (None, {"name": "x", "kind": "node_down", "enabled": "yes"}, "enabled"),
    (None, {"name": "x", "kind": "node_down", "colour": 1}, "colour"),
]


@pytest.mark.parametrize(("app_id", "body", "field"), BAD, ids=[case[2] + "-" + str(i) for i, case in enumerate(BAD)])
def test_a_bad_rule_is_refused_naming_the_field(app_id: str | None, body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_rule("rule_0", app_id, body)
    assert refused.value.field == field


def test_a_change_keeps_what_it_does_not_name_and_never_the_kind() -> None:
    stored = rule("dead_letters", threshold=5)
    changed = parse_rule("rule_0", "a", {"repeat_s": 0}, partial_of=stored)
    assert changed.params == stored.params and changed.repeat_s == 0
    with pytest.raises(InvalidInput) as refused:
        parse_rule("rule_0", "a", {"kind": "slo_missed"}, partial_of=stored)
    assert refused.value.field == "kind"


def test_a_whole_number_written_with_a_fraction_is_an_integer_as_json_schema_says() -> None:
    parsed = parse_rule(
        "rule_0", "a", {"name": "x", "kind": "dead_letters", "params": {"threshold": 3.0}, "repeat_s": 60.0}
    )
    assert parsed.params["threshold"] == 3 and parsed.repeat_s == 60
    assert isinstance(parsed.params["threshold"], int) and isinstance(parsed.repeat_s, int)
