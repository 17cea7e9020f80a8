"""The protocol router: inline URLs and HTTP targets to the HTTP transport, the other protocols to
theirs (loaded on first use, only to allowed addresses), results named as the deliverer tracks them."""

from __future__ import annotations

import subprocess
import sys
from types import MappingProxyType

import pytest

from tests.delivery_fakes import CLOCK, SETTINGS
from tjobs.delivery import router as router_module
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.delivery.router import ProtocolRouter
from tjobs.delivery.transport import CallbackRequest, Outcome
from tjobs.targets.addresses import AddressAllowList
from tjobs.targets.model import AmqpTarget, GrpcTarget, HttpTarget, Protocol, RedisStreamTarget, Target

SECRET = "Bearer hdr-never-in-a-result"
ALLOWED = AddressAllowList.parse(["127.0.0.1:5672", "127.0.0.1:6379"])


def request(target: Target | None = None, url: str = "https://receiver.example/hook") -> CallbackRequest:
    return CallbackRequest(
        "shop",
        "flow-1",
        f"target:{target.name}" if target is not None else url,
        "POST",
        {"webhook-id": "flow-1", "content-type": "application/json"},
        b"{}",
        700,
        1,
        target=target,
    )


def http_target() -> Target:
    return Target(
        "shop",
        "hook",
        HttpTarget(("https://a.example/x", "https://b.example/y"), "PUT", MappingProxyType({"x-team": "billing"}), 900),
        credentials=MappingProxyType({"authorization": SECRET}),
    )


def amqp_target(url: str = "amqp://127.0.0.1:5672/") -> Target:
    return Target("shop", "orders-mq", AmqpTarget(url, "orders", "fire"))


@pytest.fixture
def http() -> RecordingTransport:
    return RecordingTransport(SETTINGS, CLOCK)


async def test_an_inline_url_goes_to_the_http_transport_as_it_is(http: RecordingTransport) -> None:
    router = ProtocolRouter(http, SETTINGS)
    sent = request()
    result = await router.send(sent)
    assert result.outcome is Outcome.DELIVERED
    assert http.requests == [sent]


async def test_an_http_target_is_one_plain_request_per_url_with_its_method_headers_and_credentials(
    http: RecordingTransport,
) -> None:
    router = ProtocolRouter(http, SETTINGS)
    http.script(Answer(500, body=b"down"), url="https://b.example/y")

    result = await router.send(request(http_target()))

    assert sorted(r.url for r in http.requests) == ["https://a.example/x", "https://b.example/y"]
    for sent in http.requests:
        assert sent.target is None and sent.method == "PUT" and sent.timeout_ms == 700
        assert sent.headers["authorization"] == SECRET and sent.headers["x-team"] == "billing"
        assert sent.headers["webhook-id"] == "flow-1" and sent.body == b"{}"
    assert (result.url, result.outcome, result.status) == ("target:hook", Outcome.RETRYABLE, 500)
    assert result.error == "urls[1]: HTTP 500: down"


async def test_a_broker_target_whose_address_is_not_allowed_is_refused_before_connecting(
    http: RecordingTransport,
) -> None:
    twin = RecordingTransport(SETTINGS, CLOCK)
    router = ProtocolRouter(http, SETTINGS, allowed_addresses=ALLOWED, transports={Protocol.AMQP: twin})

    refused = await router.send(request(amqp_target("amqp://10.1.2.3:5672/")))
    allowed = await router.send(request(amqp_target()))

    assert refused.outcome is Outcome.PERMANENT and refused.url == "target:orders-mq"
    assert refused.error == ("target 'orders-mq' refused: 10.1.2.3:5672 is not in the node's targets.allowed_addresses")
    assert allowed.outcome is Outcome.DELIVERED
    assert [e.request.target for e in twin.exchanges] == [amqp_target()]  # only the allowed one reached it
    assert http.exchanges == []


async def test_a_protocols_transport_is_built_on_first_use_and_kept(
    http: RecordingTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        router_module.TRANSPORT_CLASSES, Protocol.REDIS_STREAM, ("tjobs.delivery.recording", "RecordingTransport")
    )
    router = ProtocolRouter(http, SETTINGS, allowed_addresses=ALLOWED)
    target = Target("shop", "stream", RedisStreamTarget("redis://127.0.0.1:6379/0", "orders"))

    first = await router.send(request(target))
    second = await router.send(request(target))

    assert first.outcome is second.outcome is Outcome.DELIVERED
    loaded = router._transports[Protocol.REDIS_STREAM]
    assert isinstance(loaded, RecordingTransport) and len(loaded.requests) == 2
    await router.close()
    assert loaded.closed == 1 and http.closed == 1


async def test_a_protocol_whose_transport_cannot_load_here_fails_permanently_saying_so(
    http: RecordingTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(router_module.TRANSPORT_CLASSES, Protocol.GRPC, ("tjobs.delivery.no_such_module", "X"))
    router = ProtocolRouter(http, SETTINGS, allowed_addresses=AddressAllowList.parse(["127.0.0.1:50051"]))

    result = await router.send(request(Target("shop", "rpc", GrpcTarget("127.0.0.1:50051"))))

    assert result.outcome is Outcome.PERMANENT
    assert result.error is not None and result.error.startswith("the grpc transport is not available on this node")


def test_a_node_that_sends_only_http_never_imports_a_broker_client() -> None:
    script = """
import asyncio, sys
from tjobs.node import Node
from tjobs.settings import Settings
from tjobs.delivery.transport import CallbackRequest

async def main():
    node = Node(Settings(storage={"urls": ["memory://"], "topology": "1x1x4"}, allow_loopback_callbacks=True))
    await node.transport.send(CallbackRequest("a", "f", "http://127.0.0.1:9/x", "POST", {}, b"", 200, 1))
    await node.transport.close()
    print(sorted(m for m in ("aio_pika", "aiormq", "nats", "grpc", "redis") if m in sys.modules))

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stderr
