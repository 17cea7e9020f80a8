"""The delivery transport contract over gRPC: :class:`GrpcTransport` against a real grpc.aio receiver.

Each case states one receiver answer (a :class:`Case`: a gRPC status, a delay, a ``retry-after-ms``)
and runs on two backends:

* ``grpc`` — :class:`GrpcTransport` calling :class:`GrpcReceiver` (``Receiver.Fire`` served on
  127.0.0.1 in the test's loop), which acts the answer out; "refused" is a port nothing listens on;
* ``twin`` — :class:`RecordingTransport` scripted with the HTTP answer of the same class (UNAVAILABLE
  as 503, RESOURCE_EXHAUSTED as 429, a deadline as a timeout, a permanent code as a 4xx).

The outcome, the ``retry_after_ms`` and what the receiver got (payload, headers) are asserted once for
both. What only a wire can show (the ``FireRequest`` fields, status numbers and error texts, channel
pooling, a receiver killed for real mid-burst, TLS, the channel options that keep gRPC from going
elsewhere) is asserted on ``grpc`` alone, below the shared cases.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from itertools import count
from pathlib import Path
from typing import Any

import grpc
import pytest
from standardwebhooks import Webhook

from testkit.grpc_receiver import FireAnswer, GrpcReceiver, GrpcReceiverProcess
from tjobs.delivery.grpc_proto import receiver_pb2_grpc
from tjobs.delivery.grpc_transport import MAX_RECONNECT_BACKOFF_MS, GrpcTransport, channel_target
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.delivery.signing import generate_secret, signature_header
from tjobs.delivery.transport import CallbackRequest, Outcome, Route, Transport
from tjobs.settings import CallbackSettings
from tjobs.targets.model import NO_CREDENTIALS, GrpcTarget, HttpTarget, Target
from tjobs.targets.urls import UrlRefused, parse_callback_url

SECRET = generate_secret()
TOKEN = "Bearer tok_0123456789abcdef"
SETTINGS = CallbackSettings(timeout_ms=3000, max_retry_after_s=60)
TIMEOUT_MS = 3000
SHORT_DEADLINE_MS = 300
ROOT = Path(__file__).resolve().parents[2]
SLOW_S = 30.0  # a receiver this slow is never waited for
_numbers = count(1)

RETRYABLE = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED]
PERMANENT = [
    code for code in grpc.StatusCode if code is not grpc.StatusCode.OK and code not in RETRYABLE
]  # CANCELLED, UNKNOWN, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, …, UNAUTHENTICATED


@dataclass(frozen=True)
class Case:
    """One receiver answer, stated once for both backends."""

    code: grpc.StatusCode = grpc.StatusCode.OK
    details: str = ""
    delay_s: float = 0.0
    retry_after_ms: str | None = None
    refused: bool = False


@dataclass(frozen=True)
class Seen:
    """One call as the receiver got it."""

    payload: bytes
    headers: Mapping[str, str]


def signed_request(target: Target, timeout_ms: int = TIMEOUT_MS) -> CallbackRequest:
    """A callback as the deliverer builds it: the JSON envelope, signed, to a named target."""
    number = next(_numbers)
    scheduled_at_ms = 1_800_000_000_000 + number
    flow_id = f"{number}-{scheduled_at_ms}"
    body = b'{"flow_id":"%s","task_id":"%d","task_name":"n\xc3\xa4me-%d","attempt":3,"payload":{"order":1}}' % (
        flow_id.encode(),
        number,
        number,
    )
    timestamp_s = int(time.time())  # Standard Webhooks receivers accept 5 minutes either side
    headers = {
        "Content-Type": "application/json",
        "webhook-id": flow_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature_header([SECRET], flow_id, timestamp_s, body),
        "tjobs-task-id": str(number),
        "tjobs-scheduled-at": str(scheduled_at_ms),
        "tjobs-attempt": "3",
        "X-Tenant-Header": "kept as sent",
    }
    return CallbackRequest("app", flow_id, f"target:{target.name}", "POST", headers, body, timeout_ms, 3, target=target)


def grpc_target(
    address: str,
    *,
    tls: bool = False,
    deadline_ms: int | None = None,
    credentials: Mapping[str, str] = NO_CREDENTIALS,
) -> Target:
    return Target("app", f"rpc-{next(_numbers)}", GrpcTarget(address, tls, deadline_ms), credentials=credentials)


# ---- the backends -------------------------------------------------------------------------------------


class GrpcBackend:
    name = "grpc"

    def __init__(self, receiver: GrpcReceiver, refused_port: int) -> None:
        self.receiver = receiver
        self.refused_port = refused_port
        self.grpc = GrpcTransport(SETTINGS)
        self.transport: Transport = self.grpc

    def request(
        self, case: Case, *, credentials: Mapping[str, str] = NO_CREDENTIALS, timeout_ms: int = TIMEOUT_MS
    ) -> CallbackRequest:
        port = self.refused_port if case.refused else self.receiver.port
        request = signed_request(grpc_target(f"127.0.0.1:{port}", credentials=credentials), timeout_ms)
        trailing = {"retry-after-ms": case.retry_after_ms} if case.retry_after_ms is not None else {}
        answer = FireAnswer(case.code, case.details, case.delay_s, trailing)
        self.receiver.script(answer, flow_id=request.flow_id)
        return request

    def received(self, request: CallbackRequest) -> list[Seen]:
        return [Seen(fired.payload, fired.headers) for fired in self.receiver.of(request.flow_id)]


async def named_targets(request: CallbackRequest) -> Route:
    """The twin judges a request's URL unless a policy hands it a route; a named target has no URL."""
    return Route(parse_callback_url("http://127.0.0.1:9/"), (ipaddress.IPv4Address("127.0.0.1"),))


