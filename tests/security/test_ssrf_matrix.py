"""SSRF matrix: refused callback targets × {registration, send, redirect, rebinding} → 0 connections.

Given listeners on loopback addresses (127.0.0.1, 127.0.0.2, 127.1.2.3, 127.255.255.254, ::1, all on
one port; plus 10.0.0.1, 169.254.169.254 and other private addresses when they can be bound, as in a
network namespace, see below), an audit hook that records every ``socket.connect``
(connections to addresses nobody listens on are stopped there: no real network), and a fake DNS that
answers a public address for any name it does not know (so a name the policy would resolve is
"public"), when each refused URL case is

* **registered**: validation + the registration policy refuse it, naming ``callback.url``, without
  revealing a DNS answer (judged by the guard before any transport is involved: once, not per transport);
* **sent**: the attempt is a permanent failure;
* **redirected to** (an admitted target answers ``307 Location: <case>``): the redirect is not
  followed;
* **rebound** (a name answers public first, the case's address afterwards): the public answer is the
  only one connected to, and the next judgment refuses (the rebinding name is the test's own, so of a
  case only its address is an input: once per refused address, not per spelling of it);

then no connection reaches a refused address: counted by the audit hook per case, and by the listeners
per case (counts before and after its requests) and over the whole module
(``test_no_listener_was_ever_reached`` runs last).

In a loopback-only network namespace, ``scripts/ssrf_netns.sh`` (as root) binds every address of
:func:`addresses_for_the_namespace` to ``lo`` and sets ``TJOBS_TEST_SSRF_NETNS=1``: the listeners then
bind the private and metadata addresses too (the run fails if they cannot), wildcard listeners on the
port and on 80 and 443 catch a connection to any other local address or a URL that lost its port, and
the matrix runs on uvloop as well as asyncio (``tests/security/conftest.py``). uvloop connects in libuv,
past the audit hook, so there only the listeners count, and a connection to anything but ``lo`` fails at
once for want of a route. ``TJOBS_TEST_SSRF_REPORT=<path>`` writes the listeners' counts and the cases run
per scenario, transport and loop as JSON, which the script prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import selectors
import socket
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.abc import ResolveResult

from testkit.ports import free_port
from tests.case_table import check_every
from tests.http_transports import HTTP_TRANSPORTS
from tjobs.clock import ManualClock
from tjobs.delivery.ssrf import RESOLVE_CACHE_TTL_MS, AllowList, TargetGuard, classify_address
from tjobs.delivery.transport import AttemptResult, CallbackRequest, Outcome, Transport
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


def _listening_socket(address: str, port: int) -> socket.socket | None:
    """A listening socket on ``address:port``, or None where the address is not configured (a private
    address outside a network namespace, a port below 1024 without root). ``SO_REUSEPORT`` lets the
    wildcard listeners share the port with the specific ones (the kernel hands a connection to the most
    specific); a wildcard IPv6 listener takes IPv6 only."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if hasattr(socket, "SO_REUSEPORT"):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        sock.bind((address, port))
    except OSError:
        sock.close()
        return None
    sock.listen(128)
    sock.setblocking(False)
    return sock


