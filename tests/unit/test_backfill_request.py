"""A backfill's request: its range as ISO-8601 instants or epoch ms, in the past, ``from`` before ``to``,
a pace within its bound; every bad field a 422 naming it."""

from __future__ import annotations

from typing import Any

import pytest

from tjobs.errors import InvalidInput
from tjobs.service.backfill import BackfillRequest, parse_backfill_request

NOW_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"to": NOW_MS}, "from"),
        ({"from": 0}, "to"),
        ({"from": None, "to": NOW_MS}, "from"),
        ({"from": True, "to": NOW_MS}, "from"),
        ({"from": "yesterday", "to": NOW_MS}, "from"),
        ({"from": 0, "to": "2027-01-15T08:00:00"}, "to"),  # no offset
        ({"from": 0, "to": NOW_MS + 1}, "to"),  # the future
        ({"from": NOW_MS, "to": NOW_MS}, "from"),
        ({"from": -1, "to": NOW_MS}, "from"),
        ({"from": 0, "to": NOW_MS, "pace_per_s": 0}, "pace_per_s"),
        ({"from": 0, "to": NOW_MS, "pace_per_s": 1001}, "pace_per_s"),
        ({"from": 0, "to": NOW_MS, "pace_per_s": 2.5}, "pace_per_s"),
        ({"from": 0, "to": NOW_MS, "pace_per_s": True}, "pace_per_s"),
        ({"from": 0, "to": NOW_MS, "speed": 3}, "speed"),
    ],
)
def test_every_bad_field_is_a_422_naming_it(body: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_backfill_request(body, NOW_MS)
    assert refused.value.field == field and refused.value.status_code == 422


def test_a_request_takes_iso_instants_or_epoch_ms_and_a_default_pace() -> None:
    request = parse_backfill_request({"from": "2027-01-15T07:00:00+01:00", "to": str(NOW_MS)}, NOW_MS)
    assert request == BackfillRequest(NOW_MS - 2 * 3_600_000, NOW_MS, 10)
