"""The delivery transport contract (:mod:`tjobs.delivery.transport`), run over every transport and the twin.

Each case scripts one receiver answer (an :class:`Answer`) and holds the transport to the same
assertions whatever it is:

* ``aiohttp`` and ``lean`` — the real HTTP transports (:class:`HttpTransport`,
  :class:`LeanHttpTransport`) against a raw asyncio HTTP/1.1 server on 127.0.0.1 started
  here, which acts each answer out on the socket (slow headers, a reset, a body far over the cap,
  a redirect; "refused" is a port nothing listens on);
* ``twin`` — :class:`RecordingTransport` scripted with the very same answers.

What the receiver saw (method, target, headers, body) and how much of an answer's body was taken are
read back through the backend, so the assertions are written once.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from standardwebhooks import Webhook
from yarl import URL

from tjobs.delivery.answers import MASKED
from tjobs.delivery.http import HttpTransport
from tjobs.delivery.lean_http import LeanHttpTransport
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.delivery.signing import generate_secret, signature_header
from tjobs.delivery.transport import (
    ERROR_SNIPPET_BYTES,
    MAX_BODY_BYTES,
    CallbackRequest,
    Outcome,
    Route,
    Transport,
    status_error,
)
from tjobs.model import ANSWER_BODY_BYTES
from tjobs.settings import CallbackSettings

SECRET = generate_secret()
SETTINGS = CallbackSettings(timeout_ms=3000, max_retry_after_s=60)
TIMEOUT_MS = 3000
SHORT_TIMEOUT_MS = 300
HUGE_BODY = b"too long to read " * (2 * 1024 * 1024)  # 34 MiB: far beyond the cap and any socket buffers
_flow_ids = iter(range(1, 1_000_000))


@dataclass(frozen=True)
class Seen:
    """One request as the receiver saw it (header names lower-cased)."""

    method: str
    target: str  # path and query
    headers: dict[str, str]
    body: bytes


async def policy(request: CallbackRequest) -> Route | str | None:
    """A target policy: vetoes ``/vetoed``, cannot decide ``/undecided`` now, lets the rest through."""
    if "/vetoed" in request.url:
        return "not an allowed target"
    if "/undecided" in request.url:
        raise OSError("the resolver did not answer")
    return None


# ---- the real HTTP transport against a raw HTTP/1.1 server ---------------------------------------


@dataclass
class RawHttpReceiver:
    """An HTTP/1.1 server on a loopback socket that answers each path as scripted, byte by byte."""

    answers: dict[str, Answer] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    body_bytes_sent: dict[str, int] = field(default_factory=dict)
    answered: dict[str, asyncio.Event] = field(default_factory=dict)  # per path: its last answer ended
    port: int = 0
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for handler in self._handlers:
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            while await self._exchange(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the server is stopping
        finally:
            self._handlers.discard(handler)
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read one request and act its path's answer out; ``False`` when the connection is done."""
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = request_line.split(" ", 2)
        headers = {}
        for line in lines:
            if line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        path = target.split("?", 1)[0]
        self.seen.append(Seen(method, target, headers, body))
        answered = self.answered[path] = asyncio.Event()
        answer = self.answers.get(path, Answer(404))
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)  # no status line yet: slow headers
        if answer.failure is not None:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            writer.transport.abort()  # RST, no answer
            return False
        reply_headers = dict(answer.headers)
        if answer.retry_after is not None:
            reply_headers["Retry-After"] = answer.retry_after
        reply_headers["Content-Length"] = str(len(answer.body))
        status_line = f"HTTP/1.1 {answer.status} Scripted\r\n"
        writer.write((status_line + "".join(f"{k}: {v}\r\n" for k, v in reply_headers.items()) + "\r\n").encode())
        sent = 0
        view = memoryview(answer.body)
        chunk = 64 * 1024
        try:
            for start in range(0, len(view), chunk):
                writer.write(view[start : start + chunk])
                await writer.drain()
                sent += len(view[start : start + chunk])
        finally:
            self.body_bytes_sent[path] = self.body_bytes_sent.get(path, 0) + sent
            answered.set()
        await writer.drain()
        return True