class Listeners:
    """Counts every connection accepted, by the address and port it was made to; the redirector answers
    ``307`` to ``/r/<case>``.

    ``addresses`` are bound on ``port`` (those that can be); with ``catch_all`` (the network namespace),
    wildcard listeners on ``port`` and on each of ``catch_all`` ports catch a connection to any other local
    address (all of 127.0.0.0/8, an address bound to ``lo`` but not listed) or to a default port (a URL
    whose port got lost on the way). :meth:`settle` returns once every connection already made has been
    counted, so a test can compare counts before and after its one request.
    """

    def __init__(
        self, port: int, addresses: list[str], locations: list[str], catch_all: tuple[int, ...] | None = None
    ) -> None:
        self.port = port
        self.locations = locations
        self.accepted: dict[str, int] = {}  # "address port" -> connections accepted
        self.bound: frozenset[str] = frozenset()  # the addresses listened on at ``port``
        self.caught_by_wildcard: list[str] = []  # "address:port" of the wildcard listeners bound
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._passes = threading.Condition()
        self._started = self._finished = self._wanted = 0
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, "wake")
        bound: set[str] = set()
        for address in [*addresses, REDIRECTOR]:
            if (sock := _listening_socket(address, port)) is not None:
                self._selector.register(sock, selectors.EVENT_READ, "redirector" if address == REDIRECTOR else "count")
                bound.add(address)
        self.bound = frozenset(bound)
        if catch_all is not None:
            for wildcard in ("0.0.0.0", "::"):
                for wildcard_port in (port, *catch_all):
                    if (sock := _listening_socket(wildcard, wildcard_port)) is not None:
                        self._selector.register(sock, selectors.EVENT_READ, "count")
                        self.caught_by_wildcard.append(f"{wildcard} {wildcard_port}")
        self._thread = threading.Thread(target=self._run, name="ssrf-listeners", daemon=True)
        self._thread.start()

    def snapshot(self) -> dict[str, int]:
        self.settle()
        return dict(self.accepted)

    def reached_since(self, before: dict[str, int]) -> dict[str, int]:
        """The connections accepted since ``before`` (a :meth:`snapshot`), by ``"address port"``."""
        self.settle()
        return {key: n - before.get(key, 0) for key, n in self.accepted.items() if n != before.get(key, 0)}

    def refused_total(self) -> int:
        self.settle()
        return sum(n for key, n in self.accepted.items() if key != f"{REDIRECTOR} {self.port}")

    def settle(self) -> None:
        """Return once a pass of the accept loop that began after this call has finished (a connection
        whose ``connect`` returned is in a listen queue by then, so it has been counted)."""
        with self._passes:
            wanted = self._wanted = max(self._wanted, self._started + 1)
        self._wake_writer.send(b"\0")
        with self._passes:
            while self._finished < wanted and self._thread.is_alive():
                self._passes.wait(1)
        # a dead accept loop counts nothing: every later "not reached" would pass without looking
        assert self._thread.is_alive() or self._stop.is_set(), "the listeners' accept loop has died"

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._passes:
                self._started += 1
                number = self._started
                timeout = 0 if self._wanted >= number else 0.05
            for key, _ in self._selector.select(timeout=timeout):
                if key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        self._wake_reader.recv(4096)
                    continue
                self._accept_all(key.fileobj, redirect=key.data == "redirector")  # type: ignore[arg-type]
            with self._passes:
                self._finished = number
                self._passes.notify_all()

    def _accept_all(self, sock: socket.socket, *, redirect: bool) -> None:
        while True:
            try:
                conn, _peer = sock.accept()
            except BlockingIOError:
                return
            with conn:
                address, port = conn.getsockname()[:2]
                key = f"{str(address).split('%', 1)[0]} {port}"
                self.accepted[key] = self.accepted.get(key, 0) + 1
                if redirect:
                    self._redirect(conn)

    def _redirect(self, conn: socket.socket) -> None:
        """Answer one request with a 307. A client that sends nothing within the answer timeout, or goes
        away, fails only its own case (CI at load 7: a 2-s read timeout raised here once killed the accept
        loop, and every later case of the run waited 20 s for an answer)."""
        conn.setblocking(True)
        conn.settimeout(ANSWER_TIMEOUT_MS / 1000)
        data = b""
        try:
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
        except OSError:  # socket.timeout included: the case sees no 307 and says so
            return

    def report(self) -> dict[str, Any]:
        self.settle()
        return {
            "port": self.port,
            "bound": sorted(self.bound),
            "wildcards": self.caught_by_wildcard,
            "accepted": dict(sorted(self.accepted.items())),
        }

    def close(self) -> None:
        self._stop.set()
        self._wake_writer.send(b"\0")
        self._thread.join(2)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._wake_writer.close()


PORT = free_port()


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

NETNS = bool(os.environ.get("TJOBS_TEST_SSRF_NETNS"))  # inside scripts/ssrf_netns.sh's loopback-only namespace
DEFAULT_PORTS = (80, 443)  # where a URL that lost its port on the way would land (caught in the namespace)
RUNS: Counter[tuple[str, str, str]] = Counter()  # (scenario, transport, loop) -> cases run
NO_TRANSPORT = "none"  # the transport of a registration run: the guard judges before any transport


