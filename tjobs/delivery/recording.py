"""The in-memory twin of a delivery transport: records every attempt and answers as scripted.

:class:`RecordingTransport` keeps the :class:`tjobs.delivery.transport.Transport` contract without a
socket, so the deliverer, a node (``NodeParts(transport=...)``) or an application's own tests can run
against receivers that answer any status, slowly, never, or not at all::

    transport = RecordingTransport()
    transport.script(Answer(503, retry_after="2"), Answer.timeout(), then=Answer(204))   # any target
    transport.script(Answer(410), url="https://gone.example/hook")                      # one target
    transport.script(Answer.refused(), url="target:orders-mq")                          # a named target
    ... deliver ...
    transport.requests                       # what the receiver got, in arrival order (as sent: signed)
    transport.exchanges                      # every finished attempt: request, answer, result
    await transport.wait_for(3)              # until three requests arrived

Answers are taken in order per target first, then from the any-target script; when a script is used
up its ``then`` answer repeats (``200`` when not given). An attempt is classified exactly as the HTTP
transport classifies the same answer (:func:`tjobs.delivery.retry.classify`, the same ``Retry-After``
cap and the same ``error`` text), and the target policy, if any, is asked first, as a real transport
asks it. A delay counts against the request's ``timeout_ms``: an answer slower than that is a timeout,
after ``timeout_ms`` of (event-loop) time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from tjobs.clock import Clock, SystemClock
from tjobs.delivery.answers import received_answer
from tjobs.delivery.retry import RETRY_AFTER_STATUSES, classify, parse_retry_after
from tjobs.delivery.transport import (
    ERROR_SNIPPET_BYTES,
    MAX_BODY_BYTES,
    AttemptResult,
    CallbackRequest,
    TargetPolicy,
    Transport,
    failure_error,
    judge_target,
    status_error,
)
from tjobs.model import ReceivedAnswer
from tjobs.settings import CallbackSettings
from tjobs.targets.model import Protocol


@dataclass(frozen=True, slots=True)
class Answer:
    """How the receiver (or the network) answers one attempt.

    ``status`` with ``headers`` and ``body`` after ``delay_s``; or, with ``failure`` set, no answer
    at all: the connection failed that way (after ``delay_s``). A ``delay_s`` reaching the request's
    timeout is a timeout.
    """

    status: int = 200
    retry_after: str | None = None  # the ``Retry-After`` header, as the receiver writes it
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay_s: float = 0.0
    failure: OSError | None = None

    @classmethod
    def timeout(cls) -> Answer:
        """The receiver never answers: the attempt times out."""
        return cls(delay_s=float("inf"))

    @classmethod
    def refused(cls) -> Answer:
        """Nothing listens at the target: the connection is refused."""
        return cls(failure=ConnectionRefusedError(111, "Connection refused"))

    @classmethod
    def reset(cls) -> Answer:
        """The receiver takes the request, then drops the connection without answering."""
        return cls(failure=ConnectionResetError(104, "Connection reset by peer"))


OK = Answer(200)


@dataclass(frozen=True, slots=True)
class Exchange:
    """One finished attempt: what was sent, how it was answered (``None``: vetoed or unparsable, no
    answer asked for), what it gave, and how many bytes of the answer's body were read."""

    request: CallbackRequest
    answer: Answer | None
    result: AttemptResult
    body_bytes_read: int


@dataclass
class _Script:
    answers: deque[Answer]
    then: Answer


