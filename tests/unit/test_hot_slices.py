"""Which Redis slice carries a task change, and how a change is written into it (pure)."""

from __future__ import annotations

import pytest

from tjobs.hot_tier.base import TaskChange, is_near
from tjobs.hot_tier.redis import MINUTE_MS, decode, encode, slice_minute

NOW_MS = 1_800_000_000_000 + 12_345  # 2027-01-15T08:00:12.345Z
MINUTE = NOW_MS // MINUTE_MS


@pytest.mark.parametrize(
    ("next_run_at_ms", "version", "minute"),
    [
        (NOW_MS + 1_000, 1, MINUTE),  # a new task due this minute
        (NOW_MS + 60_000, 1, MINUTE + 1),  # due next minute
        (NOW_MS + 4 * 60_000, 1, MINUTE + 4),  # read once its minute is next
        (NOW_MS - 90_000, 1, MINUTE),  # overdue: read at once
        (NOW_MS + 4 * 60_000, 2, MINUTE),  # an update: the owner moves its entry at once
        (None, 2, MINUTE),  # a stop: read at once, whenever the task was due
    ],
)
def test_a_new_task_travels_in_the_slice_of_its_instant_any_other_change_in_the_current_one(
    next_run_at_ms: int | None, version: int, minute: int
) -> None:
    assert slice_minute(TaskChange(7, "app", next_run_at_ms, version), NOW_MS) == minute


@pytest.mark.parametrize("next_run_at_ms", [NOW_MS + 1500, None])
def test_a_member_decodes_to_the_change_it_encodes(next_run_at_ms: int | None) -> None:
    change = TaskChange(249987461839595670, "app|with|bars", next_run_at_ms, 3)
    assert decode(encode(change, NOW_MS, "a1b2c3d4")) == (change, NOW_MS, "a1b2c3d4")


def test_a_malformed_member_is_refused() -> None:
    with pytest.raises(ValueError):
        decode("12|x|-|0|o|app")


def test_only_changes_a_wheel_could_hold_are_published() -> None:
    near_ms = 600_000
    assert is_near(TaskChange(1, "a", NOW_MS + 599_000, 1), NOW_MS, near_ms)
    assert not is_near(TaskChange(1, "a", NOW_MS + 600_000, 1), NOW_MS, near_ms)  # its cycle load finds it
    assert is_near(TaskChange(1, "a", NOW_MS + 900_000, 2), NOW_MS, near_ms)  # an update: cancel the old entry
    assert is_near(TaskChange(1, "a", None, 2), NOW_MS, near_ms)
