"""Retry policy of callbacks, as pure functions: classification, backoff, ``Retry-After``.

Classification (what an attempt's result means for its flow):

* ``2xx`` — delivered.
* ``408`` Request Timeout, ``409`` Conflict, ``425`` Too Early, ``429`` Too Many Requests and every
  ``5xx`` — retryable; ``429`` and ``503`` may carry ``Retry-After``, which is honoured.
* any other ``4xx`` — permanent: the receiver understood the request and refuses it (bad URL path,
  missing auth, validation error). Resending the same signed request cannot change that answer, so the
  flow goes to the dead letter at once, where an operator can fix the task and re-drive it, instead of
  hammering the receiver ``max_attempts`` times.
* ``3xx`` — permanent: redirects are never followed (a callback target must be the final URL, and
  following one would let a receiver point tjobs at another host).
* ``1xx`` and other oddities — retryable.
* no status: timeouts and connection errors are retryable; a target refused by the URL policy or a
  malformed URL is permanent; anything unexpected is retryable (bounded by ``max_attempts``), so a bug
  never silently drops a fire.
"""

from __future__ import annotations

import random
import sys
from datetime import UTC
from email.utils import parsedate_to_datetime

from tjobs.clock import datetime_to_ms
from tjobs.delivery.transport import Outcome, TargetRejected

RETRYABLE_4XX = frozenset({408, 409, 425, 429})
RETRY_AFTER_STATUSES = frozenset({429, 503})
_MAX_SHIFT = 62


def classify(status: int | None, error: BaseException | None) -> Outcome:
    """What one attempt means: see the module docstring for the table."""
    if status is not None:
        if 200 <= status < 300:
            return Outcome.DELIVERED
        if 300 <= status < 400:
            return Outcome.PERMANENT
        if 400 <= status < 500:
            return Outcome.RETRYABLE if status in RETRYABLE_4XX else Outcome.PERMANENT
        return Outcome.RETRYABLE
    if isinstance(error, TargetRejected) or _is_aiohttp_url_error(error):
        return Outcome.PERMANENT
    return Outcome.RETRYABLE


def _is_aiohttp_url_error(error: BaseException | None) -> bool:
    """aiohttp's malformed-URL errors (only the aiohttp transport raises them). aiohttp is looked up, not
    imported: where it was never imported none of its errors can exist, and the default (lean) transport
    runs without it."""
    aiohttp = sys.modules.get("aiohttp")
    return aiohttp is not None and isinstance(error, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError)


def compute_backoff_ms(attempt: int, base_ms: int, max_ms: int, rng: random.Random) -> int:
    """Delay before the attempt after failed attempt number ``attempt`` (1-based), full jitter.

    Uniform in ``[0, min(max_ms, base_ms * 2 ** (attempt - 1))]`` ("Exponential Backoff And
    Jitter", AWS Architecture Blog): the ceiling doubles per attempt up to ``max_ms``, and the
    jitter spreads retries of a burst of failures so they do not hit the receiver together.
    """
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    ceiling = min(max_ms, base_ms << min(attempt - 1, _MAX_SHIFT))
    if ceiling <= 0:
        return 0
    return min(int(rng.random() * (ceiling + 1)), ceiling)


def parse_retry_after(value: str, now_ms: int) -> int | None:
    """A ``Retry-After`` header as a delay in ms from ``now_ms``; ``None`` if it is not valid.

    Either delay-seconds (digits) or an HTTP-date (RFC 9110 §10.2.3); a date in the past is ``0``.
    The caller caps the delay (``max_retry_after_s``).
    """
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():  # isdigit() alone admits '²', which int() refuses
        return int(text) * 1000
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" per RFC 5322: UTC with no claim about local time
        when = when.replace(tzinfo=UTC)
    return max(datetime_to_ms(when) - now_ms, 0)
