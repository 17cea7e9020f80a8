"""Broker and gRPC addresses (tjobs.targets.addresses) are judged by the one host validator the
transports connect with (tjobs.targets.urls.parse_host): a host the gRPC transport would refuse at
send, or that resolvers read as another address than written, is refused when listed or created."""

from __future__ import annotations

import pytest

from tjobs.targets.addresses import AddressAllowList, AddressRefused, parse_broker_url, parse_host_port
from tjobs.targets.model import RedisStreamTarget


@pytest.mark.parametrize(
    "entry",
    ["127.1:5672", "0x7f.0.0.1:5672", "2130706433:5672", "017.0.0.1:4222", "127.0.0.01:6379", "[fe80::1%eth0]:1"],
)
def test_a_non_canonical_numeric_host_is_refused_as_an_allow_list_entry(entry: str) -> None:
    with pytest.raises(AddressRefused, match=r"allowed_addresses\[0\]"):
        AddressAllowList.parse([entry])


@pytest.mark.parametrize("url", ["amqp://127.1/", "nats://0x7f000001:4222", "redis://127.000.0.1:6379/0"])
def test_a_broker_url_with_a_non_canonical_numeric_host_is_refused(url: str) -> None:
    with pytest.raises(AddressRefused):
        parse_broker_url(url, ("amqp", "nats", "redis"))


@pytest.mark.parametrize(
    ("written", "normalised"),
    [
        ("127.0.0.1:5672", "127.0.0.1:5672"),
        ("Broker.Example.:4222", "broker.example:4222"),
        ("[::1]:50051", "[::1]:50051"),
        ("[0:0::1]:50051", "[::1]:50051"),
        ("rabbit_1.internal:5672", "rabbit_1.internal:5672"),
    ],
)
def test_canonical_hosts_are_admitted_and_normalised(written: str, normalised: str) -> None:
    assert parse_host_port(written) == normalised
    assert AddressAllowList.parse([written]).entries == {normalised}


@pytest.mark.parametrize(
    "url",
    [
        "rediss://127.0.0.1:6379/0?ssl_cert_reqs=none",  # redis-py: no certificate check
        "amqps://127.0.0.1:5671/?no_verify_ssl=1",  # aiormq: no certificate check
        "amqp://127.0.0.1:5672/?keyfile=/etc/shadow",  # aiormq: a file on the node
        "nats://127.0.0.1:4222/?x=1",
        "amqp://127.0.0.1:5672/#x",
    ],
)
def test_a_broker_url_with_client_options_is_refused(url: str) -> None:
    with pytest.raises(AddressRefused, match="no query or fragment"):
        parse_broker_url(url, ("amqp", "amqps", "nats", "redis", "rediss"))


@pytest.mark.parametrize("path", ["/x", "/1/2", "/-1", "/0/"])
def test_a_redis_url_path_is_a_database_number_or_nothing(path: str) -> None:
    with pytest.raises(AddressRefused, match="database number"):
        parse_broker_url(f"redis://127.0.0.1:6379{path}", ("redis",))
    for fine in ("", "/", "/0", "/15"):
        assert parse_broker_url(f"redis://127.0.0.1:6379{fine}", ("redis",)) == "127.0.0.1:6379"


def test_a_stored_target_with_client_options_is_refused_at_send() -> None:
    """The rule is newer than some stored targets: the send-time check refuses them too."""
    allowed = AddressAllowList.parse(["127.0.0.1:6379"])
    stored = RedisStreamTarget("rediss://127.0.0.1:6379/0?ssl_cert_reqs=none", "fires", None)
    field, reason = allowed.refusal(stored) or ("", "")
    assert field == "settings.url" and "no query or fragment" in reason