class RecordingTransport(Transport):
    """A transport that connects nowhere: records every attempt and answers from its scripts."""

    def __init__(
        self,
        settings: CallbackSettings | None = None,
        clock: Clock | None = None,
        policy: TargetPolicy | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        default: Answer = OK,
    ) -> None:
        settings = settings or CallbackSettings()
        self._clock = clock or SystemClock()
        self._policy = policy
        self._max_body_bytes = max_body_bytes
        self._max_retry_after_ms = settings.max_retry_after_s * 1000
        self._scripts: dict[str | None, _Script] = {}
        self._arrived = asyncio.Condition()
        self.default = default
        self.requests: list[CallbackRequest] = []
        """Every attempt that reached the receiver, in arrival order (not the vetoed or refused ones)."""
        self.exchanges: list[Exchange] = []
        """Every finished attempt, in completion order."""
        self.hold: asyncio.Event | None = None
        """While set to an unset event, every attempt waits for it (within its timeout): a stalled receiver."""
        self.closed = 0

    # ---- scripting and inspection -------------------------------------------------------------

    def script(self, *answers: Answer, then: Answer | None = None, url: str | None = None) -> None:
        """Answer attempts to ``url`` (or to any target) with ``answers`` in order, then ``then``."""
        self._scripts[url] = _Script(deque(answers), then or self.default)

    def answer_statuses(self, *statuses: int, then: int = 200, url: str | None = None) -> None:
        """Shorthand: answer these statuses in order, then ``then`` for good."""
        self.script(*(Answer(status) for status in statuses), then=Answer(then), url=url)

    def to(self, url: str) -> list[CallbackRequest]:
        """The requests that reached ``url``."""
        return [r for r in self.requests if r.url == url]

    async def wait_for(self, count: int, timeout_s: float = 5.0) -> list[CallbackRequest]:
        """Wait until ``count`` requests reached the receiver; return them all."""
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)
        return self.requests

    # ---- the contract -------------------------------------------------------------------------

    async def close(self) -> None:
        self.closed += 1

    async def send(self, request: CallbackRequest) -> AttemptResult:
        started_ms = self._clock.now_ms()
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer: Answer | None = None
        status: int | None = None
        error: str | None = None
        retry_after_ms: int | None = None
        failure: BaseException | None = None
        read = 0
        received: ReceivedAnswer | None = None
        try:
            await self._check_target(request)
            answer = self._next_answer(request.url)
            if not isinstance(answer.failure, ConnectionRefusedError):
                async with self._arrived:
                    self.requests.append(request)
                    self._arrived.notify_all()
            async with asyncio.timeout(request.timeout_ms / 1000):
                if self.hold is not None:
                    await self.hold.wait()
                if answer.delay_s:
                    await asyncio.sleep(answer.delay_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = exc
        else:
            failure = answer.failure
            if failure is None:
                status = answer.status
                if status in RETRY_AFTER_STATUSES and answer.retry_after is not None:
                    retry_after_ms = parse_retry_after(answer.retry_after, self._clock.now_ms())
                    if retry_after_ms is not None:
                        retry_after_ms = min(retry_after_ms, self._max_retry_after_ms)
                read = min(len(answer.body), self._max_body_bytes + 1)
                if not 200 <= status < 300:
                    error = status_error(status, answer.body[:ERROR_SNIPPET_BYTES])
                if request.target is None or request.target.protocol is Protocol.HTTP:  # a broker has no answer
                    received = _received(answer, read)
        if failure is not None:
            error = failure_error(failure, request.timeout_ms)
        result = AttemptResult(
            request.flow_id,
            request.url,
            request.attempt,
            classify(status, failure),
            status,
            error,
            retry_after_ms,
            started_ms,
            loop.time() - started,
            answer=received,
        )
        self.exchanges.append(Exchange(request, answer, result, read))
        return result

    async def _check_target(self, request: CallbackRequest) -> None:
        """What a real transport checks before connecting: the policy's verdict, else the URL model.
        A named target's request (standing in for a broker or gRPC transport) is tracked by its name,
        ``target:<name>``, and has no URL to judge."""
        if request.target is not None:
            return
        await judge_target(self._policy, request)

    def _next_answer(self, url: str) -> Answer:
        script = self._scripts.get(url) or self._scripts.get(None)
        if script is None:
            return self.default
        return script.answers.popleft() if script.answers else script.then


def _received(answer: Answer, read: int) -> ReceivedAnswer:
    """The answer as an HTTP transport hands it over (:func:`tjobs.delivery.answers.received_answer`)."""
    headers = list(answer.headers.items())
    if answer.retry_after is not None:
        headers.insert(0, ("Retry-After", answer.retry_after))
    return received_answer(headers, answer.body, read)
