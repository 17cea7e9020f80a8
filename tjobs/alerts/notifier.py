"""Which notifications a rule's findings call for, given what was notified before (pure: ``now_ms`` in).

Per rule and subject (the dedup key) one :class:`tjobs.stores.contracts.alerts.AlertState` is kept:

- a subject that fires and had no state, or a resolved one: a new firing state, ``firing`` sent;
- a subject still firing: nothing, until ``repeat_s`` has passed since the last notification (0:
  never), then ``firing`` again (``repeat``); at once when the last firing notification reached no
  channel (``notified_at_ms`` is :data:`UNSENT`);
- a subject firing before and not found now: ``resolved`` sent, the state kept as resolved;
- evaluation that could not read its figures (``findings`` ``None``): nothing changes.

Each change is a :class:`Step`: the new state and the version it replaces. The evaluator writes the
state by compare-and-set first and sends only when its write landed, so of two evaluators (a leader
change) one sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tjobs.alerts.channels import Notification
from tjobs.alerts.rules import Finding, Rule
from tjobs.stores.contracts.alerts import AlertState

UNSENT = 0
"""``notified_at_ms`` of a firing state whose notification reached no channel: sent again next pass."""


@dataclass(frozen=True, slots=True)
class Step:
    state: AlertState
    expected_version: int | None
    notification: Notification


def _notification(rule: Rule, state: AlertState, now_ms: int, repeat: bool = False) -> Notification:
    return Notification(
        rule.id,
        rule.name,
        rule.kind,
        rule.app_id,
        state.subject,
        state.status,
        state.summary,
        state.since_ms,
        now_ms,
        repeat,
    )


def decide(rule: Rule, findings: Sequence[Finding] | None, states: Mapping[str, AlertState], now_ms: int) -> list[Step]:
    """The steps for ``rule`` whose subjects fire as ``findings`` say, given its ``states`` by subject."""
    if findings is None:
        return []
    steps: list[Step] = []
    found = {finding.subject: finding for finding in findings}
    for subject, finding in found.items():
        state = states.get(subject)
        if state is None or state.status == "resolved":
            new = AlertState(
                rule.id,
                subject,
                rule.app_id,
                "firing",
                since_ms=now_ms,
                notified_at_ms=now_ms,
                summary=finding.summary,
                version=1 if state is None else state.version + 1,
                extra=dict(finding.extra),
            )
            steps.append(Step(new, None if state is None else state.version, _notification(rule, new, now_ms)))
        elif state.notified_at_ms == UNSENT or (
            rule.repeat_s > 0 and now_ms - state.notified_at_ms >= rule.repeat_s * 1000
        ):
            new = replace(
                state, notified_at_ms=now_ms, summary=finding.summary, version=state.version + 1, extra=finding.extra
            )
            repeat = state.notified_at_ms != UNSENT
            steps.append(Step(new, state.version, _notification(rule, new, now_ms, repeat=repeat)))
    for subject, state in states.items():
        if subject not in found and state.status == "firing":
            new = replace(
                state, status="resolved", resolved_at_ms=now_ms, notified_at_ms=now_ms, version=state.version + 1
            )
            steps.append(Step(new, state.version, _notification(rule, new, now_ms)))
    return steps