HTTP_TRANSPORTS: dict[str, type[HttpTransport] | type[LeanHttpTransport]] = {
    "aiohttp": HttpTransport,
    "lean": LeanHttpTransport,
}


class HttpBackend:
    def __init__(self, receiver: RawHttpReceiver, refused_port: int, name: str) -> None:
        self.name = name
        self.receiver = receiver
        self.refused_port = refused_port
        self.transport: Transport = HTTP_TRANSPORTS[name](SETTINGS, policy=policy)

    def target(self, path: str, answer: Answer) -> str:
        if isinstance(answer.failure, ConnectionRefusedError):
            return f"http://127.0.0.1:{self.refused_port}{path}"
        self.receiver.answers[path] = answer
        return f"http://127.0.0.1:{self.receiver.port}{path}"

    def received(self, url: str) -> list[Seen]:
        target = URL(url).raw_path_qs
        return [seen for seen in self.receiver.seen if seen.target == target]

    async def body_bytes_taken(self, url: str) -> int:
        """How much of the answer's body left the server before the client closed (or took it all)."""
        path = URL(url).path
        async with asyncio.timeout(10):
            await self.receiver.answered[path].wait()
        return self.receiver.body_bytes_sent.get(path, 0)


# ---- the twin -------------------------------------------------------------------------------------


class TwinBackend:
    name = "twin"

    def __init__(self) -> None:
        self.twin = RecordingTransport(SETTINGS, policy=policy)
        self.transport: Transport = self.twin

    def target(self, path: str, answer: Answer) -> str:
        url = f"http://127.0.0.1:9{path}"
        self.twin.script(then=answer, url=url)
        return url

    def received(self, url: str) -> list[Seen]:
        return [
            Seen(r.method, URL(r.url).raw_path_qs, {k.lower(): v for k, v in r.headers.items()}, r.body or b"")
            for r in self.twin.to(url)
        ]

    async def body_bytes_taken(self, url: str) -> int:
        return sum(e.body_bytes_read for e in self.twin.exchanges if e.request.url == url)


Backend = HttpBackend | TwinBackend


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(params=["twin", *HTTP_TRANSPORTS])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    made: Backend
    receiver = RawHttpReceiver()
    if request.param in HTTP_TRANSPORTS:
        await receiver.start()
        made = HttpBackend(receiver, unused_port(), request.param)
    else:
        made = TwinBackend()
    try:
        yield made
    finally:
        await made.transport.close()
        if request.param in HTTP_TRANSPORTS:
            await receiver.stop()


def signed_request(url: str, *, timeout_ms: int = TIMEOUT_MS, method: str = "POST") -> CallbackRequest:
    flow_id = f"{next(_flow_ids)}-1800000000000"
    body = b'{"flow_id":"%s","payload":{"order":1}}' % flow_id.encode()
    timestamp_s = int(time.time())  # Standard Webhooks receivers accept 5 minutes either side
    headers = {
        "content-type": "application/json",
        "webhook-id": flow_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature_header([SECRET], flow_id, timestamp_s, body),
        "tjobs-attempt": "3",
        "x-tenant-header": "kept as sent",
    }
    return CallbackRequest("app", flow_id, url, method, headers, body, timeout_ms, 3)


# ---- delivered --------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 204, 299])
async def test_a_2xx_is_delivered(backend: Backend, status: int) -> None:
    request = signed_request(backend.target("/ok", Answer(status)))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status, result.error, result.retry_after_ms) == (
        Outcome.DELIVERED,
        status,
        None,
        None,
    )
    assert (result.flow_id, result.url, result.attempt) == (request.flow_id, request.url, 3)
    assert result.duration_s >= 0.0
    assert len(backend.received(request.url)) == 1


