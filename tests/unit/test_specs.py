"""Typed specs: every kind of stored row reads back and is written again byte for byte, what the request
parsers make of a request is stored as it always was, and the specs agree with the request shapes."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, get_args

import pytest

from tjobs.schedules.parsing import parse_schedule_request
from tjobs.service.validation import parse_callback_request
from tjobs.settings import LimitSettings
from tjobs.specs import (
    AtSpec,
    CallbackSpec,
    CronSpec,
    DelaySpec,
    DstGap,
    DstOverlap,
    IntervalSpec,
    ScheduleKind,
    callback_from_json,
    callback_from_text,
    callback_to_text,
    schedule_from_json,
    schedule_from_text,
    schedule_to_text,
)
from tjobs.wire import SCHEDULE_SHAPES, CallbackBudget, CallbackRequest, CronSchedule, StoredCallback

NOW = 1_795_251_600_000  # 2026-11-21T09:00:00Z
LIMITS = LimitSettings()

# (request, the column text the store held for it before specs were typed: written by that code)
SCHEDULE_ROWS: list[tuple[dict[str, Any], str]] = [
    (
        {"kind": "cron", "expr": "0 9 * * *", "timezone": "Asia/Shanghai"},
        '{"kind":"cron","expr":"0 9 * * *","timezone":"Asia/Shanghai","dst_gap":"skip","dst_overlap":"once"}',
    ),
    (
        {
            "kind": "cron",
            "expr": "*/5 * * * *",
            "dst_gap": "shift",
            "dst_overlap": "twice",
            "start_at_ms": NOW + 1000,
            "end_at_ms": NOW + 86_400_000,
            "max_fires": 3,
        },
        '{"kind":"cron","expr":"*/5 * * * *","timezone":"UTC","dst_gap":"shift","dst_overlap":"twice",'
        '"start_at_ms":1795251601000,"end_at_ms":1795338000000,"max_fires":3}',
    ),
    ({"kind": "interval", "every_ms": 30000}, '{"kind":"interval","every_ms":30000,"start_at_ms":1795251630000}'),
    (
        {"kind": "interval", "every_ms": 30000, "start_at_ms": NOW, "end_at_ms": NOW + 600_000, "max_fires": 5},
        '{"kind":"interval","every_ms":30000,"start_at_ms":1795251600000,"end_at_ms":1795252200000,"max_fires":5}',
    ),
    ({"kind": "at", "at_ms": NOW + 5}, '{"kind":"at","at_ms":1795251600005}'),
    ({"kind": "delay", "delay_ms": 1_800_000}, '{"kind":"delay","delay_ms":1800000,"at_ms":1795253400000}'),
    (
        {"kind": "fixed_delay", "delay_ms": 60_000},
        '{"kind":"fixed_delay","delay_ms":60000,"start_at_ms":1795251660000}',
    ),
    (
        {"kind": "fixed_delay", "delay_ms": 60_000, "start_at_ms": NOW + 5, "max_fires": 2},
        '{"kind":"fixed_delay","delay_ms":60000,"start_at_ms":1795251600005,"max_fires":2}',
    ),
]
CALLBACK_ROWS: list[tuple[dict[str, Any], str]] = [
    ({"url": "https://a.example/hook"}, '{"urls":["https://a.example/hook"],"method":"POST"}'),
    (
        {
            "urls": ["https://a.example/1", "https://b.example/2"],
            "method": "put",
            "headers": {"X-Order": "1", "Content-Type": "text/plain"},
            "body": "hi",
            "timeout_ms": 500,
            "max_attempts": 3,
            "max_age_s": 60,
        },
        '{"urls":["https://a.example/1","https://b.example/2"],"method":"PUT","headers":{"X-Order":"1",'
        '"Content-Type":"text/plain"},"body":"hi","timeout_ms":500,"max_attempts":3,"max_age_s":60}',
    ),
    (
        {"url": "https://a.example/hook", "max_age_s": 600, "max_attempts": 4},
        '{"urls":["https://a.example/hook"],"method":"POST","max_attempts":4,"max_age_s":600}',
    ),
]


@pytest.mark.parametrize(("request_", "stored"), SCHEDULE_ROWS)
def test_a_stored_schedule_of_every_kind_reads_back_and_is_written_byte_for_byte(
    request_: dict[str, Any], stored: str
) -> None:
    spec = schedule_from_text(stored)
    assert schedule_to_text(spec) == stored
    assert schedule_to_text(parse_schedule_request(request_, now_ms=NOW, limits=LIMITS, misfire_threshold_ms=0)) == (
        stored
    )
    assert schedule_from_text(stored.encode()) == spec  # a driver may hand the column over as bytes


@pytest.mark.parametrize(("request_", "stored"), CALLBACK_ROWS)
def test_a_stored_callback_reads_back_and_is_written_byte_for_byte(request_: dict[str, Any], stored: str) -> None:
    spec = callback_from_text(stored)
    assert callback_to_text(spec) == stored
    assert callback_to_text(parse_callback_request(request_, LIMITS)) == stored


def test_every_kind_has_a_stored_row_above() -> None:
    assert {schedule_from_text(stored).kind for _, stored in SCHEDULE_ROWS} == set(ScheduleKind)


def test_the_specs_parse_into_their_types() -> None:
    cron = schedule_from_text(SCHEDULE_ROWS[1][1])
    assert cron == CronSpec("*/5 * * * *", "UTC", DstGap.SHIFT, DstOverlap.TWICE, NOW + 1000, NOW + 86_400_000, 3)
    assert cron.dst_gap is DstGap.SHIFT and cron.dst_overlap is DstOverlap.TWICE
    assert schedule_from_text(SCHEDULE_ROWS[2][1]) == IntervalSpec(30_000, NOW + 30_000)
    assert schedule_from_text(SCHEDULE_ROWS[4][1]) == AtSpec(NOW + 5)
    assert schedule_from_text(SCHEDULE_ROWS[5][1]) == DelaySpec(1_800_000, NOW + 1_800_000)
    callback = callback_from_text(CALLBACK_ROWS[1][1])
    assert callback.urls == ("https://a.example/1", "https://b.example/2")
    assert dict(callback.headers) == {"X-Order": "1", "Content-Type": "text/plain"}
    assert (callback.method, callback.body, callback.timeout_ms, callback.max_attempts, callback.max_age_s) == (
        "PUT",
        "hi",
        500,
        3,
        60,
    )


def test_a_column_text_seen_before_is_not_parsed_again() -> None:
    text = SCHEDULE_ROWS[0][1]
    assert schedule_from_text(text) is schedule_from_text("".join(text))
    assert callback_from_text(CALLBACK_ROWS[0][1]) is callback_from_text("".join(CALLBACK_ROWS[0][1]))


def test_older_and_partial_rows_still_read() -> None:
    assert callback_from_json({"url": "https://a.example/"}).urls == ("https://a.example/",)
    assert callback_from_json({"method": "POST"}).urls == ()  # delivery dead-letters it; the fire goes on
    assert schedule_from_json({"kind": "cron", "expr": "0 9 * * *"}) == CronSpec("0 9 * * *")
    with pytest.raises(ValueError):
        schedule_from_json({"kind": "interval", "every_ms": 1000})
    with pytest.raises(ValueError):
        schedule_from_json({"kind": "weekly"})


def test_the_specs_are_immutable() -> None:
    callback = callback_from_text(CALLBACK_ROWS[1][1])
    with pytest.raises(TypeError):
        callback.headers["X-Order"] = "2"  # type: ignore[index]
    with pytest.raises(AttributeError):
        callback.max_attempts = 9  # type: ignore[misc]


# ---- the specs and the request shapes of tjobs.wire agree -------------------------------------------------


def test_each_kind_of_schedule_request_has_its_spec_and_the_dst_choices_agree() -> None:
    kinds = {get_args(shape.model_fields["kind"].annotation)[0] for shape in SCHEDULE_SHAPES}
    assert kinds == {kind.value for kind in ScheduleKind}
    assert set(get_args(CronSchedule.model_fields["dst_gap"].annotation)) == {g.value for g in DstGap}
    assert set(get_args(CronSchedule.model_fields["dst_overlap"].annotation)) == {o.value for o in DstOverlap}


def test_the_callback_spec_and_its_shapes_name_the_same_fields() -> None:
    spec_fields = [f.name for f in fields(CallbackSpec)]
    assert list(StoredCallback.model_fields) == spec_fields
    assert set(CallbackBudget.model_fields) <= set(spec_fields)
    assert set(CallbackRequest.model_fields) - set(spec_fields) == {"url", "target"}  # unicast spellings
