"""A flow's retry budget, worked out once per combination: the same answer as field by field."""

from __future__ import annotations

import itertools

from tjobs.targets.model import RetryBudget, RetryPolicy, pick_budget, retry_budget

DEFAULTS = RetryBudget(max_attempts=8, max_age_s=86_400, backoff_base_ms=1000, backoff_max_ms=3_600_000)
POLICIES = (
    RetryPolicy(),
    RetryPolicy(max_attempts=3),
    RetryPolicy(max_attempts=20, max_age_s=60),
    RetryPolicy(backoff_base_ms=50, backoff_max_ms=500),
    RetryPolicy(max_attempts=1, max_age_s=10**6, backoff_base_ms=5000, backoff_max_ms=10),
)


def field_by_field(attempts: int | None, age_s: int | None, policies: tuple[RetryPolicy, ...]) -> RetryBudget:
    return RetryBudget(
        pick_budget(attempts, policies, "max_attempts", DEFAULTS.max_attempts),
        pick_budget(age_s, policies, "max_age_s", DEFAULTS.max_age_s),
        pick_budget(None, policies, "backoff_base_ms", DEFAULTS.backoff_base_ms),
        pick_budget(None, policies, "backoff_max_ms", DEFAULTS.backoff_max_ms),
    )


def test_the_budget_is_the_tasks_values_else_the_largest_of_its_targets_else_the_nodes() -> None:
    combinations = [()] + [c for n in (1, 2, 3) for c in itertools.permutations(POLICIES, n)]
    for policies in combinations:
        for attempts, age_s in itertools.product((None, 2), (None, 30)):
            assert retry_budget(attempts, age_s, policies, DEFAULTS) == field_by_field(attempts, age_s, policies)


def test_a_target_without_overrides_leaves_the_nodes_defaults() -> None:
    assert retry_budget(None, None, (RetryPolicy(), RetryPolicy()), DEFAULTS) == DEFAULTS
    assert retry_budget(5, None, (), DEFAULTS) == DEFAULTS._replace(max_attempts=5)


def test_other_defaults_give_another_budget() -> None:
    other = DEFAULTS._replace(max_attempts=2)
    assert retry_budget(None, None, (), DEFAULTS).max_attempts == 8
    assert retry_budget(None, None, (), other).max_attempts == 2
