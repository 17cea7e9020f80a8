"""The HTTP transport: one attempt to one callback target, over one shared aiohttp session.

:class:`HttpTransport` keeps the :class:`tjobs.delivery.transport.Transport` contract: it never raises
for a failed attempt; every outcome (status, timeout, refused connection, target vetoed by the URL
policy) comes back as an :class:`AttemptResult` already classified by
:func:`tjobs.delivery.retry.classify`. Only cancellation propagates.

With a target policy, every attempt connects only to the addresses the policy judged for it (its
:class:`Route`): the URL handed to aiohttp carries the address, the ``Host`` header and the TLS name
(SNI and certificate verification) carry the host, so aiohttp never resolves or re-parses the host.
Redirects are not followed; the response body is read (so the connection can be kept alive) and
discarded, up to ``max_body_bytes``, beyond which the connection is closed instead; its first bytes
and the answer's first headers are kept for the flow's page (:mod:`tjobs.delivery.answers`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Mapping

import aiohttp
from yarl import URL

from tjobs.clock import Clock, SystemClock
from tjobs.delivery.answers import received_answer
from tjobs.delivery.retry import RETRY_AFTER_STATUSES, classify, parse_retry_after
from tjobs.delivery.transport import (
    ERROR_SNIPPET_BYTES,
    MAX_BODY_BYTES,
    AttemptResult,
    CallbackRequest,
    Outcome,
    TargetPolicy,
    Transport,
    failure_error,
    judge_target,
    log_unexpected_error,
    status_error,
)
from tjobs.model import ANSWER_BODY_BYTES, ReceivedAnswer
from tjobs.settings import CallbackSettings
from tjobs.targets.urls import CallbackUrl, IPAddress

logger = logging.getLogger(__name__)


class HttpTransport(Transport):
    """Sends callback attempts over one keep-alive ``aiohttp.ClientSession``, opened on first use."""

    def __init__(
        self,
        settings: CallbackSettings,
        clock: Clock | None = None,
        policy: TargetPolicy | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()
        self._policy = policy
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._max_body_bytes = max_body_bytes
        self._max_retry_after_ms = settings.max_retry_after_s * 1000
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[int, aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        # Multicast sends up to a few targets per limiter slot, so the pool is a backstop above the
        # global in-flight cap, never the limit callers queue on (a pool wait counts in the timeout).
        connector = aiohttp.TCPConnector(
            limit=self._settings.global_max_in_flight * 2,
            limit_per_host=0,
            ttl_dns_cache=60,
            keepalive_timeout=30,
            ssl=self._ssl,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": self._settings.user_agent},
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            raise_for_status=False,
        )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _timeout(self, timeout_ms: int) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(timeout_ms)
        if timeout is None:
            timeout = self._timeouts[timeout_ms] = aiohttp.ClientTimeout(total=timeout_ms / 1000)
        return timeout

    async def send(self, request: CallbackRequest) -> AttemptResult:
        started_ms = self._clock.now_ms()
        loop = asyncio.get_running_loop()
        started = loop.time()
        status: int | None = None
        failure: BaseException | None = None
        error: str | None = None
        retry_after_ms: int | None = None
        answer: ReceivedAnswer | None = None
        try:
            targets = await self._targets(request)
            session = self._session or self._open()
            deadline = started + request.timeout_ms / 1000
            for index, (url, headers, tls_name) in enumerate(targets):
                timeout = self._timeout(request.timeout_ms)
                if index:
                    timeout = aiohttp.ClientTimeout(total=max(deadline - loop.time(), 0.001))
                try:
                    async with session.request(
                        request.method,
                        url,
                        data=request.body,
                        headers=headers,
                        allow_redirects=False,
                        timeout=timeout,
                        server_hostname=tls_name,
                    ) as response:
                        status = response.status
                        if status in RETRY_AFTER_STATUSES:
                            header = response.headers.get("Retry-After")
                            if header is not None:
                                retry_after_ms = parse_retry_after(header, self._clock.now_ms())
                                if retry_after_ms is not None:
                                    retry_after_ms = min(retry_after_ms, self._max_retry_after_ms)
                        snippet, read = await self._drain(response)
                        if not 200 <= status < 300:
                            error = status_error(status, snippet[:ERROR_SNIPPET_BYTES])
                        answer = received_answer(response.headers.items(), snippet, read)
                    break
                except aiohttp.ClientConnectorError:
                    # nothing was sent: the next judged address, if any and if time is left
                    if index == len(targets) - 1 or loop.time() >= deadline:
                        raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = exc
            if status is None:
                error = failure_error(exc, request.timeout_ms)
            # else: the receiver answered, then the body failed; the status decides the outcome.
        outcome = classify(status, None if status is not None else failure)
        expected = isinstance(failure, OSError | TimeoutError | aiohttp.ClientError)
        if outcome is Outcome.RETRYABLE and status is None and not expected:
            log_unexpected_error(logger, request, error, failure)
        return request.result(outcome, status, error, retry_after_ms, started_ms, loop.time() - started, answer=answer)

    async def _targets(self, request: CallbackRequest) -> list[tuple[URL, Mapping[str, str], str | None]]:
        """What to connect to, in order: ``(URL, headers, TLS name)`` per judged address; with no
        route (no policy, or a policy answering ``None``) the URL model's ASCII URL, resolved by aiohttp."""
        judged = await judge_target(self._policy, request)
        if isinstance(judged, CallbackUrl):
            return [(URL(judged.text(), encoded=True), request.headers, None)]
        targets = [_connect_target(judged.url, address) for address in judged.addresses]
        headers = {**request.headers, "Host": targets[0][1]}
        return [(url, headers, tls_name) for url, _, tls_name in targets]

    async def _drain(self, response: aiohttp.ClientResponse) -> tuple[bytes, int]:
        """Read and discard the body; keep its first bytes (for the error and the flow's page) and count
        what was read."""
        content = response.content
        kept = b""
        total = 0
        while True:
            chunk = await content.readany()
            if not chunk:
                return kept, total
            total += len(chunk)
            if len(kept) < ANSWER_BODY_BYTES:
                kept += chunk[: ANSWER_BODY_BYTES - len(kept)]
            if total > self._max_body_bytes:
                response.close()  # not worth reading: drop the connection instead of keeping it
                return kept, total


@functools.lru_cache(maxsize=16384)
def _connect_target(url: CallbackUrl, address: IPAddress) -> tuple[URL, str, str | None]:
    """The already-encoded URL that connects to ``address``, the ``Host`` header and the TLS name."""
    return URL(url.url_for(address), encoded=True), url.host_header, url.tls_name