TWIN_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
}


class TwinBackend:
    name = "twin"

    def __init__(self) -> None:
        self.twin = RecordingTransport(SETTINGS, policy=named_targets)
        self.transport: Transport = self.twin

    def request(
        self, case: Case, *, credentials: Mapping[str, str] = NO_CREDENTIALS, timeout_ms: int = TIMEOUT_MS
    ) -> CallbackRequest:
        request = signed_request(grpc_target("127.0.0.1:9", credentials=credentials), timeout_ms)
        answer: Answer
        if case.refused:
            answer = Answer.refused()
        else:
            status = TWIN_STATUS.get(case.code, 400)  # the permanent codes as a 4xx
            retry_after = None
            if case.retry_after_ms is not None:
                ms = case.retry_after_ms
                retry_after = str(int(ms) // 1000) if ms.isdigit() else ms
            answer = Answer(status, retry_after=retry_after, body=case.details.encode(), delay_s=case.delay_s)
        self.twin.script(answer, url=request.url)
        return request

    def received(self, request: CallbackRequest) -> list[Seen]:
        return [
            Seen(r.body or b"", {k.lower(): v for k, v in r.headers.items()})
            for r in self.twin.requests
            if r.flow_id == request.flow_id
        ]


Backend = GrpcBackend | TwinBackend


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
async def receiver() -> AsyncIterator[GrpcReceiver]:
    async with GrpcReceiver() as started:
        yield started


@pytest.fixture(params=["grpc", "twin"])
async def backend(request: pytest.FixtureRequest, receiver: GrpcReceiver) -> AsyncIterator[Backend]:
    made: Backend = GrpcBackend(receiver, unused_port()) if request.param == "grpc" else TwinBackend()
    try:
        yield made
    finally:
        await made.transport.close()


@pytest.fixture
async def transport() -> AsyncIterator[GrpcTransport]:
    made = GrpcTransport(SETTINGS)
    try:
        yield made
    finally:
        await made.close()


# ---- both backends: delivered -----------------------------------------------------------------------


async def test_an_ok_answer_is_delivered(backend: Backend) -> None:
    request = backend.request(Case())
    result = await backend.transport.send(request)
    assert (result.outcome, result.error, result.retry_after_ms) == (Outcome.DELIVERED, None, None)
    assert (result.flow_id, result.url, result.attempt) == (request.flow_id, request.url, 3)
    assert len(backend.received(request)) == 1


async def test_payload_and_headers_arrive_as_sent_and_the_signature_verifies(backend: Backend) -> None:
    request = backend.request(Case())
    assert (await backend.transport.send(request)).outcome is Outcome.DELIVERED
    [seen] = backend.received(request)
    assert seen.payload == request.body
    assert seen.headers == {name.lower(): value for name, value in request.headers.items()}
    assert Webhook(SECRET).verify(seen.payload, dict(seen.headers))["payload"] == {"order": 1}


# ---- both backends: retryable -------------------------------------------------------------------------


async def test_a_refused_connection_is_retryable_and_nothing_arrives(backend: Backend) -> None:
    request = backend.request(Case(refused=True))
    result = await backend.transport.send(request)
    assert (result.outcome, result.retry_after_ms) == (Outcome.RETRYABLE, None)
    assert result.error
    assert backend.received(request) == []


async def test_a_receiver_slower_than_the_deadline_is_retryable_without_waiting_for_it(backend: Backend) -> None:
    request = backend.request(Case(delay_s=SLOW_S), timeout_ms=SHORT_DEADLINE_MS)
    result = await backend.transport.send(request)
    assert result.outcome is Outcome.RETRYABLE
    assert result.duration_s < SLOW_S  # the attempt ended at its deadline, not at the answer
    assert len(backend.received(request)) == 1


@pytest.mark.parametrize("code", RETRYABLE, ids=lambda code: code.name)
async def test_unavailable_deadline_exceeded_and_resource_exhausted_are_retryable(
    backend: Backend, code: grpc.StatusCode
) -> None:
    result = await backend.transport.send(backend.request(Case(code, "busy")))
    assert (result.outcome, result.retry_after_ms) == (Outcome.RETRYABLE, None)


@pytest.mark.parametrize(
    ("code", "retry_after_ms", "expected_ms"),
    [
        (grpc.StatusCode.UNAVAILABLE, "2000", 2000),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "7000", 7000),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "0", 0),
        (grpc.StatusCode.UNAVAILABLE, "100000000", 60_000),  # capped by max_retry_after_s
        (grpc.StatusCode.UNAVAILABLE, "soon", None),  # not a number of ms
    ],
)
async def test_retry_after_ms_is_honoured_and_capped(
    backend: Backend, code: grpc.StatusCode, retry_after_ms: str, expected_ms: int | None
) -> None:
    result = await backend.transport.send(backend.request(Case(code, retry_after_ms=retry_after_ms)))
    assert (result.outcome, result.retry_after_ms) == (Outcome.RETRYABLE, expected_ms)