def addresses_for_the_namespace() -> list[str]:
    """The addresses ``scripts/ssrf_netns.sh`` binds to ``lo`` (127.0.0.0/8 and ``::1`` are there already):
    every refused target and listener address that is not, so a connection to any of them is counted."""
    wanted = [*PRIVATE_LISTENERS, *IPV4_TARGETS, *IPV6_TARGETS]
    on_lo = ipaddress.ip_network("127.0.0.0/8")
    unspecified = {ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::"), ipaddress.ip_address("::1")}
    chosen: list[str] = []
    for text in wanted:
        address = ipaddress.ip_address(text)
        if address in unspecified or (address.version == 4 and address in on_lo) or text in chosen:
            continue
        chosen.append(text)
    return chosen


@pytest.fixture(scope="module")
def listeners() -> Any:
    started = Listeners(
        PORT,
        LOOPBACK_LISTENERS + PRIVATE_LISTENERS,
        [c.url for c in CASES],
        catch_all=DEFAULT_PORTS if NETNS else None,
    )
    _STATE["listening"] = started.bound
    if NETNS:  # scripts/ssrf_netns.sh: every address is bound, and nothing but lo is reachable
        assert set(PRIVATE_LISTENERS) <= started.bound, started.bound
        assert len(started.caught_by_wildcard) == 2 * (1 + len(DEFAULT_PORTS)), started.caught_by_wildcard
        with socket.socket() as probe, pytest.raises(OSError):
            probe.connect((PUBLIC, PORT))  # no route out of the namespace
    yield started
    if report := os.environ.get("TJOBS_TEST_SSRF_REPORT"):
        runs = [{"scenario": s, "transport": t, "loop": lo, "cases": n} for (s, t, lo), n in sorted(RUNS.items())]
        with open(report, "w") as out:
            json.dump({**started.report(), "redirector": REDIRECTOR, "cases": len(CASES), "runs": runs}, out)
    _STATE["listening"] = frozenset()
    started.close()


@dataclass
class Rig:
    guard: TargetGuard
    sender: Transport
    dns: FakeDns
    clock: ManualClock
    listeners: Listeners
    transport: str
    loop: str

    @property
    def audited(self) -> bool:
        """Whether the loop's connects pass the audit hook (asyncio's do; uvloop's are made in libuv and are
        counted only by the listeners)."""
        return self.loop == "asyncio"

    def ran(self, scenario: str) -> None:
        RUNS[(scenario, self.transport, self.loop)] += 1


REDIRECT_APP = "redirecting-app"


def allow_list_of(app_id: str) -> AllowList:
    return AllowList.parse([f"{REDIRECTOR}/32"] if app_id == REDIRECT_APP else [])


@pytest.fixture(params=list(HTTP_TRANSPORTS))
def sender_name(request: pytest.FixtureRequest) -> str:
    """Each real HTTP transport in turn (the guarantee holds for every ``callbacks.transport``)."""
    return str(request.param)


@contextlib.asynccontextmanager
async def rig_for(listeners: Listeners, sender_name: str) -> AsyncIterator[Rig]:
    """A fresh rig (DNS, clock, guard and sender) for one case, as each case had as a test of its own."""
    dns, clock = FakeDns(), ManualClock(1_000_000)
    guard = TargetGuard(resolve=dns, clock=clock)
    # Connecting is bounded by each request's own timeout (2 s, or ANSWER_TIMEOUT_MS for a listener that
    # answers), not by a 2-s connect timeout of its own: a clean-clone run at load 7 timed out connecting to
    # the redirector on loopback after 2.26 s, the event loop too busy to see the connect complete.
    settings = CallbackSettings(timeout_ms=2000, connect_timeout_ms=ANSWER_TIMEOUT_MS)
    sender = HTTP_TRANSPORTS[sender_name](settings, policy=guard.policy)
    try:
        yield Rig(guard, sender, dns, clock, listeners, sender_name, _loop_name())
    finally:
        await sender.close()


def _loop_name() -> str:
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def request_for(url: str, app_id: str = "tenant", timeout_ms: int = 2000) -> CallbackRequest:
    return CallbackRequest(
        app_id, "1-1", url, "POST", {"content-type": "application/json"}, b"{}", timeout_ms, 1, allow_list_of(app_id)
    )


ANSWER_TIMEOUT_MS = 20_000  # a listener of this process that answers: under load its thread may answer late


async def send_recording(sender: Transport, request: CallbackRequest) -> AttemptResult:
    CONNECTS.clear()
    _STATE["recording"] = True
    try:
        return await sender.send(request)
    finally:
        _STATE["recording"] = False


# ---- the four scenarios --------------------------------------------------------------------------------------
# Each scenario checks every case inside one test (tests/case_table.py: a case per test cost more in pytest
# than in the case); a failure names every failing case by its number (as its test id was) and URL.


def label(case: Case) -> str:
    return f"{CASES.index(case):03d} {case.url!r}"


async def test_registration_refuses_naming_the_field_without_dns_answers(listeners: Listeners) -> None:
    async def check(case: Case) -> None:
        guard = TargetGuard(resolve=FakeDns(), clock=ManualClock(1_000_000))  # no transport: it judges before one
        before = listeners.snapshot()
        CONNECTS.clear()
        _STATE["recording"] = True
        try:
            with pytest.raises(InvalidInput) as refused:
                callback = normalize_callback({"url": case.url}, LimitSettings())
                await guard.check_registration(callback["urls"], AllowList.parse([]))
        finally:
            _STATE["recording"] = False
        assert refused.value.field == "callback.url"
        assert CONNECTS == [] and listeners.reached_since(before) == {}
        if case.via_dns:
            assert case.lands_at not in refused.value.message and "not allowed" in refused.value.message
        RUNS[("registration", NO_TRANSPORT, _loop_name())] += 1

    await check_every(CASES, check, label)


async def test_send_connects_to_no_refused_address(listeners: Listeners, sender_name: str) -> None:
    async def check(case: Case) -> None:
        async with rig_for(listeners, sender_name) as rig:
            before = rig.listeners.snapshot()
            result = await send_recording(rig.sender, request_for(case.url))
            assert refused_connects() == [] and CONNECTS == []
            assert rig.listeners.reached_since(before) == {}
            assert (result.status, result.outcome) == (None, Outcome.PERMANENT), result
            rig.ran("send")

    await check_every(CASES, check, label)


async def test_a_redirect_to_the_case_is_not_followed(listeners: Listeners, sender_name: str) -> None:
    async def check(case: Case) -> None:
        async with rig_for(listeners, sender_name) as rig:
            index = CASES.index(case)
            before = rig.listeners.snapshot()
            # (the redirector answers from a thread of this process: at load 7 a 2-s deadline passed before it did)
            url = f"http://{REDIRECTOR}:{PORT}/r/{index}"
            result = await send_recording(rig.sender, request_for(url, REDIRECT_APP, ANSWER_TIMEOUT_MS))
            assert result.status == 307, result
            assert refused_connects(admitted=frozenset({REDIRECTOR})) == []
            if rig.audited:
                assert CONNECTS == [(REDIRECTOR, PORT)]
            assert rig.listeners.reached_since(before) == {f"{REDIRECTOR} {PORT}": 1}
            rig.ran("redirect")

    await check_every(CASES, check, label)


REFUSED_ADDRESSES = list(dict.fromkeys(c.lands_at for c in CASES))  # what the cases' spellings land at


def test_every_target_address_is_a_rebinding_case() -> None:
    assert set(REFUSED_ADDRESSES) == {*IPV4_TARGETS, *IPV6_TARGETS}, REFUSED_ADDRESSES


async def test_a_name_rebinding_to_a_refused_address_is_refused_once_judged_again(
    listeners: Listeners, sender_name: str
) -> None:
    async def check(address: str) -> None:
        async with rig_for(listeners, sender_name) as rig:
            name = f"rebind-{REFUSED_ADDRESSES.index(address)}.test"
            rig.dns.rebind[name] = address
            url = f"http://{name}:{PORT}/hook"
            before = rig.listeners.snapshot()
            first = await send_recording(rig.sender, request_for(url))  # judged public: connects there only
            if rig.audited:
                assert CONNECTS == [(PUBLIC, PORT)]
            assert rig.dns.calls.count(name) == 1
            assert first.status is None and first.outcome is Outcome.RETRYABLE
            rig.clock.advance(RESOLVE_CACHE_TTL_MS)  # the answer expires: judged again, now the case's address
            second = await send_recording(rig.sender, request_for(url))
            assert CONNECTS == [] and (second.status, second.outcome) == (None, Outcome.PERMANENT)
            assert address not in (second.error or "")
            assert rig.dns.calls.count(name) == 2
            assert rig.listeners.reached_since(before) == {}
            rig.ran("rebinding")

    await check_every(REFUSED_ADDRESSES, check, str)


def test_no_listener_was_ever_reached(listeners: Listeners) -> None:
    """Runs last: over the whole module, no listener but the redirector accepted a connection."""
    assert listeners.refused_total() == 0, listeners.accepted
    assert {"127.0.0.1", "127.0.0.2", REDIRECTOR} <= listeners.bound
