"""Callback target policy (SSRF): which addresses tjobs may call back, judged on one parsed URL.

Every callback URL is parsed once by :func:`tjobs.targets.urls.parse_callback_url` (the one URL model:
scheme, ASCII host, port, target). The host it yields is what the policy judges and what the transport
connects to; nothing re-parses the URL text to decide where to connect.

A callback URL must be ``http``/``https``. Its host's addresses must be public unless the app's
allow-list admits them. Refused: loopback, private (RFC 1918, ULA), shared (CGNAT), link-local,
multicast, unspecified, reserved and documentation ranges, cloud metadata addresses, and the IPv6
forms that embed an IPv4 address (v4-mapped ``::ffff:a.b.c.d``, v4-compatible, 6to4, Teredo, NAT64),
which are judged by the IPv4 address inside. Hosts the URL model cannot represent unambiguously
(non-canonical or non-ASCII numeric spellings, zone ids, userinfo, names IDNA cannot encode) never
get this far: they are refused as invalid URLs.

1. **At registration** (:meth:`TargetGuard.check_registration`): a literal address is judged, and a
   name is resolved (with a short cache) and every answer judged. A refusal names the field and says
   "not allowed" without the DNS answer (the answer is logged, never shown to the tenant).
2. **At send** (:meth:`TargetGuard.policy`, the transport's ``TargetPolicy``): the name is resolved
   (answers cached for ``RESOLVE_CACHE_TTL_MS``, and so is the verdict on exactly those answers per
   allow-list), every answer judged, and the judged addresses are handed to the transport as a
   :class:`tjobs.delivery.transport.Route`: the transport connects to those addresses only (the URL
   it gives the HTTP client carries the address, the ``Host`` header and the TLS name carry the name),
   so a resolver answering public then private cannot rebind a callback, and no library resolves or
   folds the host on its own. Redirects are never followed.

Allow-list entries (per app, ``allowed_callback_hosts``): an exact host name (``billing.internal``),
a suffix wildcard (``*.corp.example``), an address (``10.0.0.7``, ``fd00::1``) or a network
(``10.0.0.0/8``); names are validated by the same host function as URLs. A name entry admits
whatever that name resolves to; an address or network entry admits those addresses under any name.
Metadata addresses are refused even then. ``tjobs dev`` (``settings.allow_loopback_callbacks``)
admits loopback targets, and nothing else beyond this policy.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from tjobs.clock import Clock, SystemClock
from tjobs.delivery.allow_list import EMPTY_ALLOW_LIST, AllowList, allow_list_of_app
from tjobs.delivery.transport import CallbackRequest, Route
from tjobs.errors import InvalidInput
from tjobs.targets.urls import CallbackUrl, IPAddress, UrlRefused, parse_callback_url

if TYPE_CHECKING:
    from aiohttp.abc import ResolveResult  # a TypedDict: the resolver's answer shape, no aiohttp at run time

logger = logging.getLogger(__name__)

__all__ = [  # the allow-list lives in tjobs.delivery.allow_list; callers of the policy find it here too
    "EMPTY_ALLOW_LIST",
    "AllowList",
    "TargetGuard",
    "TargetRefused",
    "TargetUnresolvable",
    "allow_list_of_app",
    "classify_address",
    "embedded_ipv4",
    "judge",
    "parse_target",
    "target_field",
]

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")
_LOOPBACK_V4 = ipaddress.ip_network("127.0.0.0/8")
RESOLVE_TIMEOUT_S = 2.0
RESOLVE_CACHE_TTL_MS = 30_000
RESOLVE_CACHE_MAX = 10_000
MAX_ANSWERS = 16


class TargetUnresolvable(OSError):
    """The target's name does not resolve (now): not a refusal. At send the attempt is retried later
    (a transport treats an ``OSError`` from its policy as retryable); at registration it is accepted."""


class TargetRefused(Exception):
    """A callback target the policy refuses.

    ``reason`` is safe to show the tenant (it never names a DNS answer); ``detail`` may (for logs).
    """

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail or reason


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, 6to4, Teredo, NAT64), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or address in _NAT64_LOCAL:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _V4_COMPATIBLE and int(address) > 1:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def classify_address(address: IPAddress) -> str | None:
    """Why ``address`` is not a public unicast target (``None`` if it is one)."""
    inner = embedded_ipv4(address)
    if inner is not None:
        why = classify_address(inner)
        return None if why is None else f"{why} (embedded in {address})"
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    checks = (
        (address.is_loopback, "loopback"),
        (address.is_unspecified, "unspecified"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "site-local"),
        (not address.is_global, "not globally routable"),
    )
    for hit, label in checks:
        if hit:
            return f"{label} address {address}"
    return None


_LOOPBACK_ONLY = AllowList(frozenset(), (), (_LOOPBACK_V4, ipaddress.ip_network("::1/128")))


def judge(address: IPAddress, host: str, allow: AllowList, allow_loopback: bool) -> str | None:
    """Why ``address`` (an answer for ``host``) may not be called, or ``None`` if it may."""
    why = classify_address(address)
    if why is None:
        return None
    if address in METADATA_ADDRESSES or (inner := embedded_ipv4(address)) in METADATA_ADDRESSES:
        return why
    if allow.admits_name(host) or allow.admits_address(address):
        return None
    if inner is not None and allow.admits_address(inner):
        return None
    if allow_loopback and (
        _LOOPBACK_ONLY.admits_address(address) or (inner is not None and _LOOPBACK_ONLY.admits_address(inner))
    ):
        return None
    return why


def parse_target(url: str) -> CallbackUrl:
    """The URL model of a callback target, or :class:`TargetRefused` with the model's reason."""
    try:
        return parse_callback_url(url)
    except UrlRefused as refused:
        raise TargetRefused(refused.reason) from None


