"""SSRF matrix: refused callback targets × {registration, send, redirect, rebinding} → 0 connections.

Given listeners on loopback addresses (127.0.0.1, 127.0.0.2, 127.1.2.3, 127.255.255.254, ::1, all on
one port; plus 10.0.0.1, 169.254.169.254 and other private addresses when they can be bound, as in a
network namespace, see below), an audit hook that records every ``socket.connect``
(connections to addresses nobody listens on are stopped there: no real network), and a fake DNS that
answers a public address for any name it does not know (so a name the policy would resolve is
"public"), when each refused URL case is

* **registered**: validation + the registration policy refuse it, naming ``callback.url``, without
  revealing a DNS answer;
* **sent**: the attempt is a permanent failure;
* **redirected to** (an admitted target answers ``307 Location: <case>``): the redirect is not
  followed;
* **rebound** (a name answers public first, the case's address afterwards): the public answer is the
  only one connected to, and the next judgment refuses;

then no connection reaches a refused address: counted by the audit hook per case and by the
listeners over the whole module (``test_no_listener_was_ever_reached`` runs last).

In a loopback-only network namespace with the private addresses bound (as root)::

    unshare -n sh -c 'ip link set lo up
      for a in 10.0.0.1 169.254.169.254 192.168.1.20 172.16.0.1 100.64.0.1 100.100.100.200 169.254.170.2
      do ip addr add $a/32 dev lo; done
      ip -6 addr add fd00::1/128 dev lo nodad; ip -6 addr add fd00:ec2::254/128 dev lo nodad
      TJOBS_TEST_SSRF_NETNS=1 .venv/bin/pytest -p no:cacheprovider tests/security/test_ssrf_matrix.py'

the listeners on those addresses count too (and the run fails if they could not be bound).
"""

from __future__ import annotations

import ipaddress
import os
import selectors
import socket
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.abc import ResolveResult

from tests.http_transports import HTTP_TRANSPORTS, HttpTransportClass
from tjobs.clock import ManualClock
from tjobs.delivery.retry import Outcome
from tjobs.delivery.ssrf import RESOLVE_CACHE_TTL_MS, AllowList, TargetGuard, classify_address
from tjobs.delivery.transport import AttemptResult, CallbackRequest, Transport
from tjobs.errors import InvalidInput
from tjobs.service.validation import normalize_callback
from tjobs.settings import CallbackSettings, LimitSettings

PUBLIC = "93.184.216.34"  # what the fake DNS answers for unknown names; connections to it are stopped
REDIRECTOR = "127.0.0.100"  # the one admitted target (by the redirect scenario's allow-list)
LOOPBACK_LISTENERS = ["127.0.0.1", "127.0.0.2", "127.1.2.3", "127.255.255.254", "::1"]
PRIVATE_LISTENERS = [
    "10.0.0.1",
    "169.254.169.254",
    "192.168.1.20",
    "172.16.0.1",
    "100.64.0.1",
    "100.100.100.200",
    "169.254.170.2",
    "fd00::1",
    "fd00:ec2::254",
]


