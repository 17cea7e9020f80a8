"""The delivery transport contract: one attempt of one flow to one target, answered by a classified result.

Everything in delivery above this seam (the deliverer's retries, backoff, dead letter, rate limits,
concurrency caps, metrics and SLO accounting) is protocol-blind and codes against :class:`Transport`
only. A transport (HTTP today: :class:`tjobs.delivery.http.HttpTransport`; the in-memory twin:
:class:`tjobs.delivery.recording.RecordingTransport`) promises, for every :meth:`Transport.send`:

* **One attempt, one target.** The request is final (signed headers and body); the transport sends
  it as given, adds nothing the receiver could mistake for the payload, and never retries or follows
  a redirect on its own.
* **Never raises for a failed attempt.** Every outcome comes back as an :class:`AttemptResult`:

  - :attr:`Outcome.DELIVERED` — the receiver acknowledged it (HTTP ``2xx``);
  - :attr:`Outcome.RETRYABLE` — a timeout, a refused or reset connection, a target that does not
    resolve now, or an answer meaning "later" (HTTP ``5xx``, ``408``, ``409``, ``425``, ``429``);
    ``retry_after_ms`` carries the delay the receiver asked for (capped), ``None`` if it did not say;
  - :attr:`Outcome.PERMANENT` — the receiver understood and refused (HTTP other ``4xx``, ``3xx``:
    resending the same request cannot change the answer);
  - **vetoed by policy** — the :data:`TargetPolicy` refused the target before anything was
    connected: :attr:`Outcome.PERMANENT` with no ``status`` and the refusal in ``error``.

  Only cancellation propagates (``asyncio.CancelledError``), so a deliverer stopping can abandon an
  attempt; anything unexpected is a retryable result (bounded by ``max_attempts``), never a lost fire.
* **Exact targets.** With a policy, the transport asks it before connecting and connects only to the
  :class:`Route`'s judged addresses, in order, the next only if connecting to the previous one
  failed; nothing re-resolves or re-parses the host (see :mod:`tjobs.delivery.ssrf`).
* **Bounded.** The attempt ends within ``timeout_ms`` (connect, send and the answer together); the
  receiver's answer is read no further than a fixed cap, and only its first bytes are kept for
  ``error``.
* :meth:`Transport.close` releases connections; a transport is reopened lazily by the next send.
* **Credentials stay secret.** A named target's ``credentials`` are used to connect and never appear
  in ``error`` (nor in a log line): a broker's own error text is scrubbed of them.
* **Any protocol.** Message transports (AMQP, NATS JetStream, Redis Streams) and gRPC send the same
  signed headers and body as HTTP (headers as message headers / call metadata, the flow id as the
  message id and idempotency key); their acknowledgement (publisher confirm, JetStream ack, ``XADD``
  id, a ``Fire`` reply) is ``DELIVERED``, and their failures map onto the same three outcomes.

``tests/contract/test_transport_contract.py`` holds every transport and the twin to this.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from tjobs.delivery.allow_list import EMPTY_ALLOW_LIST, AllowList
from tjobs.model import AttemptResult as AttemptResult  # re-exported: it lives with the records, below the
from tjobs.model import Outcome as Outcome  # observer that names it (docs/design.md, "Layering")
from tjobs.model import ReceivedAnswer
from tjobs.targets.model import Target
from tjobs.targets.urls import CallbackUrl, IPAddress, UrlRefused, parse_callback_url

MAX_BODY_BYTES = 64 * 1024  # a receiver's answer is read no further than this
ERROR_SNIPPET_BYTES = 160  # the first bytes of a failed answer kept for ``AttemptResult.error``
MAX_ERROR_CHARS = 240


class TargetRejected(Exception):
    """The target was vetoed by the target policy before connecting; never retried."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"target {url} refused: {reason}")
        self.url = url
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CallbackRequest:
    """One attempt to one target, fully built and signed (headers and body are final), with its app's
    allow-list for the target policy (so judging the target needs no app lookup)."""

    app_id: str
    flow_id: str
    url: str
    method: str
    headers: Mapping[str, str]
    body: bytes | None
    timeout_ms: int
    attempt: int
    allow_list: AllowList = EMPTY_ALLOW_LIST
    # A named target (:mod:`tjobs.targets.model`): its protocol picks the transport and its settings
    # say where to send. ``None``: an inline HTTP callback to ``url``. For a target, ``url`` is the
    # name the flow tracks it by (``target:<name>``), never an address carrying credentials.
    target: Target | None = None

    def result(
        self,
        outcome: Outcome,
        status: int | None,
        error: str | None,
        retry_after_ms: int | None,
        started_ms: int,
        duration_s: float,
        sent_ms: int | None = None,
        answer: ReceivedAnswer | None = None,
    ) -> AttemptResult:
        """This attempt's :class:`AttemptResult` (its flow, URL and attempt number with what it gave)."""
        return AttemptResult(
            self.flow_id,
            self.url,
            self.attempt,
            outcome,
            status,
            error,
            retry_after_ms,
            started_ms,
            duration_s,
            sent_ms,
            answer,
        )


