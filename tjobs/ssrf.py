"""Callback target policy (SSRF): which addresses tjobs may call back, checked twice.

A callback URL must be ``http``/``https``. Its host's addresses must be public unless the app's
allow-list admits them. Refused: loopback, private (RFC 1918, ULA), shared (CGNAT), link-local,
multicast, unspecified, reserved and documentation ranges, cloud metadata addresses, and the IPv6
forms that embed an IPv4 address (v4-mapped ``::ffff:a.b.c.d``, v4-compatible, 6to4, Teredo, NAT64),
which are judged by the IPv4 address inside. Numeric hosts must be canonical: ``0177.0.0.1``,
``2130706433``, ``0x7f.1`` or ``127.1`` are refused outright whatever they decode to.

1. **At registration** (:meth:`TargetGuard.check_registration`): the URL is parsed, a literal address
   is judged, and a name is resolved (with a short cache) and every answer judged.
2. **At send** (:meth:`TargetGuard.policy`, the sender's ``TargetPolicy``): the name is resolved
   again (answers are cached for ``RESOLVE_CACHE_TTL_MS``, and so is the verdict on exactly those
   answers per allow-list, so a burst of sends judges once) and the answer is *pinned* for this
   request: :class:`GuardedResolver`, the resolver of the sender's connector, hands aiohttp exactly
   the addresses that were judged, never a second DNS answer. A resolver that answers public then
   private therefore cannot rebind a callback.
   Redirects are never followed (the sender's ``allow_redirects=False``).

Allow-list entries (per app, ``allowed_callback_hosts``): an exact host name (``billing.internal``),
a suffix wildcard (``*.corp.example``), an address (``10.0.0.7``, ``fd00::1``) or a network
(``10.0.0.0/8``). A name entry admits whatever that name resolves to; an address or network entry
admits those addresses under any name. Metadata addresses are refused even then. ``tjobs dev``
(``settings.allow_loopback_callbacks``) admits loopback targets, and nothing else beyond this policy.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from tjobs.callbacks.sender import CallbackRequest
from tjobs.clock import Clock, SystemClock
from tjobs.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

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
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]*))*\.?$", re.IGNORECASE)
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"^(\*\.)?({_LABEL}\.)*{_LABEL}\.?$", re.IGNORECASE)
RESOLVE_TIMEOUT_S = 2.0
RESOLVE_CACHE_TTL_MS = 30_000
RESOLVE_CACHE_MAX = 10_000


class TargetUnresolvable(OSError):
    """The target's name does not resolve (now): not a refusal. At send the attempt is retried later
    (the sender treats an ``OSError`` from its policy as retryable); at registration it is accepted."""


class TargetRefused(Exception):
    """A callback target the policy refuses; ``reason`` says why (names the address, never a secret)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


