"""Cron across daylight-saving transitions: the ``dst_gap`` and ``dst_overlap`` policies.

The rules (see :mod:`tjobs.schedules.cron`): a matching wall time inside a gap fires nowhere (skip) or
once at the first instant after the gap (shift); a repeated wall time in an overlap fires on its first
pass only (once) or on both (twice).

The property tests compare the schedule with an independent oracle built from cronsim's own naive
iteration (which wall times match) and zoneinfo's PEP 495 ``fold`` (which instants show them), around
real transitions of zones with 1-hour, 30-minute (Lord Howe), midnight (Sao Paulo, Cairo) and
24-hour (Apia, 2011) shifts, and Shanghai, which has had none since 1991.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from tjobs.schedules import IntervalSchedule, Schedule, parse_schedule
from tjobs.schedules.zones import zone_timeline

SECOND = 1000
HOUR = 3600 * SECOND
DAY = 24 * HOUR
EPOCH = datetime(1970, 1, 1)
ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Shanghai",
    "Africa/Cairo",
    "America/Sao_Paulo",
    "Pacific/Apia",
]
POLICIES = [("skip", "once"), ("skip", "twice"), ("shift", "once"), ("shift", "twice")]


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def iso(instant_ms: int) -> str:
    return datetime.fromtimestamp(instant_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cron(expr: str, timezone: str, gap: str = "skip", overlap: str = "once") -> Schedule:
    return parse_schedule({"kind": "cron", "expr": expr, "timezone": timezone, "dst_gap": gap, "dst_overlap": overlap})


def fires_between(schedule: Schedule, lo_ms: int, hi_ms: int) -> list[int]:
    return schedule.occurrences_between(lo_ms, hi_ms, 100_000)


# ---- explicit examples ---------------------------------------------------------------------------

DAILY_0230_NY_SPRING = ("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", "2026-03-09T12:00:00Z")
DAILY_0130_NY_FALL = ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z")

EXAMPLES = [
    # New York, 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 does not exist that day.
    (*DAILY_0230_NY_SPRING, "skip", "once", ["2026-03-09T06:30:00Z"]),
    (*DAILY_0230_NY_SPRING, "shift", "once", ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]),  # 03:00 EDT
    # New York, 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens at 05:30Z and again at 06:30Z.
    (*DAILY_0130_NY_FALL, "skip", "once", ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
    (*DAILY_0130_NY_FALL, "skip", "twice", ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"]),
    # A quarter-hourly job: once leaves the repeated hour silent, twice keeps its rhythm.
    (
        "*/15 * * * *",
        "America/New_York",
        "2026-11-01T05:40:00Z",
        "2026-11-01T07:15:00Z",
        "skip",
        "once",
        ["2026-11-01T05:45:00Z", "2026-11-01T07:00:00Z", "2026-11-01T07:15:00Z"],
    ),
    (
        "*/15 * * * *",
        "America/New_York",
        "2026-11-01T05:40:00Z",
        "2026-11-01T07:15:00Z",
        "skip",
        "twice",
        [
            "2026-11-01T05:45:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:15:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T06:45:00Z",
            "2026-11-01T07:00:00Z",
            "2026-11-01T07:15:00Z",
        ],
    ),
    # ... and in the spring gap, shift collapses 02:00-02:45 into the one 03:00 EDT fire.
    (
        "*/15 * * * *",
        "America/New_York",
        "2026-03-08T06:40:00Z",
        "2026-03-08T07:15:00Z",
        "shift",
        "once",
        ["2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z"],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2026-03-08T05:30:00Z",
        "2026-03-08T08:00:00Z",
        "skip",
        "once",
        ["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"],
    ),
    # Berlin, 2026-03-29 02:00 CET -> 03:00 CEST and 2026-10-25 03:00 CEST -> 02:00 CET.
    (
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00:00Z",
        "2026-03-29T12:00:00Z",
        "shift",
        "once",
        ["2026-03-29T01:00:00Z"],
    ),
    (
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00:00Z",
        "2026-10-25T12:00:00Z",
        "skip",
        "twice",
        ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"],
    ),
    # Lord Howe moves by 30 minutes: 2026-10-04 02:00 -> 02:30 (+10:30 -> +11), 2026-04-05 02:00 -> 01:30.
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00:00Z", "2026-10-04T12:00:00Z", "skip", "once", []),
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T12:00:00Z",
        "2026-10-04T12:00:00Z",
        "shift",
        "once",
        ["2026-10-03T15:30:00Z"],
    ),  # 02:30 +11:00
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-04T12:00:00Z",
        "2026-04-05T12:00:00Z",
        "skip",
        "once",
        ["2026-04-04T14:45:00Z"],
    ),
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-04T12:00:00Z",
        "2026-04-05T12:00:00Z",
        "skip",
        "twice",
        ["2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z"],
    ),
    # Cairo (DST again since 2023): 2026-04-24 00:00 -> 01:00 and 2026-10-29 24:00 -> 23:00.
    ("30 0 * * *", "Africa/Cairo", "2026-04-23T12:00:00Z", "2026-04-24T12:00:00Z", "skip", "once", []),
    (
        "30 0 * * *",
        "Africa/Cairo",
        "2026-04-23T12:00:00Z",
        "2026-04-24T12:00:00Z",
        "shift",
        "once",
        ["2026-04-23T22:00:00Z"],
    ),
    (
        "30 23 * * *",
        "Africa/Cairo",
        "2026-10-29T12:00:00Z",
        "2026-10-30T12:00:00Z",
        "skip",
        "twice",
        ["2026-10-29T20:30:00Z", "2026-10-29T21:30:00Z"],
    ),
    # Sao Paulo sprang forward at midnight (2018-11-04 00:00 -> 01:00): that day has no midnight.
    (
        "0 0 * * *",
        "America/Sao_Paulo",
        "2018-11-03T12:00:00Z",
        "2018-11-05T12:00:00Z",
        "skip",
        "once",
        ["2018-11-05T02:00:00Z"],
    ),
    (
        "0 0 * * *",
        "America/Sao_Paulo",
        "2018-11-03T12:00:00Z",
        "2018-11-05T12:00:00Z",
        "shift",
        "once",
        ["2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"],
    ),
    # Apia skipped 2011-12-30 entirely (UTC-10 -> UTC+14).
    (
        "0 12 * * *",
        "Pacific/Apia",
        "2011-12-29T12:00:00Z",
        "2011-12-31T12:00:00Z",
        "skip",
        "once",
        ["2011-12-29T22:00:00Z", "2011-12-30T22:00:00Z"],
    ),
    (
        "0 12 * * *",
        "Pacific/Apia",
        "2011-12-29T12:00:00Z",
        "2011-12-31T12:00:00Z",
        "shift",
        "once",
        ["2011-12-29T22:00:00Z", "2011-12-30T10:00:00Z", "2011-12-30T22:00:00Z"],
    ),
]


@pytest.mark.parametrize(("expr", "timezone", "lo", "hi", "gap", "overlap", "expected"), EXAMPLES)
def test_dst_policy_examples(
    expr: str, timezone: str, lo: str, hi: str, gap: str, overlap: str, expected: list[str]
) -> None:
    schedule = cron(expr, timezone, gap, overlap)
    assert [iso(t) for t in fires_between(schedule, ms(lo), ms(hi))] == expected


@pytest.mark.parametrize(("overlap", "expected"), [("once", "2026-11-01T07:00:00Z"), ("twice", "2026-11-01T06:15:00Z")])
def test_next_fire_from_inside_the_second_pass_of_an_overlap(overlap: str, expected: str) -> None:
    # Given 06:10Z, i.e. 01:10 EST on the repeated hour, when asking for the next quarter-hour fire:
    schedule = cron("*/15 * * * *", "America/New_York", "skip", overlap)
    assert iso(schedule.next_fire(ms("2026-11-01T06:10:00Z")) or 0) == expected


@pytest.mark.parametrize(("overlap", "expected"), [("once", "2026-11-01T07:00:00Z"), ("twice", "2026-11-01T06:00:00Z")])
def test_next_fire_from_the_end_of_the_first_pass(overlap: str, expected: str) -> None:
    # 05:50Z is 01:50 EDT: the wall times 01:00-01:49 are still to come again under twice.
    schedule = cron("0 1,2 * * *", "America/New_York", "skip", overlap)
    assert iso(schedule.next_fire(ms("2026-11-01T05:50:00Z")) or 0) == expected


def test_seconds_cron_in_a_gap_shifts_to_the_first_valid_second() -> None:
    schedule = cron("*/20 59 1,2 * * *", "America/New_York", "shift", "once")
    got = fires_between(schedule, ms("2026-03-08T06:59:00Z"), ms("2026-03-08T07:59:59Z"))
    assert [iso(t) for t in got] == ["2026-03-08T06:59:20Z", "2026-03-08T06:59:40Z", "2026-03-08T07:00:00Z"]


# ---- the oracle ----------------------------------------------------------------------------------


def offset_s(zone: ZoneInfo, instant_s: int) -> int:
    offset = datetime.fromtimestamp(instant_s, zone).utcoffset()
    assert offset is not None
    return int(offset.total_seconds())


def wall_of(zone: ZoneInfo, instant_s: int) -> datetime:
    return datetime.fromtimestamp(instant_s, zone).replace(tzinfo=None)


@cache
def transitions_of(key: str) -> list[int]:
    """UTC seconds at which ``key`` changes its offset, 1985-2040 (12-hour sampling, bisected)."""
    zone = ZoneInfo(key)
    found = []
    t = int(datetime(1985, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(2040, 1, 1, tzinfo=UTC).timestamp())
    before = offset_s(zone, t)
    while t < end:
        nxt = t + 12 * 3600
        after = offset_s(zone, nxt)
        if after != before:
            lo, hi = t, nxt
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if offset_s(zone, mid) == before else (lo, mid)
            found.append(hi)
        t, before = nxt, after
    return found


@dataclass(frozen=True)
class Scenario:
    zone: str
    expr: str
    gap: str
    overlap: str
    lo_ms: int
    hi_ms: int

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    def matching_walls(self) -> set[datetime]:
        """Every wall time (naive, local) the expression matches that could map into the window."""
        lo_s, hi_s = self.lo_ms // 1000, self.hi_ms // 1000
        offsets = [offset_s(self.tz, lo_s), offset_s(self.tz, hi_s)]
        first = EPOCH + timedelta(seconds=lo_s + min(offsets) - 2)
        last = EPOCH + timedelta(seconds=hi_s + max(offsets) + 2)
        walls = set()
        for wall in CronSim(self.expr, first):
            if wall > last:
                break
            walls.add(wall)
        return walls

    def oracle(self) -> list[int]:
        """The fires in ``(lo, hi]``, from zoneinfo's fold semantics and the policies' definitions."""
        tz, fires = self.tz, set()
        for wall in self.matching_walls():
            u0 = int(wall.replace(tzinfo=tz, fold=0).timestamp())
            u1 = int(wall.replace(tzinfo=tz, fold=1).timestamp())
            real = sorted({u for u in (u0, u1) if wall_of(tz, u) == wall})
            if not real:  # in a gap
                if self.gap == "shift":  # the first instant whose wall time is past the gap
                    lo, hi = min(u0, u1), max(u0, u1)
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        lo, hi = (mid, hi) if wall_of(tz, mid) <= wall else (lo, mid)
                    fires.add(hi)
            elif self.overlap == "once":
                fires.add(real[0])
            else:
                fires.update(real)
        return sorted(u * 1000 for u in fires if self.lo_ms < u * 1000 <= self.hi_ms)

    def schedule(self) -> Schedule:
        return cron(self.expr, self.zone, self.gap, self.overlap)

    def fires(self) -> list[int]:
        return fires_between(self.schedule(), self.lo_ms, self.hi_ms)

    def transitions(self) -> list[int]:
        return [t * 1000 for t in transitions_of(self.zone) if self.lo_ms < t * 1000 <= self.hi_ms]


MINUTES = st.sampled_from(["0", "30", "*/15", "*/20", "59", "0-2", "45", "*/10", "15,45"])
FIXED_HOURS = st.sampled_from(["*", "0", "1", "2", "3", "23", "1-3", "0-3", "*/2", "2,3", "22-23"])
DAYS = st.sampled_from(["*"] * 8 + ["1-15", "L"])
WEEKDAYS = st.sampled_from(["*"] * 8 + ["SUN", "MON-FRI", "FRI,SAT"])
SECONDS = st.sampled_from(["0", "30", "*/15", "59", "0,1"])
WINDOW_HOURS = st.sampled_from([1, 2, 3, 6, 26])
YEAR_1990_MS, YEAR_2039_MS = ms("1990-01-01T00:00:00Z"), ms("2039-01-01T00:00:00Z")


@st.composite
def scenarios(draw: st.DrawFn, gap: str, overlap: str) -> Scenario:
    """A cron, a zone and a window, usually around one of the zone's transitions and aimed at it."""
    zone = draw(st.sampled_from(ZONES))
    transitions = transitions_of(zone)
    with_seconds = draw(st.integers(0, 3)) == 0
    max_hours = 3 if with_seconds else 26
    if transitions and draw(st.sampled_from(range(10))) > 0:
        center = draw(st.sampled_from(transitions)) * 1000
        # The local hours on either side of the jump: matching them puts wall times in the gap/overlap.
        before = wall_of(ZoneInfo(zone), center // 1000 - 1).hour
        after = wall_of(ZoneInfo(zone), center // 1000).hour
        low, high = min(before, after), max(before, after)
        aimed = ["*", "*", str(before), str(after), str((before + 1) % 24), f"{low}-{high}", "fixed"]
        hours = draw(st.sampled_from(aimed))
        if hours == "fixed":
            hours = draw(FIXED_HOURS)
    else:
        center = draw(st.integers(YEAR_1990_MS, YEAR_2039_MS))
        hours = draw(FIXED_HOURS)
    fields = [draw(MINUTES), hours, draw(DAYS), "*", draw(WEEKDAYS)]
    if with_seconds:
        fields.insert(0, draw(SECONDS))
    lo = center - min(draw(WINDOW_HOURS), max_hours) * HOUR - draw(st.integers(0, HOUR))
    hi = center + min(draw(WINDOW_HOURS), max_hours) * HOUR + draw(st.integers(0, HOUR))
    return Scenario(zone, " ".join(fields), gap, overlap, lo, hi)


# ---- properties, for each of the four policy combinations ----------------------------------------

policy = pytest.mark.parametrize(("gap", "overlap"), POLICIES)


@policy
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_fires_are_exactly_the_oracles_from_any_starting_point(gap: str, overlap: str, data: st.DataObject) -> None:
    scenario = data.draw(scenarios(gap, overlap))
    expected = scenario.oracle()
    assert scenario.fires() == expected
    # next_fire from any instant (mid-gap, inside either pass of an overlap, at a fire) agrees too.
    schedule = scenario.schedule()
    probes = [scenario.lo_ms, *scenario.transitions()]
    probes += [t + d for t in scenario.transitions() for d in (-HOUR - 1, -1, 1, HOUR // 2, HOUR + 1)]
    probes += [f + d for f in expected[:20] for d in (-1, 0, 1)]
    probes += data.draw(st.lists(st.integers(scenario.lo_ms, scenario.hi_ms), max_size=10))
    for probe in probes:
        if scenario.lo_ms <= probe:
            later = [f for f in expected if f > probe]
            if later:
                assert schedule.next_fire(probe) == later[0], f"next_fire({iso(probe)})"


@policy
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_fire_times_strictly_increase(gap: str, overlap: str, data: st.DataObject) -> None:
    fires = data.draw(scenarios(gap, overlap)).fires()
    assert all(a < b for a, b in pairwise(fires))


@policy
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_fire_shows_a_matching_wall_time_unless_it_is_a_shift_right_after_a_gap(
    gap: str, overlap: str, data: st.DataObject
) -> None:
    scenario = data.draw(scenarios(gap, overlap))
    tz, walls = scenario.tz, scenario.matching_walls()
    for fire in scenario.fires():
        fire_s = fire // 1000
        if wall_of(tz, fire_s) in walls:
            continue
        # Only a shift fire may show another wall time: at a forward jump, standing in for a gap match.
        assert gap == "shift"
        before, after = offset_s(tz, fire_s - 1), offset_s(tz, fire_s)
        assert after > before, f"{iso(fire)} is not right after a gap"
        gap_start = EPOCH + timedelta(seconds=fire_s + before)
        gap_end = EPOCH + timedelta(seconds=fire_s + after)
        assert any(gap_start <= w < gap_end for w in walls)


@policy
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_gap_wall_times_fire_nowhere_under_skip_and_once_right_after_the_gap_under_shift(
    gap: str, overlap: str, data: st.DataObject
) -> None:
    scenario = data.draw(scenarios(gap, overlap))
    tz, walls, fires = scenario.tz, scenario.matching_walls(), scenario.fires()
    for transition in scenario.transitions():
        t_s = transition // 1000
        before, after = offset_s(tz, t_s - 1), offset_s(tz, t_s)
        if after <= before:
            continue
        gap_walls = [
            w for w in walls if EPOCH + timedelta(seconds=t_s + before) <= w < EPOCH + timedelta(seconds=t_s + after)
        ]
        if not gap_walls:
            continue
        end_wall_matches = wall_of(tz, t_s) in walls
        if gap == "shift":
            assert fires.count(transition) == 1  # one fire for all of them, at the first valid instant
        else:
            assert (transition in fires) == end_wall_matches  # no stand-in fire for the gap
        # nothing fires inside the jump other than at the transition instant itself
        jump_end = transition + (after - before) * 1000
        assert all(not transition < f < jump_end or wall_of(tz, f // 1000) in walls for f in fires)


@policy
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_repeated_wall_times_fire_once_on_the_first_pass_or_twice(gap: str, overlap: str, data: st.DataObject) -> None:
    scenario = data.draw(scenarios(gap, overlap))
    tz, fires = scenario.tz, scenario.fires()
    by_wall: dict[datetime, list[int]] = {}
    for fire in fires:
        by_wall.setdefault(wall_of(tz, fire // 1000), []).append(fire)
    for wall in scenario.matching_walls():
        u0 = int(wall.replace(tzinfo=tz, fold=0).timestamp()) * 1000
        u1 = int(wall.replace(tzinfo=tz, fold=1).timestamp()) * 1000
        if u0 == u1 or not (scenario.lo_ms < u0 and u1 <= scenario.hi_ms):
            continue
        if wall_of(tz, u0 // 1000) != wall or wall_of(tz, u1 // 1000) != wall:
            continue  # a gap, not an overlap
        expected = [u0] if overlap == "once" else [u0, u1]
        assert by_wall.get(wall) == expected, f"{wall} in {scenario.zone}"


@settings(max_examples=50, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    every=st.integers(60 * SECOND, 2 * HOUR),
    offset=st.integers(-DAY, DAY),
    data=st.data(),
)
def test_interval_fires_ignore_dst_and_stay_on_the_start_plus_k_periods_grid(
    zone: str, every: int, offset: int, data: st.DataObject
) -> None:
    transitions = transitions_of(zone) or [int(datetime(2026, 3, 8, tzinfo=UTC).timestamp())]
    start = data.draw(st.sampled_from(transitions)) * 1000 + offset
    schedule = IntervalSchedule(every_ms=every, start_at_ms=start)
    fires = fires_between(schedule, start - 1, start + 2 * DAY)
    assert fires == list(range(start, start + 2 * DAY + 1, every))


@pytest.mark.parametrize("zone", ZONES)
def test_zone_timeline_finds_every_offset_change(zone: str) -> None:
    timeline = zone_timeline(zone)
    found, cursor = [], ms("1985-01-01T00:00:00Z")
    while (transition := timeline.next_transition(cursor, ms("2040-01-01T00:00:00Z") - 1)) is not None:
        assert transition.before_ms == offset_s(ZoneInfo(zone), transition.at_ms // 1000 - 1) * 1000
        assert transition.after_ms == offset_s(ZoneInfo(zone), transition.at_ms // 1000) * 1000
        found.append(transition.at_ms // 1000)
        cursor = transition.at_ms
    assert found == transitions_of(zone)