# ---- both backends: permanent ------------------------------------------------------------------------


@pytest.mark.parametrize("code", PERMANENT, ids=lambda code: code.name)
async def test_every_other_status_is_permanent(backend: Backend, code: grpc.StatusCode) -> None:
    request = backend.request(Case(code, "no", retry_after_ms="1000"))
    result = await backend.transport.send(request)
    assert (result.outcome, result.retry_after_ms) == (Outcome.PERMANENT, None)
    assert len(backend.received(request)) == 1


async def test_wrong_credentials_are_permanent_and_the_secret_is_not_in_the_error(backend: Backend) -> None:
    if isinstance(backend, GrpcBackend):
        backend.receiver.authorization = "Bearer the-right-one-0123456789"
    request = backend.request(Case(grpc.StatusCode.UNAUTHENTICATED), credentials={"authorization": TOKEN})
    result = await backend.transport.send(request)
    assert result.outcome is Outcome.PERMANENT
    assert result.error is not None
    assert TOKEN not in result.error and "tok_0123456789abcdef" not in result.error
    assert TOKEN not in repr(result)


# ---- both backends: lifecycle -----------------------------------------------------------------------


async def test_a_closed_transport_opens_again_on_the_next_send(backend: Backend) -> None:
    assert (await backend.transport.send(backend.request(Case()))).outcome is Outcome.DELIVERED
    await backend.transport.close()
    request = backend.request(Case())
    assert (await backend.transport.send(request)).outcome is Outcome.DELIVERED
    assert len(backend.received(request)) == 1


