"""Flow filters read from text: time presets from the ``now`` passed in, last answers as none, a class or a
code, and every bad value a 422 naming its field."""

from __future__ import annotations

import pytest

from tjobs.errors import InvalidInput
from tjobs.service.flow_export import safe_cell
from tjobs.service.flow_filters import FlowFilters, parse_flow_filters
from tjobs.stores.queries import NO_ANSWER

NOW_MS = 1_800_000_000_000


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, FlowFilters()),
        ({"window": "15m"}, FlowFilters(window="15m", from_ms=NOW_MS - 900_000)),
        ({"window": "7d", "status": "dead"}, FlowFilters(status="dead", window="7d", from_ms=NOW_MS - 7 * 86_400_000)),
        (
            {"from": "2027-01-15T06:00:00Z", "to": "1800000000000"},
            FlowFilters(from_ms=NOW_MS - 7_200_000, until_ms=NOW_MS),
        ),
        (
            {"task_name_prefix": "order-", "target": "orders-mq"},
            FlowFilters(task_name_prefix="order-", target="orders-mq"),
        ),
        ({"task_id": " 42 ", "status": "", "window": ""}, FlowFilters(task_id=42)),
        ({"last_answer": "5XX"}, FlowFilters(last_answer="5xx")),
    ],
)
def test_filters_are_read_from_text(given: dict[str, str], expected: FlowFilters) -> None:
    assert parse_flow_filters(given, NOW_MS) == expected


def test_a_last_answer_is_none_a_class_or_a_code() -> None:
    assert parse_flow_filters({"last_answer": "none"}, NOW_MS).answer == NO_ANSWER
    assert parse_flow_filters({"last_answer": "4xx"}, NOW_MS).answer == (400, 499)
    assert parse_flow_filters({"last_answer": "503"}, NOW_MS).answer == (503, 503)


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"status": "lost"}, "status"),
        ({"task_id": "12a"}, "task_id"),
        ({"task_id": "0"}, "task_id"),
        ({"task_name_prefix": "x" * 201}, "task_name_prefix"),
        ({"task_name_prefix": "a\x00b"}, "task_name_prefix"),
        ({"target": "bad target"}, "target"),
        ({"last_answer": "6xx"}, "last_answer"),
        ({"last_answer": "timeout"}, "last_answer"),
        ({"window": "2h"}, "window"),
        ({"window": "1h", "from": "1800000000000"}, "window"),
        ({"from": "yesterday"}, "from"),
        ({"from": "1800000000000", "to": "1800000000000"}, "to"),
    ],
)
def test_a_bad_filter_is_refused_naming_its_field(given: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_flow_filters(given, NOW_MS)
    assert refused.value.field == field


def test_filters_kept_by_a_job_read_back_the_same() -> None:
    filters = parse_flow_filters({"window": "1h", "last_answer": "none", "task_name_prefix": " x"}, NOW_MS)
    assert FlowFilters.from_json(filters.to_json()) == filters


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=SUM(A1)", "'=SUM(A1)"),
        ("+1", "'+1"),
        ("-2", "'-2"),
        ("@cmd", "'@cmd"),
        ("\tx", "'\tx"),
        ("ok", "ok"),
        (None, ""),
        (503, "503"),
    ],
)
def test_a_cell_never_starts_as_a_formula(value: object, cell: str) -> None:
    assert safe_cell(value) == cell