Resolve: TypeAlias = "Callable[[str, int], Awaitable[list[ResolveResult]]]"


@dataclass(frozen=True, slots=True)
class _Resolved:
    """A name's cached answers and the verdicts on exactly those answers, per allow-list."""

    expires_ms: int
    answers: tuple[IPAddress, ...] | None  # None: an answer that is not an address
    verdicts: dict[AllowList, str | None]


_UNJUDGED = "<not judged yet>"


class TargetGuard:
    """The SSRF policy of one node: registration checks and the send-time policy (routes)."""

    def __init__(
        self,
        *,
        allow_loopback: bool = False,
        resolve: Resolve | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.allow_loopback = allow_loopback
        self._resolve = resolve or _system_resolve
        self._clock = clock or SystemClock()
        self._cache: dict[str, _Resolved] = {}

    async def close(self) -> None:
        """Nothing to release (resolution uses the event loop's ``getaddrinfo``); kept for callers."""

    async def addresses(self, url: CallbackUrl, allow: AllowList) -> tuple[IPAddress, ...]:
        """The judged addresses ``url`` may be connected to: its literal address, or every answer
        for its name (all must pass: one refused answer refuses the target).

        Raises :class:`TargetRefused` or :class:`TargetUnresolvable`.
        """
        host = url.host
        if host.address is not None:
            why = _judge_literal(host.address, host.name, allow, self.allow_loopback)
            if why is not None:
                raise TargetRefused(why)
            return (host.address,)
        return await self._resolve_checked(host.name, url.port, allow)

    async def _resolve_checked(self, name: str, port: int, allow: AllowList) -> tuple[IPAddress, ...]:
        now_ms = self._clock.now_ms()
        resolved = self._cache.get(name)
        if resolved is None or resolved.expires_ms <= now_ms:
            try:
                async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                    raw = await self._resolve(name, port)
            except (OSError, TimeoutError) as error:
                raise TargetUnresolvable(f"host {name!r} does not resolve ({type(error).__name__})") from None
            if len(self._cache) >= RESOLVE_CACHE_MAX:
                self._cache.clear()
            resolved = self._cache[name] = _Resolved(now_ms + RESOLVE_CACHE_TTL_MS, _addresses_of(raw), {})
        answers = resolved.answers
        if answers is not None and not answers:
            raise TargetUnresolvable(f"host {name!r} has no address")
        # The verdict on these very answers, per allow-list: judged once per cached answer, not per send.
        verdict = resolved.verdicts.get(allow, _UNJUDGED)
        if verdict is _UNJUDGED:
            verdict = resolved.verdicts[allow] = self._judge_answers(name, answers, allow)
        if verdict is not None:
            raise TargetRefused(f"host {name!r} is not allowed as a callback target", verdict)
        assert answers is not None
        return answers

    def _judge_answers(self, name: str, answers: tuple[IPAddress, ...] | None, allow: AllowList) -> str | None:
        """Why the answers for ``name`` may not be called (the first refused one), or ``None``."""
        if answers is None:
            return f"host {name!r} resolved to an unreadable address"
        for address in answers:
            why = judge(address, name, allow, self.allow_loopback)
            if why is not None:
                return f"host {name!r} resolves to {why}"
        return None

    async def refusal(self, url: str, allow: AllowList) -> str | None:
        """Why ``url`` may not be registered (safe to show), or ``None``. A name that does not
        resolve yet is accepted (it is judged again at every send)."""
        try:
            await self.addresses(parse_target(url), allow)
        except TargetUnresolvable:
            return None
        except TargetRefused as refused:
            if refused.detail != refused.reason:
                logger.info(
                    "callback target refused at registration: %s",
                    refused.detail,
                    extra={"action": "callback_target_refused"},
                )
            return refused.reason
        return None

    async def check_registration(self, urls: Sequence[str], allow: AllowList, field: str = "callback.url") -> None:
        """Refuse (422, naming the field) any target the policy refuses; names are resolved now too.

        With several URLs the field is ``callback.urls[i]`` of the refused one.
        """
        for i, url in enumerate(urls):
            reason = await self.refusal(url, allow)
            if reason is not None:
                name = field if len(urls) == 1 else target_field(i)
                raise InvalidInput(name, f"callback target refused: {reason}", "target_refused")

    async def policy(self, request: CallbackRequest) -> Route | str:
        """The transport's ``TargetPolicy``: parse, resolve and judge the target now, with the
        allow-list the request carries; return the :class:`Route` (the judged addresses) to connect
        to, or the reason it is refused.

        A refusal is returned (permanent: the flow dead-letters); a name that does not resolve raises
        :class:`TargetUnresolvable` (an ``OSError``: the attempt is retried with backoff).
        """
        try:
            url = parse_target(request.url)
            return Route(url, await self.addresses(url, request.allow_list))
        except TargetRefused as refused:
            if refused.detail != refused.reason:
                logger.info(
                    "callback target refused for flow %s: %s",
                    request.flow_id,
                    refused.detail,
                    extra={"action": "callback_target_refused", "flow_id": request.flow_id},
                )
            return refused.reason


def target_field(index: int) -> str:
    """The request field of the ``index``-th target of a multicast callback."""
    return f"callback.urls[{index}]"


@functools.lru_cache(maxsize=4096)
def _judge_literal(address: IPAddress, host: str, allow: AllowList, allow_loopback: bool) -> str | None:
    return judge(address, host, allow, allow_loopback)


def _addresses_of(answers: list[ResolveResult]) -> tuple[IPAddress, ...] | None:
    """The distinct addresses of resolver answers (a zone id dropped), at most :data:`MAX_ANSWERS`;
    ``None`` if one is not an address."""
    out: list[IPAddress] = []
    for answer in answers:
        try:
            address = ipaddress.ip_address(str(answer["host"]).split("%", 1)[0])
        except ValueError:
            return None
        if address not in out:
            out.append(address)
    return tuple(out[:MAX_ANSWERS])


async def _system_resolve(host: str, port: int) -> list[ResolveResult]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [
        {
            "hostname": host,
            "host": str(info[4][0]),
            "port": int(info[4][1]),
            "family": info[0],
            "proto": info[2],
            "flags": 0,
        }
        for info in infos
    ]