async def test_cancellation_propagates(backend: Backend) -> None:
    request = backend.request(Case(delay_s=SLOW_S), timeout_ms=60_000)
    attempt = asyncio.create_task(backend.transport.send(request))
    for _ in range(500):
        if backend.received(request) or attempt.done():
            break
        await asyncio.sleep(0.01)
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt


async def test_concurrent_attempts_each_get_their_own_answer(backend: Backend) -> None:
    cases = [
        Case(),
        Case(grpc.StatusCode.UNAVAILABLE),
        Case(grpc.StatusCode.NOT_FOUND),
        Case(grpc.StatusCode.RESOURCE_EXHAUSTED),
    ]
    requests = [backend.request(case) for case in cases]
    results = await asyncio.gather(*(backend.transport.send(request) for request in requests))
    assert [(r.flow_id, r.outcome) for r in results] == [
        (requests[0].flow_id, Outcome.DELIVERED),
        (requests[1].flow_id, Outcome.RETRYABLE),
        (requests[2].flow_id, Outcome.PERMANENT),
        (requests[3].flow_id, Outcome.RETRYABLE),
    ]
    assert all(len(backend.received(request)) == 1 for request in requests)


# ---- gRPC only: what the wire carries ---------------------------------------------------------------


async def test_the_fire_request_carries_the_flow_and_the_authorization_metadata(
    transport: GrpcTransport, receiver: GrpcReceiver
) -> None:
    request = signed_request(grpc_target(receiver.address, credentials={"authorization": TOKEN}))
    assert (await transport.send(request)).status == 0
    [fired] = receiver.received
    number = int(fired.task_id)
    assert (fired.flow_id, fired.task_name, fired.scheduled_at_ms, fired.attempt) == (
        request.flow_id,
        f"näme-{number}",
        1_800_000_000_000 + number,
        3,
    )
    assert fired.metadata["authorization"] == TOKEN
    assert fired.metadata["user-agent"].startswith(SETTINGS.user_agent)


async def test_a_task_s_own_body_goes_as_payload_with_no_task_name(
    transport: GrpcTransport, receiver: GrpcReceiver
) -> None:
    envelope = signed_request(grpc_target(receiver.address))
    own = CallbackRequest(
        "app", envelope.flow_id, envelope.url, "POST", envelope.headers, b"plain text", 3000, 1, target=envelope.target
    )
    assert (await transport.send(own)).outcome is Outcome.DELIVERED
    [fired] = receiver.received
    assert (fired.payload, fired.task_name, fired.attempt) == (b"plain text", "", 1)


@pytest.mark.parametrize("code", [*RETRYABLE, *PERMANENT], ids=lambda code: code.name)
async def test_status_is_the_grpc_code_number_and_error_names_it(
    transport: GrpcTransport, receiver: GrpcReceiver, code: grpc.StatusCode
) -> None:
    request = signed_request(grpc_target(receiver.address))
    receiver.script(FireAnswer(code, "not\nnow"), flow_id=request.flow_id)
    result = await transport.send(request)
    assert (result.status, result.error) == (code.value[0], f"gRPC {code.name}: not now")


async def test_a_refused_connection_is_unavailable(transport: GrpcTransport) -> None:
    result = await transport.send(signed_request(grpc_target(f"127.0.0.1:{unused_port()}")))
    assert (result.outcome, result.status) == (Outcome.RETRYABLE, grpc.StatusCode.UNAVAILABLE.value[0])
    assert result.error is not None and result.error.startswith("gRPC UNAVAILABLE")


