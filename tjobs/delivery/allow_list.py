"""An app's callback allow-list (``allowed_callback_hosts``), parsed once: what the target policy may
admit beyond public addresses (see :mod:`tjobs.delivery.ssrf`).

Entries: an exact host name (``billing.internal``), a suffix wildcard (``*.corp.example``), an address
(``10.0.0.7``, ``fd00::1``) or a network (``10.0.0.0/8``); names are validated by the URL model's host
function. Every callback request carries its app's list
(:attr:`tjobs.delivery.transport.CallbackRequest.allow_list`), so judging a send needs no app lookup.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tjobs.errors import InvalidInput
from tjobs.targets.urls import IPAddress, UrlRefused, parse_host

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AllowList:
    """An app's admitted callback hosts, parsed once. Hashed once too: every send's verdict is looked
    up by its allow-list (hashing its networks again, in Python, was a part of each send)."""

    names: frozenset[str]
    suffixes: tuple[str, ...]
    networks: tuple[IPNetwork, ...]
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.names, self.suffixes, self.networks)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def parse(cls, entries: Sequence[str], field: str = "allowed_callback_hosts") -> AllowList:
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for i, raw in enumerate(entries):
            entry = raw.strip() if isinstance(raw, str) else ""
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            wildcard = entry.startswith("*.")
            try:
                host = parse_host(entry[2:] if wildcard else entry)
            except UrlRefused:
                host = None
            if host is None or host.address is not None:
                raise InvalidInput(f"{field}[{i}]", "must be a host name, *.suffix, an address or a network")
            if wildcard:
                suffixes.append("." + host.bare_name)
            else:
                names.add(host.bare_name)
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def admits_name(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.names or any(host.endswith(s) for s in self.suffixes)

    def admits_address(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)


EMPTY_ALLOW_LIST = AllowList(frozenset(), (), ())


def allow_list_of_app(settings: Mapping[str, Any]) -> AllowList:
    """The parsed allow-list stored in an app's ``settings`` (parsed once per distinct list)."""
    entries = settings.get("allowed_callback_hosts") or []
    return _parsed(tuple(str(e) for e in entries))


@functools.lru_cache(maxsize=1024)
def _parsed(entries: tuple[str, ...]) -> AllowList:
    try:
        return AllowList.parse(entries)
    except InvalidInput:
        return EMPTY_ALLOW_LIST