async def test_headers_and_body_arrive_as_sent_and_the_signature_verifies(backend: Backend) -> None:
    request = signed_request(backend.target("/hook", Answer(204)) + "?tenant=a&x=%20y")
    result = await backend.transport.send(request)
    assert result.outcome is Outcome.DELIVERED
    [seen] = backend.received(request.url)
    assert (seen.method, seen.target, seen.body) == ("POST", "/hook?tenant=a&x=%20y", request.body)
    for name, value in request.headers.items():
        assert seen.headers[name] == value
    assert Webhook(SECRET).verify(seen.body, seen.headers)["payload"] == {"order": 1}


async def test_the_answers_headers_and_first_bytes_are_handed_over_secrets_masked(backend: Backend) -> None:
    reply = Answer(503, headers={"X-Why": "busy", "Set-Cookie": "sid=s3cret"}, body=b"b" * 5000)
    result = await backend.transport.send(signed_request(backend.target("/answered", reply)))
    assert result.answer is not None
    assert ("X-Why", "busy") in result.answer.headers and ("Set-Cookie", MASKED) in result.answer.headers
    assert (result.answer.body, result.answer.body_bytes) == (b"b" * ANSWER_BODY_BYTES, 5000)
    stalled = signed_request(backend.target("/no-answer", Answer.timeout()), timeout_ms=SHORT_TIMEOUT_MS)
    assert (await backend.transport.send(stalled)).answer is None


# ---- retryable ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408, 409, 425, 429])
async def test_5xx_and_the_retry_later_4xx_are_retryable(backend: Backend, status: int) -> None:
    request = signed_request(backend.target("/later", Answer(status, body=b"busy\nnow")))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status, result.retry_after_ms) == (Outcome.RETRYABLE, status, None)
    assert result.error == f"HTTP {status}: busy now"


@pytest.mark.parametrize(
    ("status", "retry_after", "expected_ms"),
    [
        (429, "7", 7000),
        (503, "2", 2000),
        (503, "0", 0),
        (429, "100000", 60_000),  # capped by max_retry_after_s
        (503, "Thu, 01 Jan 1970 00:00:00 GMT", 0),  # a date in the past
        (429, "soon", None),  # not a Retry-After
        (500, "5", None),  # honoured on 429 and 503 only
    ],
)
async def test_retry_after_is_honoured_and_capped(
    backend: Backend, status: int, retry_after: str, expected_ms: int | None
) -> None:
    request = signed_request(backend.target("/throttled", Answer(status, retry_after=retry_after)))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status, result.retry_after_ms) == (Outcome.RETRYABLE, status, expected_ms)


async def test_a_receiver_slower_than_the_timeout_is_a_retryable_timeout(backend: Backend) -> None:
    request = signed_request(backend.target("/stalled", Answer.timeout()), timeout_ms=SHORT_TIMEOUT_MS)
    result = await backend.transport.send(request)
    assert (result.outcome, result.status) == (Outcome.RETRYABLE, None)
    assert result.error == f"timeout after {SHORT_TIMEOUT_MS} ms"
    assert len(backend.received(request.url)) == 1


async def test_slow_headers_within_the_timeout_are_waited_for(backend: Backend) -> None:
    request = signed_request(backend.target("/slow", Answer(200, delay_s=0.2)))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status) == (Outcome.DELIVERED, 200)


async def test_slow_headers_past_the_timeout_are_a_timeout(backend: Backend) -> None:
    request = signed_request(backend.target("/slower", Answer(200, delay_s=5.0)), timeout_ms=SHORT_TIMEOUT_MS)
    result = await backend.transport.send(request)
    assert (result.outcome, result.status, result.error) == (
        Outcome.RETRYABLE,
        None,
        f"timeout after {SHORT_TIMEOUT_MS} ms",
    )


async def test_a_refused_connection_is_retryable(backend: Backend) -> None:
    request = signed_request(backend.target("/nobody", Answer.refused()))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status) == (Outcome.RETRYABLE, None)
    assert result.error
    assert backend.received(request.url) == []


async def test_a_connection_reset_without_an_answer_is_retryable(backend: Backend) -> None:
    request = signed_request(backend.target("/reset", Answer.reset()))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status) == (Outcome.RETRYABLE, None)
    assert result.error
    assert len(backend.received(request.url)) == 1