async def test_the_target_deadline_wins_over_the_request_timeout(
    transport: GrpcTransport, receiver: GrpcReceiver
) -> None:
    request = signed_request(grpc_target(receiver.address, deadline_ms=SHORT_DEADLINE_MS), timeout_ms=60_000)
    receiver.script(FireAnswer(delay_s=SLOW_S), flow_id=request.flow_id)
    result = await transport.send(request)
    assert (result.outcome, result.status) == (Outcome.RETRYABLE, grpc.StatusCode.DEADLINE_EXCEEDED.value[0])
    assert result.duration_s < SLOW_S


async def test_a_secret_echoed_by_the_receiver_is_scrubbed_from_the_error(
    transport: GrpcTransport, receiver: GrpcReceiver
) -> None:
    request = signed_request(grpc_target(receiver.address, credentials={"authorization": TOKEN}))
    echo = f"token {TOKEN} refused; {TOKEN.split()[1]} is unknown"
    receiver.script(FireAnswer(grpc.StatusCode.PERMISSION_DENIED, echo), flow_id=request.flow_id)
    result = await transport.send(request)
    assert result.error == "gRPC PERMISSION_DENIED: token *** refused; *** is unknown"


async def test_an_authorization_that_is_not_metadata_is_permanent_and_never_sent(
    transport: GrpcTransport, receiver: GrpcReceiver
) -> None:
    request = signed_request(grpc_target(receiver.address, credentials={"authorization": "Bearer a\nb"}))
    result = await transport.send(request)
    assert (result.outcome, result.status) == (Outcome.PERMANENT, None)
    assert result.error == f"target {request.url} refused: credentials.authorization must be printable ASCII"
    assert receiver.received == []


# ---- gRPC only: channels ----------------------------------------------------------------------------


async def test_one_channel_and_one_connection_carry_many_calls(
    transport: GrpcTransport, receiver: GrpcReceiver
) -> None:
    target = grpc_target(receiver.address)
    for _ in range(3):
        assert (await transport.send(signed_request(target))).outcome is Outcome.DELIVERED
    others = [grpc_target(receiver.address, credentials={"authorization": f"Bearer {n}"}) for n in range(50)]
    results = await asyncio.gather(*(transport.send(signed_request(other)) for other in others))
    assert {result.outcome for result in results} == {Outcome.DELIVERED}
    assert transport.open_channels == 1
    assert len(receiver.received) == 53
    assert len({fired.peer for fired in receiver.received}) == 1  # one client port: one HTTP/2 connection


async def test_channels_are_pooled_per_address_and_tls_and_closed_by_close(
    transport: GrpcTransport, receiver: GrpcReceiver
) -> None:
    async with GrpcReceiver() as other:
        for address in (receiver.address, other.address, receiver.address):
            assert (await transport.send(signed_request(grpc_target(address)))).outcome is Outcome.DELIVERED
        assert transport.open_channels == 2
        tls = await transport.send(signed_request(grpc_target(receiver.address, tls=True)))
        assert tls.outcome is Outcome.RETRYABLE  # a TLS client on a plaintext port: no handshake, UNAVAILABLE
        assert transport.open_channels == 3
        await transport.close()
        assert transport.open_channels == 0


async def test_closing_the_transport_under_a_call_makes_it_retryable(
    transport: GrpcTransport, receiver: GrpcReceiver
) -> None:
    request = signed_request(grpc_target(receiver.address), timeout_ms=60_000)
    receiver.script(FireAnswer(delay_s=SLOW_S), flow_id=request.flow_id)
    attempt = asyncio.create_task(transport.send(request))
    await receiver.wait_for(1)
    await transport.close()
    result = await attempt
    assert (result.outcome, result.status, result.error) == (
        Outcome.RETRYABLE,
        None,
        "gRPC call cancelled: the channel was closed",
    )


