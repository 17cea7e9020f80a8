"""``iso_ms``: the envelope's ``scheduled_at`` text, the same as ``datetime.isoformat`` gives it."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from tjobs.clock import iso_ms


def _by_datetime(instant_ms: int) -> str:
    instant = datetime.fromtimestamp(instant_ms / 1000, tz=UTC)
    return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("instant_ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (1_795_930_346_099, "2026-11-29T05:32:26.099Z"),
        (1_795_930_346_999, "2026-11-29T05:32:26.999Z"),
        (1_795_930_347_000, "2026-11-29T05:32:27.000Z"),
    ],
)
def test_iso_ms_reads_as_utc_with_milliseconds(instant_ms: int, text: str) -> None:
    assert iso_ms(instant_ms) == text


def test_iso_ms_is_what_datetime_gives_for_any_instant() -> None:
    """Up to 2^33 s (the year 2242), where a float of seconds still holds every microsecond."""
    rng = random.Random(13)
    instants = [rng.randrange(-2_000_000_000_000, 2**33 * 1000) for _ in range(20_000)]
    instants += [1_795_930_346_000 + i for i in range(-1500, 1500)]  # repeated seconds: the cached part
    for instant_ms in instants:
        assert iso_ms(instant_ms) == _by_datetime(instant_ms), instant_ms


def test_iso_ms_keeps_the_millisecond_of_far_instants() -> None:
    """Beyond 2242 a float of seconds rounds away microseconds (``datetime`` from ``ms / 1000`` read
    ``…27.196Z`` here); the integer split does not."""
    assert iso_ms(20_940_218_007_197) == "2633-07-27T15:13:27.197Z"
