"""When a call is sent again: only idempotent calls, only after a lost answer or a transient status."""

from __future__ import annotations

import random
from typing import Any, TypeVar

import httpx

from tjobs.client._calls import Call
from tjobs.client.errors import error_from

T = TypeVar("T")
TRANSIENT_STATUSES = frozenset({502, 503, 504})
MAX_RETRY_AFTER_S = 30.0


def retry_delay_s(response: httpx.Response | None, attempt: int, base_s: float) -> float | None:
    """Seconds to wait before resending, or ``None`` if this answer is final."""
    if response is not None:
        status = response.status_code
        retry_after = response.headers.get("retry-after")
        if status == 429 and retry_after is None:
            return None  # a quota, not a pause: resending cannot help
        if status not in TRANSIENT_STATUSES and status != 429:
            return None
        if retry_after is not None and retry_after.isascii() and retry_after.isdigit():
            return min(float(retry_after), MAX_RETRY_AFTER_S)
    return random.uniform(0, base_s * (2**attempt))  # full jitter


def result_of(call: Call[T], response: httpx.Response, resent: bool) -> T:
    status = response.status_code
    if 200 <= status < 300:
        return call.parse(response.json() if response.content else None)
    if status == 404 and call.missing_ok and resent:
        return call.parse(None)  # the lost first attempt did it
    body: Any
    try:
        body = response.json()
    except ValueError:
        body = response.text
    raise error_from(status, body)