async def test_a_receiver_killed_mid_burst_and_restarted(transport: GrpcTransport) -> None:
    # Given a receiver in its own process that acknowledges the first 40 calls and holds the rest
    answered_before_kill = 40
    async with GrpcReceiverProcess(print_answered=True, answer_first=answered_before_kill) as child:
        target = grpc_target(child.address)
        burst = [signed_request(target, timeout_ms=20_000) for _ in range(200)]
        attempts = [asyncio.create_task(transport.send(request)) for request in burst]
        acknowledged = asyncio.Event()
        for attempt in attempts:  # the client got every acknowledgement the child will ever send
            attempt.add_done_callback(
                lambda _: acknowledged.set() if sum(a.done() for a in attempts) >= answered_before_kill else None
            )
        async with asyncio.timeout(20):
            await acknowledged.wait()
        # When it is killed with 160 calls in flight
        await child.kill()
        results = await asyncio.gather(*attempts)
        # Then only what it acknowledged is delivered; the rest is retryable, none lost as permanent
        delivered = {r.flow_id for r in results if r.outcome is Outcome.DELIVERED}
        assert delivered == set(child.answered)
        assert len(delivered) == answered_before_kill
        assert {r.outcome for r in results if r.flow_id not in delivered} == {Outcome.RETRYABLE}
        # And once it is back on the same port, the retries are delivered on the pooled channel
        child.answer_first = None
        await child.start()
        retried = [r for r in burst if r.flow_id not in delivered]
        outcomes: list[Outcome] = []
        for _ in range(2 * MAX_RECONNECT_BACKOFF_MS // 100):  # the channel reconnects within its max backoff
            outcomes = [(await transport.send(request)).outcome for request in retried[:5]]
            if outcomes == [Outcome.DELIVERED] * 5:
                break
            await asyncio.sleep(0.1)
        assert outcomes == [Outcome.DELIVERED] * 5
        assert transport.open_channels == 1


# ---- gRPC only: where it connects (SSRF) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:50051", "ipv4:127.0.0.1:50051"),
        ("[::1]:443", "ipv6:[::1]:443"),
        ("[0:0::1]:443", "ipv6:[::1]:443"),
        ("Receiver.Example.COM:8443", "dns:///receiver.example.com:8443"),
        ("receiver.example.com.:8443", "dns:///receiver.example.com:8443"),
    ],
)
def test_the_channel_target_is_built_from_host_and_port(address: str, expected: str) -> None:
    assert channel_target(address) == expected


@pytest.mark.parametrize(
    "address",
    [
        "unix:/run/receiver.sock",
        "unix-abstract:receiver",
        "xds:///receiver",
        "dns:///receiver.example.com:443",
        "ipv4:127.0.0.1:50051",
        "127.0.0.1",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.1:50051",
        "0x7f.0.0.1:50051",
        "[fe80::1%25eth0]:50051",
        "user@host:50051",
        "host/path:50051",
        ":50051",
    ],
)
async def test_an_address_that_is_not_host_port_is_permanent_and_never_connected(
    transport: GrpcTransport, address: str
) -> None:
    with pytest.raises(UrlRefused):
        channel_target(address)
    request = signed_request(grpc_target(address))
    result = await transport.send(request)
    assert (result.outcome, result.status) == (Outcome.PERMANENT, None)
    assert result.error is not None and result.error.startswith(f"target {request.url} refused: ")
    assert transport.open_channels == 0


async def test_a_request_without_a_grpc_target_is_permanent(transport: GrpcTransport) -> None:
    inline = CallbackRequest("app", "1-1", "http://127.0.0.1:9/hook", "POST", {}, b"{}", 3000, 1)
    http = Target("app", "web", HttpTarget(("http://127.0.0.1:9/hook",)))
    for request in (inline, signed_request(http)):
        result = await transport.send(request)
        assert (result.outcome, result.error) == (Outcome.PERMANENT, f"target {request.url} refused: not a gRPC target")


