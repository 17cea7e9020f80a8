"""What the transport contract asks of a real HTTP transport on the wire, over every one of them.

Beyond the contract suite (``test_transport_contract.py``), these cases need connections and bytes the
twin has none of: keep-alive reuse, a receiver closing between requests or saying ``Connection:
close``, chunked and read-until-close answers, an interim ``100 Continue``, TLS with a CA the
transport trusts and one it does not, and no name lookup when the policy hands a route. Each runs over
every ``callbacks.transport`` (``aiohttp`` and ``lean``) against a raw HTTP/1.1 server on 127.0.0.1
whose answers are written byte for byte.
"""

from __future__ import annotations

import asyncio
import ipaddress
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.http_transports import HTTP_TRANSPORTS, HttpTransportClass
from tjobs.delivery.lean_http import LeanHttpTransport
from tjobs.delivery.signing import generate_secret, signature_header
from tjobs.delivery.transport import MAX_BODY_BYTES, CallbackRequest, Outcome, Route, Transport
from tjobs.settings import CallbackSettings
from tjobs.targets.urls import parse_callback_url

SETTINGS = CallbackSettings(timeout_ms=3000, max_retry_after_s=60)
SECRET = generate_secret()
LOOPBACK = ipaddress.ip_address("127.0.0.1")

# ---- name lookups while sending (an audit hook: getaddrinfo from any library) -----------------------

LOOKUPS: list[Any] = []
_RECORDING = [False]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _RECORDING[0] and event == "socket.getaddrinfo":
        LOOKUPS.append(args[0])


if not getattr(sys, "_tjobs_http_transports_audit", False):
    sys.addaudithook(_audit)
    sys._tjobs_http_transports_audit = True  # type: ignore[attr-defined]


# ---- a raw HTTP/1.1 server -------------------------------------------------------------------------

Respond = Callable[[str], tuple[bytes, bool]]
"""Path → the answer's bytes as written, and whether the server closes the connection after them."""


def answer(status: int, body: bytes = b"", *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status} Scripted\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


@dataclass
class RawServer:
    respond: Respond
    tls: ssl.SSLContext | None = None
    port: int = 0
    connections: int = 0
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    closed_by_server: asyncio.Event = field(default_factory=asyncio.Event)
    closed_by_client: asyncio.Event = field(default_factory=asyncio.Event)  # set at each, cleared by readers
    client_closes: int = 0
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
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
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines:
                    if line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                path = request_line.split(" ")[1]
                self.requests.append((path, headers, body))
                data, close = self.respond(path)
                writer.write(data)
                await writer.drain()
                if close:
                    writer.close()
                    await writer.wait_closed()
                    self.closed_by_server.set()
                    return
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            self.client_closes += 1
            self.closed_by_client.set()
        except asyncio.CancelledError:
            pass
        finally:
            self._handlers.discard(handler)
            writer.close()


# ---- fixtures and helpers ---------------------------------------------------------------------------


@pytest.fixture(params=list(HTTP_TRANSPORTS))
def transport_class(request: pytest.FixtureRequest) -> HttpTransportClass:
    return HTTP_TRANSPORTS[request.param]


async def to_loopback(request: CallbackRequest) -> Route:
    """A target policy judging every name to 127.0.0.1 (the node's guard does the same with DNS)."""
    return Route(parse_callback_url(request.url), (LOOPBACK,))


def signed(url: str) -> CallbackRequest:
    flow_id = "42-1800000000000"
    body = b'{"flow_id":"42-1800000000000","payload":{"order":1}}'
    timestamp_s = int(time.time())
    headers = {
        "content-type": "application/json",
        "webhook-id": flow_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature_header([SECRET], flow_id, timestamp_s, body),
    }
    return CallbackRequest("app", flow_id, url, "POST", headers, body, SETTINGS.timeout_ms, 1)


@pytest.fixture
async def made(transport_class: HttpTransportClass) -> AsyncIterator[Callable[..., Transport]]:
    transports: list[Transport] = []

    def make(**options: Any) -> Transport:
        transport = transport_class(SETTINGS, **options)
        transports.append(transport)
        return transport

    yield make
    for transport in transports:
        await transport.close()