def parse_literal(host: str) -> IPAddress | None:
    """The address a URL host names literally, or ``None`` for a name; odd numeric forms are refused."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    bare = bare.split("%", 1)[0]  # an IPv6 zone id names an interface, never a different address
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if _NUMERIC_HOST.match(bare):
        raise TargetRefused(f"host {host!r} is a non-canonical numeric address")
    return None


@dataclass(frozen=True, slots=True)
class AllowList:
    """An app's admitted callback hosts, parsed once."""

    names: frozenset[str]
    suffixes: tuple[str, ...]
    networks: tuple[IPNetwork, ...]

    @classmethod
    def parse(cls, entries: Sequence[str], field: str = "allowed_callback_hosts") -> AllowList:
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for i, raw in enumerate(entries):
            entry = raw.strip().lower().rstrip(".")
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if not entry or len(entry) > 253 or not _HOST_NAME.match(entry) or _NUMERIC_HOST.match(entry):
                raise InvalidInput(f"{field}[{i}]", "must be a host name, *.suffix, an address or a network")
            if entry.startswith("*."):
                suffixes.append(entry[1:])
            else:
                names.add(entry)
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def admits_name(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.names or any(host.endswith(s) for s in self.suffixes)

    def admits_address(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)


EMPTY_ALLOW_LIST = AllowList(frozenset(), (), ())
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
    if allow_loopback and (_LOOPBACK_ONLY.admits_address(address)
                           or (inner is not None and _LOOPBACK_ONLY.admits_address(inner))):
        return None
    return why


_NAME = "<a name, to resolve>"


@functools.lru_cache(maxsize=4096)
def _judge_literal(host: str, allow: AllowList, allow_loopback: bool) -> str | None:
    """Why a URL host may not be called without DNS: a refusal, ``None`` for an admitted address, or
    :data:`_NAME` when it is a name (judged after resolving). Cached: registrations repeat hosts."""
    try:
        literal = parse_literal(host)
    except TargetRefused as refused:
        return refused.reason
    if literal is None:
        return _NAME
    return judge(literal, host, allow, allow_loopback)


@functools.lru_cache(maxsize=16384)
def _check_url(url: str, allow: AllowList, allow_loopback: bool) -> tuple[str | None, tuple[str, int] | None]:
    """``(refusal, None)``, or ``(None, (host, port) still to resolve)``, or ``(None, None)`` for an
    admitted address: the DNS-free verdict on a URL, cached (every send of a task repeats its URL)."""
    parts = urlsplit(url)  # a ValueError (bad port or IPv6 literal) propagates, uncached
    port = parts.port
    if parts.scheme not in ("http", "https"):
        return "scheme must be http or https", None
    host = parts.hostname
    if not host:
        return "the URL has no host", None
    port = port or (443 if parts.scheme == "https" else 80)
    why = _judge_literal(host, allow, allow_loopback)
    if why is _NAME:
        return None, (host, port)
    return why, None


Resolve = Callable[[str, int], Awaitable[list[ResolveResult]]]
AllowListOf = Callable[[str], Awaitable[AllowList]]


@dataclass(frozen=True, slots=True)
class _Pin:
    host: str
    port: int
    answers: list[ResolveResult]


@dataclass(frozen=True, slots=True)
class _Resolved:
    """A name's cached answers and the verdicts on exactly those answers, per allow-list."""

    expires_ms: int
    answers: list[ResolveResult]
    verdicts: dict[AllowList, str | None]


_UNJUDGED = "<not judged yet>"

_PINNED: contextvars.ContextVar[_Pin | None] = contextvars.ContextVar("tjobs_ssrf_pin", default=None)


class GuardedResolver(AbstractResolver):
    """The sender connector's resolver: returns the addresses the policy judged for this request.

    Without a pin (a connection the policy did not see), it resolves and applies the default policy
    (no allow-list), raising :class:`OSError` for a refused answer; aiohttp then connects to nothing.
    """

    def __init__(self, guard: TargetGuard) -> None:
        self._guard = guard

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        pin = _PINNED.get()
        if pin is not None and pin.host == host and pin.port == port:
            return list(pin.answers)
        try:
            return await self._guard.resolve_checked(host, port, EMPTY_ALLOW_LIST)
        except TargetRefused as refused:
            raise OSError(refused.reason) from None  # TargetUnresolvable is an OSError already

    async def close(self) -> None:
        await self._guard.close()


class TargetGuard:
    """The SSRF policy of one node: registration checks, the send-time policy and its resolver."""

    def __init__(
        self,
        allow_list_of: AllowListOf,
        *,
        allow_loopback: bool = False,
        resolve: Resolve | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._allow_list_of = allow_list_of
        self.allow_loopback = allow_loopback
        self._threaded: ThreadedResolver | None = None
        self._resolve = resolve or self._system_resolve
        self._clock = clock or SystemClock()
        self._cache: dict[tuple[str, int], _Resolved] = {}
        self.resolver = GuardedResolver(self)

    async def _system_resolve(self, host: str, port: int) -> list[ResolveResult]:
        if self._threaded is None:
            self._threaded = ThreadedResolver()
        return await self._threaded.resolve(host, port, family=socket.AF_UNSPEC)

    async def close(self) -> None:
        if self._threaded is not None:
            await self._threaded.close()
            self._threaded = None

    async def resolve_checked(self, host: str, port: int, allow: AllowList) -> list[ResolveResult]:
        """Resolve ``host`` and judge every answer; all must pass (one private answer refuses all)."""
        now_ms = self._clock.now_ms()
        key = (host.lower(), port)
        resolved = self._cache.get(key)
        if resolved is None or resolved.expires_ms <= now_ms:
            try:
                async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                    answers = await self._resolve(host, port)
            except (OSError, TimeoutError) as error:
                raise TargetUnresolvable(f"host {host!r} does not resolve ({type(error).__name__})") from None
            if len(self._cache) >= RESOLVE_CACHE_MAX:
                self._cache.clear()
            resolved = self._cache[key] = _Resolved(now_ms + RESOLVE_CACHE_TTL_MS, answers, {})
        answers = resolved.answers
        if not answers:
            raise TargetUnresolvable(f"host {host!r} has no address")
        # The verdict on these very answers, per allow-list: judged once per cached answer, not per send.
        verdict = resolved.verdicts.get(allow, _UNJUDGED)
        if verdict is _UNJUDGED:
            verdict = resolved.verdicts[allow] = self._judge_answers(host, answers, allow)
        if verdict is not None:
            raise TargetRefused(verdict)
        return answers

    def _judge_answers(self, host: str, answers: list[ResolveResult], allow: AllowList) -> str | None:
        """Why the answers for ``host`` may not be called (the first refused one), or ``None``."""
        for answer in answers:
            try:
                address = ipaddress.ip_address(str(answer["host"]).split("%", 1)[0])
            except ValueError:
                return f"host {host!r} resolved to an unreadable address"
            why = judge(address, host, allow, self.allow_loopback)
            if why is not None:
                return f"host {host!r} resolves to {why}"
        return None

    def check_url(self, url: str, allow: AllowList) -> tuple[str, int] | None:
        """Judge the parts of ``url`` that need no DNS; return ``(host, port)`` still to resolve, if any."""
        refusal, pending = _check_url(url, allow, self.allow_loopback)
        if refusal is not None:
            raise TargetRefused(refusal)
        return pending

    async def check_registration(self, urls: Sequence[str], allow: AllowList, field: str = "callback.url"
                                 ) -> None:
        """Refuse (422, naming the field) any target the policy refuses; names are resolved now too.

        A name that does not resolve yet is accepted here (it is judged again at every send).
        """
        for i, url in enumerate(urls):
            name = field if len(urls) == 1 else f"callback.urls[{i}]"
            try:
                pending = self.check_url(url, allow)
                if pending is not None:
                    try:
                        await self.resolve_checked(pending[0], pending[1], allow)
                    except TargetUnresolvable:
                        continue  # judged again at every send
            except TargetRefused as refused:
                message = f"callback target refused: {refused.reason}"
                raise InvalidInput(name, message, "target_refused") from None

    async def policy(self, request: CallbackRequest) -> str | None:
        """The sender's ``TargetPolicy``: judge the target now and pin the judged answer for connecting.

        A refusal is returned (permanent: the flow dead-letters); a name that does not resolve raises
        :class:`TargetUnresolvable` (an ``OSError``: the attempt is retried with backoff).
        """
        _PINNED.set(None)
        try:
            allow = await self._allow_list_of(request.app_id)
            pending = self.check_url(request.url, allow)
            if pending is None:
                return None
            host, port = pending
            answers = await self.resolve_checked(host, port, allow)
        except TargetRefused as refused:
            return refused.reason
        _PINNED.set(_Pin(host, port, list(answers)))
        return None


def allow_list_of_app(settings: dict[str, Any]) -> AllowList:
    """The parsed allow-list stored in an app's ``settings`` (parsed once per distinct list)."""
    entries = settings.get("allowed_callback_hosts") or []
    return _parsed(tuple(str(e) for e in entries))


@functools.lru_cache(maxsize=1024)
def _parsed(entries: tuple[str, ...]) -> AllowList:
    try:
        return AllowList.parse(entries)
    except InvalidInput:
        return EMPTY_ALLOW_LIST