# ---- listeners: one thread accepting on every address it could bind, all on one port -----------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Listeners:
    """Counts connections accepted per address; the redirector answers ``307`` to ``/r/<case>``."""

    def __init__(self, port: int, addresses: list[str], locations: list[str]) -> None:
        self.port = port
        self.locations = locations
        self.accepted: dict[str, int] = {}
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        for address in [*addresses, REDIRECTOR]:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError:  # not configured here (a private address outside a network namespace)
                sock.close()
                continue
            sock.listen(128)
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, address)
            self.accepted[address] = 0
        self._thread = threading.Thread(target=self._run, name="ssrf-listeners", daemon=True)
        self._thread.start()

    @property
    def bound(self) -> frozenset[str]:
        return frozenset(self.accepted)

    def refused_total(self) -> int:
        return sum(n for address, n in self.accepted.items() if address != REDIRECTOR)

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.05):
                try:
                    conn, _peer = key.fileobj.accept()  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                self.accepted[key.data] += 1
                with conn:
                    if key.data == REDIRECTOR:
                        self._redirect(conn)

    def _redirect(self, conn: socket.socket) -> None:
        conn.settimeout(2)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ", 2)[1].decode()
        location = self.locations[int(path.rsplit("/", 1)[1])]
        conn.sendall(
            b"HTTP/1.1 307 Temporary Redirect\r\nLocation: "
            + location.encode("utf-8", "replace")
            + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()


PORT = _free_port()


# ---- the cases ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    url: str
    lands_at: str  # where a client reading the URL naively would connect
    via_dns: bool = False  # the address comes from a DNS answer (must never appear in a refusal)


IPV4_TARGETS = [
    "127.0.0.1",
    "127.0.0.2",
    "127.1.2.3",
    "127.255.255.254",
    "10.0.0.1",
    "169.254.169.254",
    "192.168.1.20",
    "172.16.0.1",
    "100.64.0.1",
    "100.100.100.200",
    "169.254.170.2",
    "0.0.0.0",
]
IPV6_TARGETS = ["::1", "fd00::1", "fe80::1", "::", "fd00:ec2::254"]
DIGIT_SETS = {
    "fullwidth": "０１２３４５６７８９",
    "outlined": "".join(chr(0x1CCF0 + i) for i in range(10)),  # the bypass (Unicode 16)
    "arabic_indic": "٠١٢٣٤٥٦٧٨٩",
    "devanagari": "०१२३४५६७८९",
    "math_bold": "".join(chr(0x1D7CE + i) for i in range(10)),
    "superscript": "⁰¹²³⁴⁵⁶⁷⁸⁹",
}
DNS: dict[str, list[str]] = {}


def _digits(text: str, digits: str) -> str:
    return "".join(digits[int(c)] if c.isdigit() else c for c in text)


def ipv4_cases(target: str, n: int) -> list[Case]:
    address = ipaddress.IPv4Address(target)
    a, b, c, d = address.packed
    value = int(address)
    p = PORT
    hosts = [
        target,
        str(value),
        hex(value),
        f"0{value:o}",
        ".".join(f"0{o:o}" for o in (a, b, c, d)),
        ".".join(hex(o) for o in (a, b, c, d)),
        f"{a}.{(b << 16) | (c << 8) | d}",
        f"{a}.{b}.{(c << 8) | d}",
        ".".join(f"{o:03d}" for o in (a, b, c, d)),
        f"{target}.",
        target.replace(".", "\u3002"),
        target.replace(".", "\uff0e"),
        *(_digits(target, digits) for digits in DIGIT_SETS.values()),
        _digits(target[:2], DIGIT_SETS["outlined"]) + target[2:],  # one folded digit, like 16\U0001ccf9
        "".join(f"%{ord(ch):02X}" for ch in target),
        f"[::ffff:{target}]",
        f"[::ffff:{(value >> 16):x}:{(value & 0xFFFF):x}]",
        f"[::{target}]",
        f"[64:ff9b::{target}]",
        f"[2002:{(value >> 16):x}:{(value & 0xFFFF):x}::1]",
    ]
    cases = [Case(f"http://{h}:{p}/hook", target) for h in hosts]
    DNS[f"t{n}.refused.test"] = [target]
    DNS[f"m{n}.refused.test"] = [PUBLIC, target]
    cases += [
        Case(f"http://public.test@{target}:{p}/hook", target),
        Case(f"http://:@{target}:{p}/hook", target),
        Case(f"http://public.test\\@{target}:{p}/hook", target),
        Case(f"http://{target}:{p}\\@public.test/hook", target),
        Case(f"https://{target}:{p}/hook", target),
        Case(f"http://t{n}.refused.test:{p}/hook", target, via_dns=True),
        Case(f"http://m{n}.refused.test:{p}/hook", target, via_dns=True),
        Case(f"http://T{n}.REFUSED.TEST.:{p}/hook", target, via_dns=True),
    ]
    return cases


def ipv6_cases(target: str, n: int) -> list[Case]:
    address = ipaddress.IPv6Address(target)
    DNS[f"v{n}.refused.test"] = [target]
    hosts = [
        f"[{address.compressed}]",
        f"[{address.exploded}]",
        f"[{address.exploded.upper()}]",
        f"[{address.compressed}%25lo]",
        f"[{address.compressed}%251]",
    ]
    cases = [Case(f"http://{h}:{PORT}/hook", target) for h in hosts]
    cases.append(Case(f"http://v{n}.refused.test:{PORT}/hook", target, via_dns=True))
    return cases


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for n, target in enumerate(IPV4_TARGETS):
        cases += ipv4_cases(target, n)
    for n, target in enumerate(IPV6_TARGETS):
        cases += ipv6_cases(target, n)
    DNS["localhost"] = ["127.0.0.1", "::1"]
    DNS["metadata.google.internal"] = ["169.254.169.254"]
    cases += [
        Case(f"http://localhost:{PORT}/", "127.0.0.1", via_dns=True),
        Case(f"http://LOCALHOST.:{PORT}/", "127.0.0.1", via_dns=True),
        Case(f"http://metadata.google.internal:{PORT}/computeMetadata/v1/", "169.254.169.254", via_dns=True),
        *(
            Case(u, "127.0.0.1")
            for u in (
                f"ftp://127.0.0.1:{PORT}/",
                f"gopher://127.0.0.1:{PORT}/_x",
                f"file://127.0.0.1:{PORT}/etc/passwd",
                f"ws://127.0.0.1:{PORT}/",
                f"dict://127.0.0.1:{PORT}/",
                f"//127.0.0.1:{PORT}/",
                f"http:127.0.0.1:{PORT}/",
                f"http:/127.0.0.1:{PORT}/",
                f"http://127.0.0.1 :{PORT}/",
                f"http://127.0.0.1\t:{PORT}/",
                f"http://127.0.0.1:{PORT}\u3000/",
            )
        ),
    ]
    unique: dict[str, Case] = {}
    for case in cases:  # some spellings coincide (0.0.0.0 in octal is 00.00.00.00 ...)
        unique.setdefault(case.url, case)
    return list(unique.values())


CASES = all_cases()
IDS = [f"{i:03d}" for i in range(len(CASES))]


def test_the_matrix_has_at_least_300_distinct_url_cases() -> None:
    assert len({c.url for c in CASES}) == len(CASES) >= 300


# ---- the audit hook and the fake DNS -----------------------------------------------------------------------

CONNECTS: list[tuple[str, int]] = []
_STATE: dict[str, Any] = {"recording": False, "listening": frozenset()}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect" or not _STATE["recording"]:
        return
    address = args[1]
    if not isinstance(address, tuple):
        return
    host = str(address[0]).split("%", 1)[0]
    CONNECTS.append((host, int(address[1])))
    if host not in _STATE["listening"]:
        raise ConnectionRefusedError(f"ssrf matrix: no real connection to {host}")


if not getattr(sys, "_tjobs_ssrf_matrix_audit", False):
    sys.addaudithook(_audit)
    sys._tjobs_ssrf_matrix_audit = True  # type: ignore[attr-defined]


def refused_connects(admitted: frozenset[str] = frozenset()) -> list[tuple[str, int]]:
    """The recorded connections to an address the policy refuses (loopback, private, metadata, ...)."""
    return [c for c in CONNECTS if c[0] not in admitted and classify_address(ipaddress.ip_address(c[0]))]


def _answers(host: str, port: int, addresses: list[str]) -> list[ResolveResult]:
    return [
        {
            "hostname": host,
            "host": a,
            "port": port,
            "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
            "proto": 0,
            "flags": 0,
        }
        for a in addresses
    ]


class FakeDns:
    """The module's names; ``rebind`` names answer public first and their target afterwards; any
    other name answers public (like a punycode name an attacker registered)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.rebind: dict[str, str] = {}

    async def __call__(self, host: str, port: int) -> list[ResolveResult]:
        name = host.lower().rstrip(".")
        self.calls.append(name)
        if name in self.rebind:
            first = self.calls.count(name) == 1
            return _answers(host, port, [PUBLIC] if first else [self.rebind[name]])
        return _answers(host, port, DNS.get(name, [PUBLIC]))


# ---- fixtures ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def listeners() -> Any:
    started = Listeners(PORT, LOOPBACK_LISTENERS + PRIVATE_LISTENERS, [c.url for c in CASES])
    _STATE["listening"] = started.bound
    if os.environ.get("TJOBS_TEST_SSRF_NETNS"):  # scripts/ssrf_netns.sh: the private listeners must be up
        assert set(PRIVATE_LISTENERS) <= started.bound, started.bound
    yield started
    _STATE["listening"] = frozenset()
    started.close()


@dataclass
class Rig:
    guard: TargetGuard
    sender: Transport
    dns: FakeDns
    clock: ManualClock
    listeners: Listeners


REDIRECT_APP = "redirecting-app"


def allow_list_of(app_id: str) -> AllowList:
    return AllowList.parse([f"{REDIRECTOR}/32"] if app_id == REDIRECT_APP else [])


@pytest.fixture(params=list(HTTP_TRANSPORTS))
def sender_class(request: pytest.FixtureRequest) -> HttpTransportClass:
    """Each real HTTP transport in turn (the guarantee holds for every ``callbacks.transport``)."""
    return HTTP_TRANSPORTS[request.param]


@pytest_asyncio.fixture
async def rig(listeners: Listeners, sender_class: HttpTransportClass) -> AsyncIterator[Rig]:
    dns, clock = FakeDns(), ManualClock(1_000_000)
    guard = TargetGuard(resolve=dns, clock=clock)
    sender = sender_class(CallbackSettings(timeout_ms=2000), policy=guard.policy)
    try:
        yield Rig(guard, sender, dns, clock, listeners)
    finally:
        await sender.close()


def request_for(url: str, app_id: str = "tenant") -> CallbackRequest:
    return CallbackRequest(
        app_id, "1-1", url, "POST", {"content-type": "application/json"}, b"{}", 2000, 1, allow_list_of(app_id)
    )


async def send_recording(sender: Transport, request: CallbackRequest) -> AttemptResult:
    CONNECTS.clear()
    _STATE["recording"] = True
    try:
        return await sender.send(request)
    finally:
        _STATE["recording"] = False


# ---- the four scenarios --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_registration_refuses_naming_the_field_without_dns_answers(rig: Rig, case: Case) -> None:
    CONNECTS.clear()
    _STATE["recording"] = True
    try:
        with pytest.raises(InvalidInput) as refused:
            callback = normalize_callback({"url": case.url}, LimitSettings())
            await rig.guard.check_registration(callback["urls"], AllowList.parse([]))
    finally:
        _STATE["recording"] = False
    assert refused.value.field == "callback.url"
    assert CONNECTS == []
    if case.via_dns:
        assert case.lands_at not in refused.value.message and "not allowed" in refused.value.message


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_send_connects_to_no_refused_address(rig: Rig, case: Case) -> None:
    result = await send_recording(rig.sender, request_for(case.url))
    assert refused_connects() == [] and CONNECTS == []
    assert (result.status, result.outcome) == (None, Outcome.PERMANENT), result


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_a_redirect_to_the_case_is_not_followed(rig: Rig, case: Case) -> None:
    index = CASES.index(case)
    before = rig.listeners.accepted.get(REDIRECTOR, 0)
    result = await send_recording(rig.sender, request_for(f"http://{REDIRECTOR}:{PORT}/r/{index}", REDIRECT_APP))
    assert result.status == 307, result
    assert refused_connects(admitted=frozenset({REDIRECTOR})) == []
    assert CONNECTS == [(REDIRECTOR, PORT)] and rig.listeners.accepted[REDIRECTOR] == before + 1


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_a_name_rebinding_to_the_case_is_refused_once_judged_again(rig: Rig, case: Case) -> None:
    name = f"rebind-{CASES.index(case)}.test"
    rig.dns.rebind[name] = case.lands_at
    url = f"http://{name}:{PORT}/hook"
    first = await send_recording(rig.sender, request_for(url))  # judged public: connects there only
    assert CONNECTS == [(PUBLIC, PORT)] and rig.dns.calls.count(name) == 1
    assert first.status is None and first.outcome is Outcome.RETRYABLE
    rig.clock.advance(RESOLVE_CACHE_TTL_MS)  # the answer expires: judged again, now the case's address
    second = await send_recording(rig.sender, request_for(url))
    assert CONNECTS == [] and (second.status, second.outcome) == (None, Outcome.PERMANENT)
    assert case.lands_at not in (second.error or "")
    assert rig.dns.calls.count(name) == 2


def test_no_listener_was_ever_reached(listeners: Listeners) -> None:
    """Runs last: over the whole module, no listener but the redirector accepted a connection."""
    import time

    time.sleep(0.2)  # let the listener thread accept anything still in a backlog
    assert listeners.refused_total() == 0, listeners.accepted
    assert {"127.0.0.1", "127.0.0.2", REDIRECTOR} <= listeners.bound
