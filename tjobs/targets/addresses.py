"""Where a broker or gRPC target connects, and the operator's allow-list of such addresses (SSRF).

HTTP targets go through the callback URL policy like inline URLs (:mod:`tjobs.delivery.ssrf`, the
app's allow-list). Every other protocol connects to a broker or a server the operator names
explicitly: the node setting ``targets.allowed_addresses`` lists ``host:port`` entries (``[v6]:port``
for an IPv6 literal), checked when the node starts (a malformed entry refuses the start). A target
whose address is not on the list is refused with a 422 naming the field when it is created or
changed, and every attempt to it is refused permanently at send (the list may have changed since).

An entry admits exactly that host (compared case-insensitively, as written: a name is not resolved
and matched against addresses) on exactly that port. A name entry trusts the operator's DNS for that
name; list the address instead to pin it.

:func:`addresses_of` says which ``host:port`` a target's settings connect to (default ports: AMQP
5672, AMQPS 5671, NATS 4222, Redis 6379), with the settings field each comes from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from tjobs.targets.model import AmqpTarget, GrpcTarget, NatsTarget, RedisStreamTarget, TargetSettings
from tjobs.targets.urls import UrlRefused, parse_host

_REDIS_DATABASE_PATH = re.compile(r"(/([0-9]{1,9})?)?")
DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671, "nats": 4222, "tls": 4222, "redis": 6379, "rediss": 6379}
SCHEMES: dict[str, tuple[str, ...]] = {
    "amqp": ("amqp", "amqps"),
    "nats": ("nats", "tls"),
    "redis_stream": ("redis", "rediss"),
}


class AddressRefused(ValueError):
    """A ``host:port`` or broker URL that is malformed, or not allowed; ``reason`` says which and
    ``field`` (when known) which settings field holds it."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field


def _host(text: str) -> str:
    """A host name or an IP literal, normalised (lower case, IPv6 in brackets), by the one host
    validator the transports connect with (:func:`tjobs.targets.urls.parse_host`): a numeric host
    that is not a canonical dotted quad (``127.1``, ``0x7f.0.0.1``) is refused, not read as a name."""
    try:
        host = parse_host(text)
    except UrlRefused as refused:
        raise AddressRefused(f"{text!r} is not a host name or an IP address ({refused})") from None
    if host.address is None and not text.isascii():
        raise AddressRefused(f"{text!r}: write an internationalised name in its ASCII (xn--) form")
    return host.uri_text.rstrip(".") if host.address is None else host.uri_text


def parse_host_port(text: str) -> str:
    """``host:port`` normalised (the form the allow-list compares); the port is required."""
    if not isinstance(text, str) or any(c.isspace() for c in text) or not text:
        raise AddressRefused("must be host:port")
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressRefused(f"{text!r} is not host:port (a port within 1..65535)")
    return f"{_host(host)}:{int(port)}"


def parse_broker_url(url: str, schemes: Sequence[str]) -> str:
    """The ``host:port`` a broker URL connects to: one of ``schemes``, no user info (credentials
    belong in the target's credentials), the scheme's default port when none is given.

    No query or fragment either: the client libraries read connection options from the query
    (``rediss://…?ssl_cert_reqs=none``, ``amqps://…?no_verify_ssl=1``, ``?keyfile=<a path on the node>``),
    and those are the node's to set, never a tenant's. A Redis URL's path is its database number or
    nothing (redis-py reads ``/x`` as database 0 and ``/1/2`` as 12)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise AddressRefused("not a valid URL") from None
    if parts.scheme not in schemes:
        raise AddressRefused(f"the scheme must be {' or '.join(schemes)}")
    if "@" in parts.netloc:
        raise AddressRefused("no user info in the URL: give it in credentials")
    if "?" in url or "#" in url:
        raise AddressRefused("no query or fragment in the URL: connection options are the node's")
    if parts.scheme in ("redis", "rediss") and not _REDIS_DATABASE_PATH.fullmatch(parts.path):
        raise AddressRefused("the path must be a database number (redis://host:port/0) or nothing")
    netloc = parts.netloc
    host = netloc.rsplit(":", 1)[0] if port is not None or netloc.endswith(":") else netloc
    if not host:
        raise AddressRefused("the URL names no host")
    if port is None:
        port = DEFAULT_PORTS[parts.scheme]
    if not 0 < port < 65536:
        raise AddressRefused("the port must be within 1..65535")
    return f"{_host(host)}:{port}"


def addresses_of(settings: TargetSettings) -> list[tuple[str, str]]:
    """``(settings field, host:port)`` for every address a non-HTTP target connects to (HTTP: none;
    its URLs are judged by the callback URL policy). Raises :class:`AddressRefused` with ``field``."""
    fields: list[tuple[str, str, tuple[str, ...] | None]]
    if isinstance(settings, GrpcTarget):
        fields = [("settings.address", settings.address, None)]
    elif isinstance(settings, AmqpTarget):
        fields = [("settings.url", settings.url, SCHEMES["amqp"])]
    elif isinstance(settings, RedisStreamTarget):
        fields = [("settings.url", settings.url, SCHEMES["redis_stream"])]
    elif isinstance(settings, NatsTarget):
        fields = [(f"settings.servers[{i}]", server, SCHEMES["nats"]) for i, server in enumerate(settings.servers)]
    else:
        return []
    out: list[tuple[str, str]] = []
    for field, text, schemes in fields:
        try:
            out.append((field, parse_host_port(text) if schemes is None else parse_broker_url(text, schemes)))
        except AddressRefused as refused:
            raise AddressRefused(refused.reason, field) from None
    return out


@dataclass(frozen=True, slots=True)
class AddressAllowList:
    """The operator's allowed broker and gRPC addresses (``targets.allowed_addresses``), normalised."""

    entries: frozenset[str]

    @classmethod
    def parse(cls, entries: Sequence[str]) -> AddressAllowList:
        """Raises :class:`AddressRefused` naming the first malformed entry (by index)."""
        normalised: set[str] = set()
        for index, entry in enumerate(entries):
            try:
                normalised.add(parse_host_port(entry))
            except AddressRefused as refused:
                raise AddressRefused(f"targets.allowed_addresses[{index}]: {refused.reason}") from None
        return cls(frozenset(normalised))

    def refusal(self, settings: TargetSettings) -> tuple[str, str] | None:
        """``(field, reason)`` for the first address of ``settings`` this list does not admit (or that
        is malformed), ``None`` when every one is admitted."""
        try:
            addresses = addresses_of(settings)
        except AddressRefused as refused:
            return refused.field or "settings", refused.reason
        for field, address in addresses:
            if address not in self.entries:
                return field, f"{address} is not in the node's targets.allowed_addresses"
        return None


NO_ADDRESSES = AddressAllowList(frozenset())