async def until_the_client_saw_the_close(server: RawServer) -> None:
    """The server closed; let the client's event loop read that end of stream (a few turns)."""
    await asyncio.wait_for(server.closed_by_server.wait(), 5)
    for _ in range(20):
        await asyncio.sleep(0)


# ---- keep-alive ------------------------------------------------------------------------------------


async def test_a_kept_alive_connection_carries_the_next_attempts(made: Callable[..., Transport]) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (answer(204), False)) as server:
        for _ in range(5):
            result = await transport.send(signed(f"http://hook.test:{server.port}/hook"))
            assert (result.outcome, result.status) == (Outcome.DELIVERED, 204)
        assert (server.connections, len(server.requests)) == (1, 5)
        for path, headers, body in server.requests:
            assert path == "/hook" and headers["host"] == f"hook.test:{server.port}"
            assert Webhook(SECRET).verify(body, headers)["payload"] == {"order": 1}


async def test_concurrent_attempts_each_take_their_own_connection_then_reuse_them(
    made: Callable[..., Transport],
) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (answer(200), False)) as server:
        url = f"http://hook.test:{server.port}/hook"
        for _ in range(3):
            results = await asyncio.gather(*(transport.send(signed(url)) for _ in range(20)))
            assert {r.outcome for r in results} == {Outcome.DELIVERED}
        assert len(server.requests) == 60 and server.connections <= 20 * 2


async def test_a_receiver_closing_between_requests_costs_nothing(made: Callable[..., Transport]) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (answer(200), True)) as server:  # closes after each answer, unannounced
        url = f"http://hook.test:{server.port}/hook"
        assert (await transport.send(signed(url))).outcome is Outcome.DELIVERED
        await until_the_client_saw_the_close(server)
        server.closed_by_server.clear()
        assert (await transport.send(signed(url))).outcome is Outcome.DELIVERED
        assert (server.connections, len(server.requests)) == (2, 2)


async def test_connection_close_is_honoured(made: Callable[..., Transport]) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (answer(200, b"", "Connection: close"), False)) as server:
        url = f"http://hook.test:{server.port}/hook"
        for _ in range(3):
            assert (await transport.send(signed(url))).outcome is Outcome.DELIVERED
        assert (server.connections, len(server.requests)) == (3, 3)


# ---- answers llhttp reads ----------------------------------------------------------------------------


CHUNKED_503 = (
    b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nbusy \r\n4;ext=1\r\nnow,\r\n6\r\n later\r\n0\r\nTrailer: x\r\n\r\n"
)


async def test_a_chunked_answer_is_read_and_the_connection_kept(made: Callable[..., Transport]) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (CHUNKED_503, False)) as server:
        url = f"http://hook.test:{server.port}/hook"
        for _ in range(2):
            result = await transport.send(signed(url))
            assert (result.outcome, result.status, result.retry_after_ms) == (Outcome.RETRYABLE, 503, 7000)
            assert result.error == "HTTP 503: busy now, later"
        assert server.connections == 1


async def test_a_chunked_answer_over_the_cap_is_read_no_further(made: Callable[..., Transport]) -> None:
    chunk = b"x" * 8192
    many = b"".join(b"2000\r\n" + chunk + b"\r\n" for _ in range(4 * MAX_BODY_BYTES // len(chunk)))
    transport = made(policy=to_loopback)
    async with RawServer(
        lambda path: (b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n" + many + b"0\r\n\r\n", False)
    ) as server:
        result = await transport.send(signed(f"http://hook.test:{server.port}/hook"))
        assert (result.outcome, result.status) == (Outcome.RETRYABLE, 500)
        assert result.error is not None and result.error.startswith("HTTP 500: xxxx")


async def test_an_answer_read_until_close_counts(made: Callable[..., Transport]) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (b"HTTP/1.1 410 Gone\r\nConnection: close\r\n\r\nno more", True)) as server:
        result = await transport.send(signed(f"http://hook.test:{server.port}/hook"))
        assert (result.outcome, result.status, result.error) == (Outcome.PERMANENT, 410, "HTTP 410: no more")


async def test_an_interim_100_continue_is_followed_by_the_answer(made: Callable[..., Transport]) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (b"HTTP/1.1 100 Continue\r\n\r\n" + answer(201), False)) as server:
        result = await transport.send(signed(f"http://hook.test:{server.port}/hook"))
        assert (result.outcome, result.status) == (Outcome.DELIVERED, 201)


async def test_an_answer_that_is_not_http_is_retryable(made: Callable[..., Transport]) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", True)) as server:
        result = await transport.send(signed(f"http://hook.test:{server.port}/hook"))
        assert (result.outcome, result.status) == (Outcome.RETRYABLE, None)
        assert result.error


# ---- where it connects --------------------------------------------------------------------------------


async def test_with_a_route_no_name_is_ever_looked_up(made: Callable[..., Transport]) -> None:
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (answer(204), False)) as server:
        LOOKUPS.clear()
        _RECORDING[0] = True
        try:
            # a name no resolver knows: connecting anywhere but the route's address would fail
            result = await transport.send(signed(f"http://callbacks.never-resolves.invalid:{server.port}/hook"))
        finally:
            _RECORDING[0] = False
        assert (result.outcome, LOOKUPS) == (Outcome.DELIVERED, [])
        assert server.requests[0][1]["host"] == f"callbacks.never-resolves.invalid:{server.port}"


