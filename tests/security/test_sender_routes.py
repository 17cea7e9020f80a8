"""The sender connects to the judged address and speaks to the name: ``Host`` header, TLS SNI and
certificate verification for the host; the next judged address only when connecting failed."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.abc import ResolveResult

from tests.http_transports import HTTP_TRANSPORTS, HttpTransportClass
from tests.receiver import Receiver
from tjobs.delivery.ssrf import TargetGuard
from tjobs.delivery.transport import CallbackRequest, Outcome, Transport
from tjobs.settings import CallbackSettings

DNS = {"hook.test": ["127.0.0.1"], "other.test": ["127.0.0.1"], "two.test": ["127.0.0.3", "127.0.0.1"]}


async def fake_dns(host: str, port: int) -> list[ResolveResult]:
    return [
        {"hostname": host, "host": a, "port": port, "family": socket.AF_INET, "proto": 0, "flags": 0}
        for a in DNS[host.rstrip(".")]
    ]


def request_for(url: str) -> CallbackRequest:
    return CallbackRequest("app", "1-1", url, "POST", {"content-type": "application/json"}, b"{}", 3000, 1)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA and a server certificate for ``hook.test`` only, signed by it."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    where = tmp_path_factory.mktemp("tls")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=tjobs test CA",
        cwd=where,
    )
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=hook.test", cwd=where)
    (where / "san.ext").write_text("subjectAltName=DNS:hook.test\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        cwd=where,
    )
    return where


@dataclass
class TlsReceiver:
    port: int
    server_names: list[str | None] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


@pytest_asyncio.fixture
async def tls_receiver(certificates: Path) -> AsyncIterator[TlsReceiver]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    seen = TlsReceiver(sock.getsockname()[1])

    def record_sni(_sock: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        seen.server_names.append(name)

    context.sni_callback = record_sni

    async def handle(request: web.Request) -> web.Response:
        seen.hosts.append(request.headers["Host"])
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=context).start()
    try:
        yield seen
    finally:
        await runner.cleanup()


@pytest.fixture(params=list(HTTP_TRANSPORTS))
def sender_class(request: pytest.FixtureRequest) -> HttpTransportClass:
    """Each real HTTP transport in turn (the guarantee holds for every ``callbacks.transport``)."""
    return HTTP_TRANSPORTS[request.param]


@pytest_asyncio.fixture
async def sender(certificates: Path, sender_class: HttpTransportClass) -> AsyncIterator[Transport]:
    guard = TargetGuard(allow_loopback=True, resolve=fake_dns)
    trust = ssl.create_default_context(cafile=str(certificates / "ca.pem"))
    made = sender_class(CallbackSettings(timeout_ms=3000), policy=guard.policy, ssl_context=trust)
    try:
        yield made
    finally:
        await made.close()


async def test_tls_speaks_to_the_name_while_connecting_to_the_judged_address(
    sender: Transport, tls_receiver: TlsReceiver
) -> None:
    result = await sender.send(request_for(f"https://HOOK.test:{tls_receiver.port}/hook"))
    assert (result.status, result.outcome) == (204, Outcome.DELIVERED), result
    assert tls_receiver.server_names == ["hook.test"]
    assert tls_receiver.hosts == [f"hook.test:{tls_receiver.port}"]


@pytest.mark.parametrize("host", ["other.test", "127.0.0.1"])
async def test_a_certificate_not_for_the_host_is_refused_before_anything_is_sent(
    sender: Transport, tls_receiver: TlsReceiver, host: str
) -> None:
    result = await sender.send(request_for(f"https://{host}:{tls_receiver.port}/hook"))
    assert result.status is None and result.outcome is Outcome.RETRYABLE
    assert "certificate" in (result.error or "").lower(), result.error
    assert tls_receiver.hosts == []


async def test_the_next_judged_address_is_tried_only_when_connecting_failed(sender: Transport) -> None:
    async with Receiver() as receiver:  # on 127.0.0.1; nothing listens on 127.0.0.3
        result = await sender.send(request_for(f"http://two.test:{receiver.port}/hook"))
        assert (result.status, result.outcome) == (200, Outcome.DELIVERED), result
        assert len(receiver.requests) == 1 and receiver.requests[0].headers["host"] == f"two.test:{receiver.port}"
