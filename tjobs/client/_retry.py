"""When a call is sent again: only idempotent calls, only after a lost answer or a transient status.

:class:`Exchange` is the whole policy, without I/O: a client sends the call, hands the answer (or the
transport error) to :meth:`Exchange.after`, sleeps the seconds it says and sends again, until it says
``None``; then :meth:`Exchange.result` is the outcome.
"""

from __future__ import annotations

import random
from typing import Any, Generic, TypeVar

import httpx

from tjobs.client._operation import Call
from tjobs.client.errors import TransportError, error_from

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


class Exchange(Generic[T]):
    """One call's attempts: up to ``retries`` resends of an idempotent call, ``backoff_s`` apart (jittered)."""

    def __init__(self, call: Call[T], retries: int, backoff_s: float) -> None:
        self.call = call
        self._retries = retries
        self._backoff_s = backoff_s
        self._attempt = 0
        self._last: httpx.Response | httpx.TransportError | None = None

    def request(self) -> dict[str, Any]:
        """The keyword arguments of ``httpx.Client.request`` for this call."""
        call = self.call
        return {"method": call.method, "url": call.path, "params": call.params or None, "json": call.json}

    def after(self, answer: httpx.Response | httpx.TransportError) -> float | None:
        """Seconds to wait before sending again, or ``None``: ``answer`` is final."""
        self._last = answer
        response = answer if isinstance(answer, httpx.Response) else None
        delay = retry_delay_s(response, self._attempt, self._backoff_s)
        if delay is None or not self.call.idempotent or self._attempt >= self._retries:
            return None
        self._attempt += 1
        return delay

    def result(self) -> T:
        """The final answer parsed, or the error it maps to."""
        answer, call = self._last, self.call
        if isinstance(answer, httpx.Response):
            return result_of(call, answer, self._attempt > 0)
        message = f"{call.method} {call.path}: {type(answer).__name__}: {answer}"
        raise TransportError(message) from answer