async def test_a_name_without_a_route_is_resolved_by_the_transport(made: Callable[..., Transport]) -> None:
    transport = made()  # no policy: the contract lets the transport resolve the name itself
    async with RawServer(lambda path: (answer(204), False)) as server:
        result = await transport.send(signed(f"http://localhost:{server.port}/hook"))
        assert (result.outcome, result.status) == (Outcome.DELIVERED, 204), result
        nowhere = await transport.send(signed(f"http://callbacks.never-resolves.invalid:{server.port}/hook"))
        assert (nowhere.outcome, nowhere.status) == (Outcome.RETRYABLE, None)


# ---- TLS -----------------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_ca(where: Path, name: str) -> None:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        cwd=where,
    )


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two self-signed CAs (``trusted``, ``stranger``) and a server certificate for ``hook.test`` by the first."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make test certificates")
    where = tmp_path_factory.mktemp("tls")
    _make_ca(where, "trusted")
    _make_ca(where, "stranger")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=hook.test", cwd=where)
    (where / "san.ext").write_text("subjectAltName=DNS:hook.test\n")
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "trusted.pem", "-CAkey", "trusted.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "san.ext", cwd=where,
    )  # fmt: skip
    return where


def tls_server(certificates: Path, names: list[str | None]) -> RawServer:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")

    def record_sni(_sock: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = record_sni
    return RawServer(lambda path: (answer(204), False), tls=context)


async def test_tls_with_a_trusted_ca_sends_the_name_and_keeps_the_connection(
    made: Callable[..., Transport], certificates: Path
) -> None:
    trust = ssl.create_default_context(cafile=str(certificates / "trusted.pem"))
    transport = made(policy=to_loopback, ssl_context=trust)
    names: list[str | None] = []
    async with tls_server(certificates, names) as server:
        for _ in range(3):
            result = await transport.send(signed(f"https://hook.test:{server.port}/hook"))
            assert (result.outcome, result.status) == (Outcome.DELIVERED, 204), result
        assert names == ["hook.test"] and server.connections == 1
        assert [headers["host"] for _, headers, _ in server.requests] == [f"hook.test:{server.port}"] * 3


async def test_tls_with_a_ca_not_trusted_is_refused_before_anything_is_sent(
    made: Callable[..., Transport], certificates: Path
) -> None:
    stranger = ssl.create_default_context(cafile=str(certificates / "stranger.pem"))
    names: list[str | None] = []
    async with tls_server(certificates, names) as server:
        for transport in (made(policy=to_loopback, ssl_context=stranger), made(policy=to_loopback)):
            result = await transport.send(signed(f"https://hook.test:{server.port}/hook"))
            # retryable, as any failed connection: the receiver may fix its certificate
            assert (result.outcome, result.status) == (Outcome.RETRYABLE, None), result
            assert "certificate" in (result.error or "").lower(), result.error
        assert server.requests == []


async def test_tls_verifies_the_certificate_against_the_name_not_the_address(
    made: Callable[..., Transport], certificates: Path
) -> None:
    trust = ssl.create_default_context(cafile=str(certificates / "trusted.pem"))
    transport = made(policy=to_loopback, ssl_context=trust)
    names: list[str | None] = []
    async with tls_server(certificates, names) as server:
        for url in (f"https://other.test:{server.port}/hook", f"https://127.0.0.1:{server.port}/hook"):
            result = await transport.send(signed(url))
            assert (result.outcome, result.status) == (Outcome.RETRYABLE, None), result
            assert "certificate" in (result.error or "").lower(), result.error
        assert server.requests == []


# ---- the same cases on uvloop (what the node runs on) ------------------------------------------------

ON_UVLOOP = [
    test_a_kept_alive_connection_carries_the_next_attempts,
    test_concurrent_attempts_each_take_their_own_connection_then_reuse_them,
    test_a_receiver_closing_between_requests_costs_nothing,
    test_connection_close_is_honoured,
    test_a_chunked_answer_is_read_and_the_connection_kept,
    test_a_chunked_answer_over_the_cap_is_read_no_further,
    test_an_answer_read_until_close_counts,
    test_an_interim_100_continue_is_followed_by_the_answer,
    test_an_answer_that_is_not_http_is_retryable,
    test_with_a_route_no_name_is_ever_looked_up,
    test_a_name_without_a_route_is_resolved_by_the_transport,
]
ON_UVLOOP_WITH_TLS = [
    test_tls_with_a_trusted_ca_sends_the_name_and_keeps_the_connection,
    test_tls_with_a_ca_not_trusted_is_refused_before_anything_is_sent,
    test_tls_verifies_the_certificate_against_the_name_not_the_address,
]


def run_on_uvloop(case: Callable[..., Any], transport_class: HttpTransportClass, *args: Any) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        transports: list[Transport] = []

        def make(**options: Any) -> Transport:
            transport = transport_class(SETTINGS, **options)
            transports.append(transport)
            return transport

        try:
            await case(make, *args)
        finally:
            for transport in transports:
                await transport.close()

    uvloop.run(scenario())


@pytest.mark.parametrize("case", ON_UVLOOP, ids=lambda case: case.__name__)
def test_on_uvloop(case: Callable[..., Any], transport_class: HttpTransportClass) -> None:
    run_on_uvloop(case, transport_class)


@pytest.mark.parametrize("case", ON_UVLOOP_WITH_TLS, ids=lambda case: case.__name__)
def test_tls_on_uvloop(case: Callable[..., Any], transport_class: HttpTransportClass, certificates: Path) -> None:
    run_on_uvloop(case, transport_class, certificates)


# ---- the lean transport's idle connections -------------------------------------------------------------


async def test_lean_closes_a_connection_idle_longer_than_the_receiver_keeps_it() -> None:
    transport = LeanHttpTransport(SETTINGS, policy=to_loopback)
    try:
        # "Keep-Alive: timeout=1": the receiver may close it after 1 s; the transport keeps it 1 s less
        async with RawServer(lambda path: (answer(204, b"", "Keep-Alive: timeout=1, max=100"), False)) as server:
            url = f"http://hook.test:{server.port}/hook"
            for _ in range(2):
                assert (await transport.send(signed(url))).outcome is Outcome.DELIVERED
            assert server.connections == 2  # the first one was past its time when the second attempt came
            assert transport.idle_connections == 1
            async with asyncio.timeout(10):  # the sweep closes the second one too, unasked
                while server.client_closes < 2:
                    await server.closed_by_client.wait()
                    server.closed_by_client.clear()
            assert transport.idle_connections == 0
    finally:
        await transport.close()


async def test_each_url_and_host_gets_its_own_request_line_and_host_header(made: Callable[..., Transport]) -> None:
    """Attempts to several URLs, alternating, each carry their own path and ``Host`` (the lean
    transport makes a URL's request line once and keeps it)."""
    transport = made(policy=to_loopback)
    async with RawServer(lambda path: (answer(204), False)) as server:
        urls = [f"http://{host}:{server.port}{path}" for host in ("a.test", "b.test") for path in ("/one", "/two?x=1")]
        for url in urls * 2:
            assert (await transport.send(signed(url))).outcome is Outcome.DELIVERED
        seen = [(headers["host"], path) for path, headers, _ in server.requests]
        expected = [(f"{h}:{server.port}", p) for h in ("a.test", "b.test") for p in ("/one", "/two?x=1")]
        assert seen == expected * 2
