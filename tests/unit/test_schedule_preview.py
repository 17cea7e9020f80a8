"""The schedule preview lists the instants the fire path will fire at: DST policies, bounds and max_fires."""

from __future__ import annotations

from datetime import datetime

import pytest

from tjobs.api.render import preview_json
from tjobs.clock import datetime_to_ms
from tjobs.schedules.parsing import schedule_of
from tjobs.schedules.preview import MAX_SKIPPED, TooFarAhead, preview
from tjobs.specs import AtSpec, CronSpec, DstGap, DstOverlap, IntervalSpec, ScheduleSpec


def ms(text: str) -> int:
    return datetime_to_ms(datetime.fromisoformat(text))


def local_times(spec: ScheduleSpec, now: str, count: int, from_: str | None = None) -> list[str]:
    shown = preview_json(spec, preview(spec, now_ms=ms(now), count=count, from_ms=None if from_ is None else ms(from_)))
    return [instant["local"] for instant in shown["instants"]]


@pytest.mark.parametrize(
    ("gap", "expected"),
    [
        (DstGap.SKIP, ["2026-03-07T02:30:00.000-05:00", "2026-03-09T02:30:00.000-04:00"]),
        (DstGap.SHIFT, ["2026-03-07T02:30:00.000-05:00", "2026-03-08T03:00:00.000-04:00"]),
    ],
)
def test_a_wall_time_in_a_spring_forward_gap_follows_the_gap_policy(gap: DstGap, expected: list[str]) -> None:
    spec = CronSpec("30 2 * * *", "America/New_York", dst_gap=gap)
    assert local_times(spec, "2026-03-07T00:00:00-05:00", 2) == expected


@pytest.mark.parametrize(
    ("overlap", "expected"),
    [
        (DstOverlap.ONCE, ["2026-11-01T01:30:00.000-04:00", "2026-11-02T01:30:00.000-05:00"]),
        (
            DstOverlap.TWICE,
            ["2026-11-01T01:30:00.000-04:00", "2026-11-01T01:30:00.000-05:00", "2026-11-02T01:30:00.000-05:00"],
        ),
    ],
)
def test_a_repeated_wall_time_follows_the_overlap_policy(overlap: DstOverlap, expected: list[str]) -> None:
    spec = CronSpec("30 1 * * *", "America/New_York", dst_overlap=overlap)
    assert local_times(spec, "2026-11-01T00:00:00-04:00", len(expected)) == expected


def test_the_instants_are_the_fire_paths_first_fire_then_next_fire() -> None:
    spec = CronSpec("*/7 9-17 * * 1-5", "Asia/Shanghai")
    now_ms = ms("2026-11-20T16:55:00+08:00")
    schedule = schedule_of(spec)
    expected = [schedule.first_fire(now_ms)]
    while len(expected) < 20:
        last = expected[-1]
        assert last is not None
        expected.append(schedule.next_fire(last))
    assert [o.at_ms for o in preview(spec, now_ms=now_ms, count=20).occurrences] == expected


def test_max_fires_and_the_end_bound_end_the_preview() -> None:
    start = ms("2026-01-01T00:00:00Z")
    capped = preview(IntervalSpec(60_000, start, max_fires=3), now_ms=start, count=10)
    assert [o.at_ms - start for o in capped.occurrences] == [0, 60_000, 120_000] and capped.ended
    bounded = preview(IntervalSpec(60_000, start, end_at_ms=start + 60_000), now_ms=start, count=10)
    assert len(bounded.occurrences) == 2 and bounded.ended
    open_ended = preview(IntervalSpec(60_000, start), now_ms=start, count=2)
    assert len(open_ended.occurrences) == 2 and not open_ended.ended


def test_from_skips_earlier_instants_and_counts_them_against_max_fires() -> None:
    start = ms("2026-01-01T00:00:00Z")
    later = preview(IntervalSpec(60_000, start, max_fires=3), now_ms=start, count=10, from_ms=start + 90_000)
    assert [o.at_ms - start for o in later.occurrences] == [120_000] and later.ended
    unbounded = preview(IntervalSpec(60_000, start), now_ms=start, count=2, from_ms=start + 3_600_000)
    assert [o.at_ms - start for o in unbounded.occurrences] == [3_600_000, 3_660_000]
    with pytest.raises(TooFarAhead):
        preview(IntervalSpec(1000, start, max_fires=MAX_SKIPPED * 2), now_ms=start, count=1, from_ms=start + 86_400_000)


def test_a_one_shot_shows_its_instant_in_utc_and_nothing_after_it() -> None:
    at = ms("2026-06-01T12:00:00Z")
    shown = preview_json(AtSpec(at), preview(AtSpec(at), now_ms=at - 1000, count=10))
    assert shown["timezone"] == "UTC" and shown["ended"] is True
    assert shown["instants"] == [
        {
            "at": "2026-06-01T12:00:00.000Z",
            "at_ms": at,
            "local": "2026-06-01T12:00:00.000+00:00",
            "utc_offset": "+00:00",
        }
    ]