async def test_a_proxy_named_in_the_environment_is_not_used(
    transport: GrpcTransport, receiver: GrpcReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = f"http://127.0.0.1:{unused_port()}"
    for name in ("grpc_proxy", "https_proxy", "http_proxy"):
        monkeypatch.setenv(name, nowhere)
    monkeypatch.delenv("no_grpc_proxy", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = await transport.send(signed_request(grpc_target(receiver.address)))
    assert result.outcome is Outcome.DELIVERED


# ---- gRPC only: TLS ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificate:
    key: bytes
    chain: bytes


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for localhost and 127.0.0.1 (made with the openssl command)."""
    directory: Path = tmp_path_factory.mktemp("tls")
    key, chain = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(chain),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return Certificate(key.read_bytes(), chain.read_bytes())


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_tls_verifies_the_receiver_against_the_given_roots(certificate: Certificate, host: str) -> None:
    async with GrpcReceiver(tls=(certificate.key, certificate.chain)) as secure:
        trusting = GrpcTransport(SETTINGS, root_certificates=certificate.chain)
        untrusting = GrpcTransport(SETTINGS)  # the system roots do not know this certificate
        try:
            target = grpc_target(f"{host}:{secure.port}", tls=True)
            assert (await trusting.send(signed_request(target))).outcome is Outcome.DELIVERED
            refused = await untrusting.send(signed_request(target))
            assert (refused.outcome, refused.status) == (Outcome.RETRYABLE, grpc.StatusCode.UNAVAILABLE.value[0])
            assert len(secure.received) == 1
        finally:
            await trusting.close()
            await untrusting.close()


# ---- the consumer example of docs/targets.md ------------------------------------------------------


def consumer_example() -> str:
    """The Python block of the "gRPC" section under "Consumers" in docs/targets.md."""
    section = (ROOT / "docs" / "targets.md").read_text().split("### gRPC", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


async def test_the_documented_consumer_verifies_deduplicates_and_answers_with_statuses(
    transport: GrpcTransport, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TJOBS_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("TJOBS_TARGET_TOKEN", TOKEN)
    example: dict[str, Any] = {"__name__": "consumer_example"}
    exec(compile(consumer_example(), "docs/targets.md", "exec"), example)
    server = grpc.aio.server()
    receiver_pb2_grpc.add_ReceiverServicer_to_server(example["Receiver"](), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        address = f"127.0.0.1:{port}"
        target = grpc_target(address, credentials={"authorization": TOKEN})
        request = signed_request(target)
        # a fire and its retry: handled once, OK twice
        assert [(await transport.send(request)).outcome for _ in range(2)] == [Outcome.DELIVERED] * 2
        assert example["handled"] == {request.flow_id}
        [handled_line] = capsys.readouterr().out.splitlines()
        assert handled_line.startswith(f"{request.flow_id} näme-")
        # a body the signature does not cover, a wrong token: permanent
        forged = await transport.send(replace(request, body=b'{"forged":true}'))
        assert (forged.outcome, forged.error) == (Outcome.PERMANENT, "gRPC PERMISSION_DENIED: bad signature")
        stranger = signed_request(grpc_target(address, credentials={"authorization": "Bearer no"}))
        refused = await transport.send(stranger)
        assert (refused.outcome, refused.error) == (Outcome.PERMANENT, "gRPC UNAUTHENTICATED: bad token")

        # a failure that may pass: retryable after the delay the consumer asked for, not marked handled
        async def failing(request: Any) -> None:
            raise example["TemporaryFailure"]()

        example["handle"] = failing
        later = signed_request(target)
        result = await transport.send(later)
        assert (result.outcome, result.retry_after_ms) == (Outcome.RETRYABLE, 5000)
        assert later.flow_id not in example["handled"]
    finally:
        await server.stop(None)
