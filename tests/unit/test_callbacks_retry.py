"""Retry policy: full-jitter backoff, Retry-After parsing and the outcome of each answer."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tjobs.clock import datetime_to_ms
from tjobs.delivery.retry import classify, compute_backoff_ms, parse_retry_after
from tjobs.delivery.transport import Outcome, TargetRejected

# ---- backoff ---------------------------------------------------------------------------------------


class _Fixed(random.Random):
    """An rng whose ``random()`` always returns ``value``: pins the jitter to a fraction of the ceiling."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@given(
    attempt=st.integers(1, 200),
    base_ms=st.integers(0, 100_000),
    max_ms=st.integers(0, 10_000_000),
    seed=st.integers(0, 2**32),
)
def test_backoff_stays_within_zero_and_the_capped_exponential_ceiling(
    attempt: int, base_ms: int, max_ms: int, seed: int
) -> None:
    delay = compute_backoff_ms(attempt, base_ms, max_ms, random.Random(seed))
    assert 0 <= delay <= min(max_ms, base_ms * 2 ** (attempt - 1))


@pytest.mark.parametrize(
    ("attempt", "expected_ceiling_ms"),
    [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1600), (6, 3000), (60, 3000), (10_000, 3000)],
)
def test_backoff_ceiling_doubles_per_attempt_up_to_the_cap(attempt: int, expected_ceiling_ms: int) -> None:
    top = compute_backoff_ms(attempt, 100, 3000, _Fixed(0.999_999_999))
    bottom = compute_backoff_ms(attempt, 100, 3000, _Fixed(0.0))
    assert top == expected_ceiling_ms
    assert bottom == 0


def test_backoff_jitter_is_uniform_over_the_whole_range() -> None:
    rng = random.Random(1234)
    samples = [compute_backoff_ms(4, 1000, 60_000, rng) for _ in range(20_000)]  # ceiling 8000 ms
    assert min(samples) < 100
    assert max(samples) > 7900
    mean = sum(samples) / len(samples)
    assert 3900 < mean < 4100  # uniform on [0, 8000]: mean 4000
    deciles = [0] * 10
    for sample in samples:
        deciles[min(sample * 10 // 8001, 9)] += 1
    assert all(1800 < count < 2200 for count in deciles), deciles


def test_backoff_is_reproducible_with_a_seeded_rng() -> None:
    first = [compute_backoff_ms(n, 50, 10_000, random.Random(7)) for n in range(1, 10)]
    second = [compute_backoff_ms(n, 50, 10_000, random.Random(7)) for n in range(1, 10)]
    assert first == second


def test_backoff_rejects_attempt_zero() -> None:
    with pytest.raises(ValueError):
        compute_backoff_ms(0, 100, 1000, random.Random())


# ---- Retry-After -------------------------------------------------------------------------------------

NOW_MS = datetime_to_ms(datetime(2026, 11, 21, 9, 0, 0, tzinfo=UTC))


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [
        ("0", 0),
        ("1", 1000),
        ("120", 120_000),
        ("  30 ", 30_000),
        ("Sat, 21 Nov 2026 09:00:30 GMT", 30_000),  # IMF-fixdate
        ("Saturday, 21-Nov-26 09:01:00 GMT", 60_000),  # obsolete RFC 850
        ("Sat Nov 21 09:00:05 2026", 5_000),  # obsolete asctime
        ("Sat, 21 Nov 2026 08:59:00 GMT", 0),  # in the past: retry now
    ],
)
def test_retry_after_accepts_seconds_and_http_dates(value: str, expected_ms: int) -> None:
    assert parse_retry_after(value, NOW_MS) == expected_ms


@pytest.mark.parametrize("value", ["", "   ", "soon", "-5", "1.5", "1e3", "Sat, 99 Nov 2026 09:00:30 GMT", "0x10"])
def test_retry_after_garbage_is_none(value: str) -> None:
    assert parse_retry_after(value, NOW_MS) is None


@given(st.text(max_size=60))
def test_retry_after_never_raises(value: str) -> None:
    result = parse_retry_after(value, NOW_MS)
    assert result is None or result >= 0


# ---- classification ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_delivered(status: int) -> None:
    assert classify(status, None) is Outcome.DELIVERED


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 599, 100])
def test_5xx_and_transient_4xx_are_retryable(status: int) -> None:
    assert classify(status, None) is Outcome.RETRYABLE


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 410, 413, 422, 451, 301, 302, 307, 308])
def test_other_4xx_and_redirects_are_permanent(status: int) -> None:
    assert classify(status, None) is Outcome.PERMANENT


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError(),
        aiohttp.ServerTimeoutError("read timeout"),
        ConnectionRefusedError(),
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientPayloadError("truncated"),
        RuntimeError("something unexpected"),
    ],
)
def test_timeouts_connection_errors_and_surprises_are_retryable(error: BaseException) -> None:
    assert classify(None, error) is Outcome.RETRYABLE


@pytest.mark.parametrize(
    "error",
    [TargetRejected("http://10.0.0.1/", "private address"), aiohttp.InvalidURL("http://")],
)
def test_a_vetoed_or_malformed_target_is_permanent(error: BaseException) -> None:
    assert classify(None, error) is Outcome.PERMANENT


def test_a_status_wins_over_an_error_reading_the_body() -> None:
    assert classify(200, aiohttp.ClientPayloadError("body cut")) is Outcome.DELIVERED


def test_retry_after_of_non_ascii_digits_is_ignored_not_an_error() -> None:
    assert parse_retry_after("²", 0) is None  # str.isdigit() admits it; int() does not