@dataclass(frozen=True, slots=True)
class Route:
    """Where one attempt may connect: the parsed target and the addresses judged for its host
    (tried in order; the next only if connecting to the previous one failed)."""

    url: CallbackUrl
    addresses: tuple[IPAddress, ...]


TargetPolicy = Callable[[CallbackRequest], Awaitable[Route | str | None]]
"""Checked before connecting: return the :class:`Route` to connect to, a reason to refuse the
target, or ``None`` to let the transport resolve the host itself (only for policies that do not
judge addresses; :class:`tjobs.delivery.ssrf.TargetGuard` always returns a route or a reason).

A refusal is a permanent failure (the flow goes to the dead letter). A policy that cannot decide
right now (its DNS lookup timed out, say) should raise ``OSError`` or ``TimeoutError`` instead: the
attempt then counts as a retryable failure. Without a policy every target the URL model accepts is
allowed.
"""


async def judge_target(policy: TargetPolicy | None, request: CallbackRequest) -> Route | CallbackUrl:
    """What an attempt to a URL may connect to: the policy's :class:`Route`, which has at least one
    judged address, or with no route (no policy, or a policy answering ``None``) the URL as the URL model
    parses it. A refusal (the policy's, the URL model's, a route without addresses) raises
    :class:`TargetRejected`."""
    verdict = await policy(request) if policy is not None else None
    if isinstance(verdict, str):
        raise TargetRejected(request.url, verdict)
    if verdict is None:
        try:
            return parse_callback_url(request.url)
        except UrlRefused as refused:
            raise TargetRejected(request.url, refused.reason) from None
    if not verdict.addresses:
        raise TargetRejected(request.url, "no judged address to connect to")
    return verdict


class Transport(ABC):
    """Sends one attempt of one flow to one target (see the module docstring for the contract)."""

    @abstractmethod
    async def send(self, request: CallbackRequest) -> AttemptResult:
        """Make the attempt and classify it; never raises for a failed attempt, only cancellation."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections; a later :meth:`send` opens them again."""


def status_error(status: int, snippet: bytes) -> str:
    """The ``error`` of an answer that is not a delivery: the status and the answer's first bytes."""
    text = snippet.decode("utf-8", "replace").strip().replace("\n", " ")
    return f"HTTP {status}: {text}"[:MAX_ERROR_CHARS] if text else f"HTTP {status}"


def log_unexpected_error(
    logger: logging.Logger, request: CallbackRequest, error: str | None, failure: BaseException | None = None
) -> None:
    """Log an attempt that failed in a way its transport does not expect (not a timeout, connection
    error or veto: a bug, or a library's surprise); the attempt is still answered as retryable."""
    logger.warning(
        "unexpected error calling %s for flow %s: %s",
        request.url,
        request.flow_id,
        error,
        exc_info=failure,
        extra={"action": "callback_unexpected_error", "flow_id": request.flow_id},
    )


def failure_error(exc: BaseException, timeout_ms: int) -> str:
    """The ``error`` of an attempt that got no answer (timeout, connection error, veto)."""
    if isinstance(exc, TimeoutError):
        return f"timeout after {timeout_ms} ms"
    if isinstance(exc, TargetRejected):
        return str(exc)[:MAX_ERROR_CHARS]
    text = str(exc)
    return f"{type(exc).__name__}: {text}"[:MAX_ERROR_CHARS] if text else type(exc).__name__