async def test_a_policy_that_cannot_decide_now_is_retryable_and_nothing_is_sent(backend: Backend) -> None:
    request = signed_request(backend.target("/undecided", Answer(200)))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status) == (Outcome.RETRYABLE, None)
    assert result.error == "OSError: the resolver did not answer"
    assert backend.received(request.url) == []


# ---- permanent ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
async def test_other_4xx_are_permanent(backend: Backend, status: int) -> None:
    request = signed_request(backend.target("/refuses", Answer(status, body=b'{"error":"no"}')))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status) == (Outcome.PERMANENT, status)
    assert result.error == f'HTTP {status}: {{"error":"no"}}'


async def test_a_redirect_is_not_followed(backend: Backend) -> None:
    elsewhere = backend.target("/elsewhere", Answer(200))
    request = signed_request(backend.target("/moved", Answer(302, headers={"Location": elsewhere})))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status) == (Outcome.PERMANENT, 302)
    assert len(backend.received(request.url)) == 1
    assert backend.received(elsewhere) == []


async def test_a_target_vetoed_by_the_policy_is_permanent_and_never_connected(backend: Backend) -> None:
    request = signed_request(backend.target("/vetoed", Answer(200)))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status, result.retry_after_ms) == (Outcome.PERMANENT, None, None)
    assert result.error == f"target {request.url} refused: not an allowed target"
    assert backend.received(request.url) == []


async def test_a_url_the_model_refuses_is_permanent(backend: Backend) -> None:
    url = backend.target("/hook", Answer(200)).replace("http://", "http://user@")
    result = await backend.transport.send(signed_request(url))
    assert (result.outcome, result.status) == (Outcome.PERMANENT, None)
    assert result.error is not None and "refused" in result.error
    assert backend.received(url) == []


# ---- bounded ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "outcome"), [(200, Outcome.DELIVERED), (500, Outcome.RETRYABLE)])
async def test_a_body_over_the_cap_is_read_no_further(backend: Backend, status: int, outcome: Outcome) -> None:
    request = signed_request(backend.target(f"/huge{status}", Answer(status, body=HUGE_BODY)))
    result = await backend.transport.send(request)
    assert (result.outcome, result.status) == (outcome, status)
    taken = await backend.body_bytes_taken(request.url)
    assert MAX_BODY_BYTES < taken < len(HUGE_BODY)
    if status != 200:
        assert result.error == status_error(status, HUGE_BODY[:ERROR_SNIPPET_BYTES])


async def test_cancellation_propagates(backend: Backend) -> None:
    request = signed_request(backend.target("/forever", Answer.timeout()), timeout_ms=60_000)
    attempt = asyncio.create_task(backend.transport.send(request))
    for _ in range(500):
        if backend.received(request.url) or attempt.done():
            break
        await asyncio.sleep(0.01)
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt


async def test_a_closed_transport_opens_again_on_the_next_send(backend: Backend) -> None:
    url = backend.target("/again", Answer(200))
    assert (await backend.transport.send(signed_request(url))).outcome is Outcome.DELIVERED
    await backend.transport.close()
    assert (await backend.transport.send(signed_request(url))).outcome is Outcome.DELIVERED
    assert len(backend.received(url)) == 2


async def test_concurrent_attempts_each_get_their_own_answer(backend: Backend) -> None:
    urls = [backend.target(f"/many/{status}", Answer(status)) for status in (200, 500, 404, 429)]
    results = await asyncio.gather(*(backend.transport.send(signed_request(url)) for url in urls))
    assert [(r.url, r.status, r.outcome) for r in results] == [
        (urls[0], 200, Outcome.DELIVERED),
        (urls[1], 500, Outcome.RETRYABLE),
        (urls[2], 404, Outcome.PERMANENT),
        (urls[3], 429, Outcome.RETRYABLE),
    ]
    assert all(len(backend.received(url)) == 1 for url in urls)
