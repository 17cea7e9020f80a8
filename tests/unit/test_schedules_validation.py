"""Validating schedule specs: what is accepted, what it is stored as, and how a rejection names its field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tjobs.errors import InvalidInput
from tjobs.schedules import normalize_schedule, parse_schedule
from tjobs.settings import LimitSettings

NOW = 1_795_251_600_000  # 2026-11-21T09:00:00Z
SECOND = 1000
DAY = 86_400 * SECOND
THRESHOLD_MS = 60 * SECOND
LIMITS = LimitSettings()


def normalize(spec: Any, limits: LimitSettings = LIMITS) -> dict[str, Any]:
    return normalize_schedule(spec, now_ms=NOW, limits=limits, misfire_threshold_ms=THRESHOLD_MS)


# ---- accepted specs and their canonical form -----------------------------------------------------

CANONICAL: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"kind": "delay", "delay_ms": 1_800_000}, {"kind": "delay", "delay_ms": 1_800_000, "at_ms": NOW + 1_800_000}),
    ({"kind": "delay", "delay_ms": 0}, {"kind": "delay", "delay_ms": 0, "at_ms": NOW}),
    ({"kind": "at", "at": "2026-11-21T17:00:00+08:00"}, {"kind": "at", "at_ms": NOW}),
    ({"kind": "at", "at": "2026-11-21T09:30:00Z"}, {"kind": "at", "at_ms": NOW + 1_800_000}),
    ({"kind": "at", "at_ms": NOW + 5}, {"kind": "at", "at_ms": NOW + 5}),
    ({"kind": "at", "at_ms": NOW - THRESHOLD_MS}, {"kind": "at", "at_ms": NOW - THRESHOLD_MS}),  # late: ok
    (
        {"kind": "cron", "expr": " 0  9 * * * ", "timezone": "Asia/Shanghai"},
        {"kind": "cron", "expr": "0 9 * * *", "timezone": "Asia/Shanghai", "dst_gap": "skip", "dst_overlap": "once"},
    ),
    (
        {"kind": "cron", "expr": "0 9 * * *"},
        {"kind": "cron", "expr": "0 9 * * *", "timezone": "UTC", "dst_gap": "skip", "dst_overlap": "once"},
    ),
    (
        {
            "kind": "cron",
            "expr": "* * * * * *",
            "dst_gap": "shift",
            "dst_overlap": "twice",
            "max_fires": 3,
            "start_at": "2026-12-01T00:00:00Z",
            "end_at": "2026-12-02T00:00:00+01:00",
        },
        {
            "kind": "cron",
            "expr": "* * * * * *",
            "timezone": "UTC",
            "dst_gap": "shift",
            "dst_overlap": "twice",
            "max_fires": 3,
            "start_at_ms": 1_796_083_200_000,
            "end_at_ms": 1_796_166_000_000,
        },
    ),
    (
        {"kind": "cron", "expr": "@daily", "timezone": "Europe/Berlin", "dst_gap": None},
        {"kind": "cron", "expr": "@daily", "timezone": "Europe/Berlin", "dst_gap": "skip", "dst_overlap": "once"},
    ),
    (
        {"kind": "interval", "every_ms": 30_000, "start_at": "2026-11-21T00:00:00Z"},
        {"kind": "interval", "every_ms": 30_000, "start_at_ms": NOW - 9 * 3_600_000},
    ),
    # without a start the grid is anchored at registration and fires first one period later
    ({"kind": "interval", "every_ms": 30_000}, {"kind": "interval", "every_ms": 30_000, "start_at_ms": NOW + 30_000}),
    (
        {"kind": "interval", "every_ms": 1000, "start_at_ms": NOW, "end_at_ms": NOW + 5000, "max_fires": 2},
        {"kind": "interval", "every_ms": 1000, "start_at_ms": NOW, "end_at_ms": NOW + 5000, "max_fires": 2},
    ),
]


@pytest.mark.parametrize(("spec", "stored"), CANONICAL)
def test_accepted_specs_are_stored_in_canonical_form(spec: dict[str, Any], stored: dict[str, Any]) -> None:
    assert normalize(spec) == stored


@pytest.mark.parametrize(("spec", "stored"), [c for c in CANONICAL if c[0]["kind"] != "delay"])
def test_a_stored_schedule_validates_to_itself(spec: dict[str, Any], stored: dict[str, Any]) -> None:
    assert normalize(stored) == stored


@pytest.mark.parametrize(
    ("spec", "first"),
    [
        ({"kind": "delay", "delay_ms": 1_800_000}, NOW + 1_800_000),
        ({"kind": "at", "at_ms": NOW - 5}, NOW - 5),  # a one-shot starts at its instant even if just past
        # NOW is 17:00 in Shanghai: the next 09:00 there is 01:00Z tomorrow
        ({"kind": "cron", "expr": "0 9 * * *", "timezone": "Asia/Shanghai"}, NOW + 16 * 3_600_000),
        ({"kind": "cron", "expr": "0 9 * * *"}, NOW),  # now itself is an occurrence
        ({"kind": "interval", "every_ms": 30_000}, NOW + 30_000),
        ({"kind": "interval", "every_ms": 60_000, "start_at_ms": NOW - 90_000}, NOW + 30_000),
    ],
)
def test_first_fire_of_a_newly_registered_task(spec: dict[str, Any], first: int) -> None:
    assert parse_schedule(normalize(spec)).first_fire(NOW) == first


def test_a_six_field_every_second_cron_meets_the_default_minimum_period() -> None:
    assert normalize({"kind": "cron", "expr": "* * * * * *"})["expr"] == "* * * * * *"


# ---- rejections ----------------------------------------------------------------------------------

CRON = {"kind": "cron", "expr": "0 9 * * *"}
INTERVAL = {"kind": "interval", "every_ms": 30_000}
FAR = NOW + (LIMITS.max_future_days + 1) * DAY

REJECTED = [
    # shape and kind
    ("not an object", "schedule", "invalid_type"),
    (["cron"], "schedule", "invalid_type"),
    ({}, "schedule.kind", "missing"),
    ({"kind": "weekly"}, "schedule.kind", "unknown_kind"),
    ({"kind": 5}, "schedule.kind", "unknown_kind"),
    ({"kind": "CRON", "expr": "0 9 * * *"}, "schedule.kind", "unknown_kind"),
    ({**CRON, "tz": "UTC"}, "schedule.tz", "unknown_field"),
    ({**INTERVAL, "expr": "* * * * *"}, "schedule.expr", "unknown_field"),
    ({"kind": "at", "at_ms": NOW, "max_fires": 1}, "schedule.max_fires", "unknown_field"),
    ({"kind": "at", "at_ms": NOW, "end_at_ms": NOW}, "schedule.end_at_ms", "unknown_field"),
    ({"kind": "delay", "delay_ms": 5, "at_ms": NOW}, "schedule.at_ms", "unknown_field"),
    # cron expressions
    ({"kind": "cron"}, "schedule.expr", "missing"),
    ({"kind": "cron", "expr": 5}, "schedule.expr", "invalid_type"),
    ({"kind": "cron", "expr": ""}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 9 * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 0 9 * * * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "60 * * * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 24 * * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 0 32 * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 0 0 * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 0 * 13 *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 0 * * 8"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "60 0 0 * * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "*/0 * * * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "5-1 * * * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "? * * * *"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "hello world foo bar baz"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "@reboot"}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 " * 150}, "schedule.expr", "invalid_cron"),
    ({"kind": "cron", "expr": "0 0 30 2 *"}, "schedule.expr", "never_fires"),
    ({"kind": "cron", "expr": "0 0 31 4,6,9,11 *"}, "schedule.expr", "never_fires"),
    # the 1st, 11th or 21st of February that is also its last Friday
    ({"kind": "cron", "expr": "0 0 */10 2 5L"}, "schedule.expr", "never_fires"),
    # zones and policies
    ({**CRON, "timezone": "Mars/Olympus_Mons"}, "schedule.timezone", "unknown_timezone"),
    ({**CRON, "timezone": "utc"}, "schedule.timezone", "unknown_timezone"),
    ({**CRON, "timezone": "localtime"}, "schedule.timezone", "unknown_timezone"),
    ({**CRON, "timezone": "../../etc/passwd"}, "schedule.timezone", "unknown_timezone"),
    ({**CRON, "timezone": "America"}, "schedule.timezone", "unknown_timezone"),
    ({**CRON, "timezone": ""}, "schedule.timezone", "unknown_timezone"),
    ({**CRON, "timezone": 8}, "schedule.timezone", "invalid_type"),
    ({**CRON, "dst_gap": "later"}, "schedule.dst_gap", "invalid_choice"),
    ({**CRON, "dst_gap": True}, "schedule.dst_gap", "invalid_type"),
    ({**CRON, "dst_overlap": "thrice"}, "schedule.dst_overlap", "invalid_choice"),
    # intervals
    ({"kind": "interval"}, "schedule.every_ms", "missing"),
    ({"kind": "interval", "every_ms": "30000"}, "schedule.every_ms", "invalid_type"),
    ({"kind": "interval", "every_ms": 30000.0}, "schedule.every_ms", "invalid_type"),
    ({"kind": "interval", "every_ms": True}, "schedule.every_ms", "invalid_type"),
    ({"kind": "interval", "every_ms": 999}, "schedule.every_ms", "too_frequent"),
    ({"kind": "interval", "every_ms": 0}, "schedule.every_ms", "too_frequent"),
    ({"kind": "interval", "every_ms": -30_000}, "schedule.every_ms", "too_frequent"),
    ({"kind": "interval", "every_ms": (LIMITS.max_future_days + 1) * DAY}, "schedule.every_ms", "too_far"),
    ({"kind": "interval", "every_ms": 10**30}, "schedule.every_ms", "out_of_range"),
    # bounds
    ({**INTERVAL, "start_at": "2026-11-21T00:00:00"}, "schedule.start_at", "invalid_instant"),
    ({**INTERVAL, "start_at": "tomorrow"}, "schedule.start_at", "invalid_instant"),
    ({**INTERVAL, "start_at": 1_795_251_600_000}, "schedule.start_at", "invalid_type"),
    ({**INTERVAL, "start_at": "2026-11-21T00:00:00Z", "start_at_ms": NOW}, "schedule.start_at_ms", "ambiguous"),
    ({**INTERVAL, "start_at_ms": "2026-11-21T00:00:00Z"}, "schedule.start_at_ms", "invalid_type"),
    ({**INTERVAL, "start_at_ms": FAR}, "schedule.start_at_ms", "too_far"),
    ({**CRON, "start_at": "2026-12-02T00:00:00Z", "end_at": "2026-12-01T00:00:00Z"}, "schedule.end_at", "out_of_range"),
    ({**INTERVAL, "start_at_ms": NOW, "end_at_ms": NOW - 1}, "schedule.end_at_ms", "out_of_range"),
    ({**CRON, "end_at": "2026-11-01T00:00:00Z"}, "schedule.end_at", "never_fires"),
    ({**INTERVAL, "end_at_ms": NOW}, "schedule.end_at", "never_fires"),
    ({**CRON, "start_at": "2026-11-21T10:00:00Z", "end_at": "2026-11-21T11:00:00Z"}, "schedule.end_at", "never_fires"),
    ({**CRON, "max_fires": 0}, "schedule.max_fires", "out_of_range"),
    ({**INTERVAL, "max_fires": -1}, "schedule.max_fires", "out_of_range"),
    ({**INTERVAL, "max_fires": "3"}, "schedule.max_fires", "invalid_type"),
    ({**INTERVAL, "max_fires": 2.5}, "schedule.max_fires", "invalid_type"),
    # at and delay
    ({"kind": "at"}, "schedule.at", "missing"),
    ({"kind": "at", "at": "2026-11-21T17:00:00"}, "schedule.at", "invalid_instant"),
    ({"kind": "at", "at": "2026-02-30T00:00:00Z"}, "schedule.at", "invalid_instant"),
    ({"kind": "at", "at": ["2026-11-21T17:00:00Z"]}, "schedule.at", "invalid_type"),
    # the C parser behind datetime.fromisoformat stops at a NUL: the rest must not be dropped (issue 28)
    ({"kind": "at", "at": "2030-01-01T00:00:00Z\u0000junk"}, "schedule.at", "invalid_instant"),
    ({**INTERVAL, "start_at": "2030-01-01T00:00:00Z\u0000"}, "schedule.start_at", "invalid_instant"),
    ({**CRON, "end_at": "2030-01-01T00:00:00Z\u0000junk"}, "schedule.end_at", "invalid_instant"),
    ({"kind": "at", "at": "2026-11-21T08:58:59Z"}, "schedule.at", "in_past"),
    ({"kind": "at", "at_ms": NOW - THRESHOLD_MS - 1}, "schedule.at_ms", "in_past"),
    ({"kind": "at", "at_ms": FAR}, "schedule.at_ms", "too_far"),
    ({"kind": "at", "at": "9999-12-31T23:59:59Z"}, "schedule.at", "too_far"),
    ({"kind": "at", "at_ms": "soon"}, "schedule.at_ms", "invalid_type"),
    ({"kind": "at", "at": "2026-11-21T17:00:00Z", "at_ms": NOW}, "schedule.at_ms", "ambiguous"),
    ({"kind": "delay"}, "schedule.delay_ms", "missing"),
    ({"kind": "delay", "delay_ms": -1}, "schedule.delay_ms", "out_of_range"),
    ({"kind": "delay", "delay_ms": "1800000"}, "schedule.delay_ms", "invalid_type"),
    ({"kind": "delay", "delay_ms": None}, "schedule.delay_ms", "missing"),
    ({"kind": "delay", "delay_ms": (LIMITS.max_future_days + 1) * DAY}, "schedule.delay_ms", "too_far"),
]


@pytest.mark.parametrize(("spec", "field", "code"), REJECTED)
def test_invalid_specs_are_rejected_naming_the_field(spec: Any, field: str, code: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        normalize(spec)
    assert (caught.value.field, caught.value.code) == (field, code)
    assert caught.value.message.startswith(field)


@pytest.mark.parametrize(
    ("expr", "min_period_ms"),
    [
        ("* * * * * *", 2000),  # every second
        ("*/30 * * * * *", 60_000),
        ("0,1 * * * *", 120_000),  # minutes 0 and 1: one minute apart
        ("0,59 0,23 * * *", 120_000),  # 23:59 then 00:00 the next day
        ("0 0 L,1 * *", 2 * DAY),  # the last day of a month, then the first of the next
    ],
)
def test_a_cron_firing_more_often_than_the_minimum_period_is_rejected(expr: str, min_period_ms: int) -> None:
    limits = LimitSettings(min_period_ms=min_period_ms)
    with pytest.raises(InvalidInput) as caught:
        normalize({"kind": "cron", "expr": expr}, limits)
    assert (caught.value.field, caught.value.code) == ("schedule.expr", "too_frequent")


def test_a_cron_exactly_at_the_minimum_period_is_accepted() -> None:
    limits = LimitSettings(min_period_ms=60_000)
    assert normalize({"kind": "cron", "expr": "* * * * *"}, limits)["expr"] == "* * * * *"
    assert normalize({"kind": "interval", "every_ms": 60_000}, limits)["every_ms"] == 60_000


# ---- no input makes validation fail with anything but InvalidInput --------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
CRON_TEXT = st.text(alphabet="0123456789*/,-LW#? MONTUEFRIJANDEC@daily", max_size=30)
ISO_TEXT = st.sampled_from(
    [
        "2026-11-21T00:00:00Z",
        "2026-11-21T00:00:00",
        "0001-01-01T00:00:00+00:00",
        "9999-12-31T23:59:59-12:00",
        "2026-11-21",
        "",
        "Z",
        "2026-13-01T00:00:00Z",
    ]
)
ANY_INT = st.integers() | st.integers(-(10**15), 10**15)
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "expr": CRON_TEXT | JSON,
    "timezone": st.sampled_from(["UTC", "Asia/Shanghai", "America/New_York", "Nope", ""]) | JSON,
    "dst_gap": st.sampled_from(["skip", "shift", "x"]) | JSON,
    "dst_overlap": st.sampled_from(["once", "twice", "x"]) | JSON,
    "every_ms": ANY_INT | JSON,
    "delay_ms": ANY_INT | JSON,
    "at": ISO_TEXT | JSON,
    "at_ms": ANY_INT | JSON,
    "start_at": ISO_TEXT | JSON,
    "start_at_ms": ANY_INT | JSON,
    "end_at": ISO_TEXT | JSON,
    "end_at_ms": ANY_INT | JSON,
    "max_fires": ANY_INT | JSON,
    "bogus": JSON,
}
SPECS = (
    st.fixed_dictionaries({"kind": st.sampled_from(["cron", "interval", "at", "delay"]) | JSON}, optional=FIELD_VALUES)
    | JSON
)


@settings(max_examples=400, deadline=None)
@given(spec=SPECS)
def test_any_json_is_either_a_valid_schedule_or_an_invalid_input(spec: Any) -> None:
    try:
        stored = normalize(spec)
    except InvalidInput as exc:
        assert exc.field == "schedule" or exc.field.startswith("schedule.")
        return
    schedule = parse_schedule(stored)
    first = schedule.first_fire(NOW)
    assert first is not None
    assert schedule.next_fire(first - 1) == first or stored["kind"] in ("at", "delay")
