"""SSRF matrix: no connection is ever attempted to a refused callback target.

Given the node's target guard wired into each real HTTP transport (the policy hands the sender
the judged addresses; the sender connects to those only) and a fake DNS, when a callback is sent to
each refused target (addresses in every range and encoding, names resolving to them, non-HTTP
schemes), then the attempt is a permanent failure and an audit hook
on ``socket.connect`` sees no connection at all. The same targets are refused at registration. An
allow-list admits what it names; a resolver answering public then private cannot rebind a callback.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.abc import ResolveResult

from tests.case_table import check_every
from tests.http_transports import HTTP_TRANSPORTS, HttpTransportClass
from tests.receiver import Receiver
from tjobs.clock import ManualClock
from tjobs.delivery import ssrf
from tjobs.delivery.ssrf import AllowList, TargetGuard, classify_address
from tjobs.delivery.transport import AttemptResult, CallbackRequest, Outcome, Route, Transport
from tjobs.errors import InvalidInput
from tjobs.settings import CallbackSettings

# ---- the audit hook: every socket.connect while recording; anything but loopback is blocked ---------

CONNECTS: list[Any] = []
LOOKUPS: list[Any] = []  # socket.getaddrinfo while recording: the HTTP client resolving on its own
_RECORDING = [False]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _RECORDING[0]:
        return
    if event == "socket.getaddrinfo":
        LOOKUPS.append(args[0])
        return
    if event != "socket.connect":
        return
    address = args[1]
    CONNECTS.append(address)
    host = address[0] if isinstance(address, tuple) else str(address)
    if host not in ("127.0.0.1", "::1"):
        raise ConnectionRefusedError(f"test audit hook: no real connection to {host}")


if not getattr(sys, "_tjobs_ssrf_audit_installed", False):
    sys.addaudithook(_audit)
    sys._tjobs_ssrf_audit_installed = True  # type: ignore[attr-defined]


# ---- a fake DNS ------------------------------------------------------------------------------------------

PUBLIC_V4 = "93.184.216.34"
DNS: dict[str, list[str]] = {
    "localhost": ["127.0.0.1", "::1"],
    "localhost.localdomain": ["127.0.0.1"],
    "metadata.google.internal": ["169.254.169.254"],
    "instance-data.ec2.internal": ["169.254.169.254"],
    "intranet.test": ["10.0.0.5"],
    "db.corp.test": ["10.20.30.40"],
    "printer.test": ["192.168.1.20"],
    "cgnat.test": ["100.64.1.1"],
    "v6private.test": ["fd00::1"],
    "v6linklocal.test": ["fe80::1"],
    "v6loopback.test": ["::1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "mapped-private.test": ["::ffff:10.0.0.1"],
    "nat64.test": ["64:ff9b::a9fe:a9fe"],
    "sixtofour.test": ["2002:c0a8:101::1"],
    "mixed.test": [PUBLIC_V4, "10.0.0.1"],
    "mixed-v6.test": ["2606:2800:220:1::1", "::1"],
    "multicast.test": ["224.0.0.251"],
    "zero.test": ["0.0.0.0"],
    "broadcast.test": ["255.255.255.255"],
    "reserved.test": ["240.0.0.1"],
    "public.test": [PUBLIC_V4],
}


def answers(host: str, port: int, addresses: list[str]) -> list[ResolveResult]:
    out: list[ResolveResult] = []
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        out.append({"hostname": host, "host": address, "port": port, "family": family, "proto": 0, "flags": 0})
    return out


class FakeDns:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.rebind_calls = 0

    async def __call__(self, host: str, port: int) -> list[ResolveResult]:
        self.calls.append(host)
        if host == "rebind.test":  # public first, private afterwards
            self.rebind_calls += 1
            return answers(host, port, [PUBLIC_V4] if self.rebind_calls == 1 else ["127.0.0.1"])
        if host not in DNS:
            raise OSError(f"NXDOMAIN {host}")
        return answers(host, port, DNS[host])


ALLOWING_APP = "app-with-allow-list"


def allow_list_of(app_id: str) -> AllowList:
    if app_id == ALLOWING_APP:
        return AllowList.parse(["10.0.0.0/8", "*.corp.test", "fd00::/8"])
    return AllowList.parse([])


# ---- the matrix --------------------------------------------------------------------------------------------

REFUSED_LITERALS = [
    # IPv4 loopback, private, shared, link-local, metadata, multicast, reserved, special
    "127.0.0.1",
    "127.1.2.3",
    "127.255.255.254",
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.0.1",
    "192.168.255.255",
    "169.254.169.254",
    "169.254.0.1",
    "169.254.170.2",
    "100.64.0.1",
    "100.127.255.255",
    "100.100.100.200",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "192.0.0.1",
    "192.0.0.192",
    "192.0.2.1",
    "198.18.0.1",
    "198.51.100.7",
    "203.0.113.9",
    # IPv6 loopback, unspecified, link-local, ULA, site-local, multicast, documentation, discard
    "[::1]",
    "[::]",
    "[0:0:0:0:0:0:0:1]",
    "[fe80::1]",
    "[fe80::1%25eth0]",
    "[fc00::1]",
    "[fd00::1]",
    "[fd00:ec2::254]",
    "[fec0::1]",
    "[ff02::1]",
    "[ff05::1:3]",
    "[2001:db8::1]",
    "[100::1]",
    # IPv6 forms embedding a refused IPv4 address
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::ffff:10.0.0.1]",
    "[::ffff:169.254.169.254]",
    "[::ffff:192.168.1.1]",
    "[::127.0.0.1]",
    "[::10.0.0.1]",
    "[2002:7f00:1::]",
    "[2002:a00:1::1]",
    "[2002:a9fe:a9fe::]",
    "[64:ff9b::7f00:1]",
    "[64:ff9b::a9fe:a9fe]",
    "[64:ff9b::10.0.0.1]",
    "[2001:0:4136:e378:8000:63bf:80ff:fffe]",  # Teredo wrapping 127.0.0.1
]
ODD_ENCODINGS = [
    "0177.0.0.1",
    "0x7f.0.0.1",
    "0x7f.1",
    "0x7f000001",
    "2130706433",
    "017700000001",
    "127.1",
    "127.0.1",
    "127.000.000.001",
    "0",
    "0x0",
    "1",
    "10.1",
    "167772161",
    "3232235521",
    "0xa9fea9fe",
    "2852039166",
    "0251.0376.0251.0376",
    "0xA9.0xFE.0xA9.0xFE",
    "0300.0250.0.1",
    "0x7F.0x0.0x0.0x1",
    "127.0.0.1.",
]
REFUSED_NAMES = [
    "localhost",
    "localhost.localdomain",
    "metadata.google.internal",
    "instance-data.ec2.internal",
    "intranet.test",
    "printer.test",
    "cgnat.test",
    "v6private.test",
    "v6linklocal.test",
    "v6loopback.test",
    "mapped.test",
    "mapped-private.test",
    "nat64.test",
    "sixtofour.test",
    "mixed.test",
    "mixed-v6.test",
    "multicast.test",
    "zero.test",
    "broadcast.test",
    "reserved.test",
    "does-not-exist.test",
]
REFUSED_SCHEMES = [
    "ftp://public.test/",
    "file:///etc/passwd",
    "gopher://public.test/",
    "ws://public.test/",
    "wss://public.test/",
    "javascript:alert(1)",
    "data:text/plain,hi",
    "dict://public.test:11211/",
    "ldap://public.test/",
    "//public.test/",
]
# Spellings another parser folds to a refused address (yarl: NFKC/UTS-46), and URLs the model cannot
# represent unambiguously: refused as URLs, whatever a resolver would answer for their punycode.
DIFFERENTIAL = [
    "http://16\U0001ccf9.254.169.254/",
    "http://12\U0001ccf7.0.0.1/",
    "http://１２７.０.０.１/",
    "http://\U0001d7cf\U0001d7d0\U0001d7d5.0.0.1/",
    "http://¹²⁷.0.0.1/",
    "http://127。0。0。1/",
    "http://\u0661\u0660.0.0.1/",
    "http://10.0.0.\u0967/",
    "http://xn--16-fy20a.254.169.254/",
    "http://[fe80::1%25eth0]/",
    "http://[::1%251]/",
    "http://%31%32%37.0.0.1/",
    "http://:@public.test/",
    "http://public.test@127.0.0.1/",
    "http://public.test\\@127.0.0.1/",
    "http://a..b/",
    "http://.public.test/",
    "http://" + "a" * 64 + ".test/",
    "http://" + ("a" * 60 + ".") * 5 + "test/",
    "http://\u05d0a.test/",
    "http://pub\x80lic.test/",
    "http://\ufffd.test/",
    "http://127.0.0.1\t/",
]


def refused_urls() -> list[str]:
    urls: list[str] = []
    for host in REFUSED_LITERALS:
        urls.append(f"http://{host}/hook")
    for host in REFUSED_LITERALS[::4]:
        urls.append(f"https://{host}:8443/hook")
    for host in ODD_ENCODINGS:
        urls.append(f"http://{host}/hook")
    for host in REFUSED_NAMES:
        urls.append(f"http://{host}/hook")
        urls.append(f"https://{host.upper()}:22/x?y=1")
    urls += REFUSED_SCHEMES
    urls += DIFFERENTIAL
    return urls


REFUSED = refused_urls()


def test_the_matrix_has_at_least_one_hundred_cases() -> None:
    assert len(REFUSED) >= 100 and len(set(REFUSED)) == len(REFUSED)


def request_for(url: str, app_id: str = "app") -> CallbackRequest:
    return CallbackRequest(
        app_id, "1-1", url, "POST", {"content-type": "application/json"}, b"{}", 1000, 1, allow_list_of(app_id)
    )


@pytest.fixture(params=list(HTTP_TRANSPORTS))
def sender_class(request: pytest.FixtureRequest) -> HttpTransportClass:
    """Each real HTTP transport in turn (the guarantee holds for every ``callbacks.transport``)."""
    return HTTP_TRANSPORTS[request.param]


@pytest_asyncio.fixture
async def guarded(sender_class: HttpTransportClass) -> AsyncIterator[tuple[TargetGuard, Transport, FakeDns]]:
    dns = FakeDns()
    guard = TargetGuard(resolve=dns)
    sender = sender_class(CallbackSettings(timeout_ms=1000), policy=guard.policy)
    try:
        yield guard, sender, dns
    finally:
        await sender.close()


async def send_recording(sender: Transport, request: CallbackRequest) -> tuple[AttemptResult, list[Any]]:
    CONNECTS.clear()
    LOOKUPS.clear()
    _RECORDING[0] = True
    try:
        result = await sender.send(request)
    finally:
        _RECORDING[0] = False
    return result, list(CONNECTS)


# The refused URLs are checked inside one test each (tests/case_table.py: a URL per test cost more in pytest
# than in its check), each URL on a fresh guard and sender as before; a failure names every failing URL.


async def test_no_connection_is_attempted_to_a_refused_target(sender_class: HttpTransportClass) -> None:
    async def check(url: str) -> None:
        dns = FakeDns()
        guard = TargetGuard(resolve=dns)
        sender = sender_class(CallbackSettings(timeout_ms=1000), policy=guard.policy)
        try:
            result, connects = await send_recording(sender, request_for(url))
        finally:
            await sender.close()
        assert connects == []
        # refused: permanent (dead letter); a name that does not resolve now: retried later, still unconnected
        expected = Outcome.RETRYABLE if "does-not-exist" in url.lower() else Outcome.PERMANENT
        assert result.status is None and result.outcome is expected, result

    await check_every(REFUSED, check, repr)


async def test_a_refused_target_is_refused_at_registration_naming_the_field() -> None:
    async def check(url: str) -> None:
        guard = TargetGuard(resolve=FakeDns())  # the guard judges before any transport: once, not per transport
        with pytest.raises(InvalidInput) as refused:
            await guard.check_registration([url], AllowList.parse([]))
        assert refused.value.field == "callback.url"

    await check_every([u for u in REFUSED if "does-not-exist" not in u.lower()], check, repr)


async def test_a_name_that_does_not_resolve_yet_is_accepted_at_registration_and_retried_at_send(
    guarded: tuple[TargetGuard, Transport, FakeDns],
) -> None:
    guard, sender, _ = guarded
    await guard.check_registration(["http://does-not-exist.test/"], AllowList.parse([]))
    result, connects = await send_recording(sender, request_for("http://does-not-exist.test/"))
    assert connects == [] and result.outcome is Outcome.RETRYABLE and "does not resolve" in (result.error or "")


async def test_a_resolver_answering_public_then_private_cannot_rebind_a_callback(
    guarded: tuple[TargetGuard, Transport, FakeDns], sender_class: HttpTransportClass
) -> None:
    _, sender, dns = guarded
    async with Receiver() as receiver:  # listening on 127.0.0.1: where a rebinding would land
        port = int(receiver.url("/").split(":")[2].split("/")[0])
        result, connects = await send_recording(sender, request_for(f"http://rebind.test:{port}/hook"))
        assert dns.calls.count("rebind.test") == 1  # judged once; that answer is the one connected to
        assert [c[0] for c in connects] == [PUBLIC_V4]
        assert receiver.requests == [] and result.status is None
        # A fresh guard now sees the private answer and refuses without connecting.
        guard2 = TargetGuard(resolve=dns)
        sender2 = sender_class(CallbackSettings(timeout_ms=1000), policy=guard2.policy)
        try:
            result2, connects2 = await send_recording(sender2, request_for(f"http://rebind.test:{port}/hook"))
        finally:
            await sender2.close()
        assert connects2 == [] and result2.outcome is Outcome.PERMANENT and receiver.requests == []


async def test_the_policy_routes_to_the_judged_answers_and_the_client_never_resolves(
    guarded: tuple[TargetGuard, Transport, FakeDns],
) -> None:
    guard, sender, _ = guarded
    refusal = await guard.policy(request_for("http://intranet.test/"))
    assert refusal == "host 'intranet.test' is not allowed as a callback target"
    route = await guard.policy(request_for("https://public.test:8443/hook?x=1"))
    assert isinstance(route, Route)
    assert route.addresses == (ipaddress.ip_address(PUBLIC_V4),)
    assert route.url.url_for(route.addresses[0]) == f"https://{PUBLIC_V4}:8443/hook?x=1"
    assert (route.url.host_header, route.url.tls_name) == ("public.test:8443", "public.test")
    # When sent, the only connection goes to the judged answer, and nothing else resolves the name.
    result, connects = await send_recording(sender, request_for("https://public.test:8443/hook?x=1"))
    assert [c[:2] for c in connects] == [(PUBLIC_V4, 8443)] and LOOKUPS == [] and result.status is None


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5/hook",
        "http://db.corp.test/hook",
        "http://[fd00::7]/hook",
        "http://intranet.test/hook",
        "http://[::ffff:10.1.1.1]/hook",
    ],
)
async def test_the_apps_allow_list_admits_what_it_names(
    guarded: tuple[TargetGuard, Transport, FakeDns], url: str
) -> None:
    guard, sender, _ = guarded
    await guard.check_registration([url], allow_list_of(ALLOWING_APP))
    result, connects = await send_recording(sender, request_for(url, ALLOWING_APP))
    assert len(connects) == 1  # attempted (and stopped by the audit hook: no real network in tests)
    assert result.outcome is Outcome.RETRYABLE


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/",
        "http://127.0.0.1/",
        "http://192.168.1.1/",
    ],
)
async def test_the_allow_list_never_admits_metadata_or_what_it_does_not_name(
    guarded: tuple[TargetGuard, Transport, FakeDns], url: str
) -> None:
    _, sender, _ = guarded
    result, connects = await send_recording(sender, request_for(url, ALLOWING_APP))
    assert connects == [] and result.outcome is Outcome.PERMANENT


async def test_dev_mode_admits_loopback_and_nothing_else(sender_class: HttpTransportClass) -> None:
    dns = FakeDns()
    guard = TargetGuard(allow_loopback=True, resolve=dns)
    sender = sender_class(CallbackSettings(timeout_ms=2000), policy=guard.policy)
    try:
        async with Receiver() as receiver:
            result, connects = await send_recording(sender, request_for(receiver.url("/hook")))
            assert result.outcome is Outcome.DELIVERED and len(receiver.requests) == 1
            assert connects and all(c[0] == "127.0.0.1" for c in connects)
        for url in ("http://10.0.0.1/", "http://169.254.169.254/", "http://intranet.test/", "http://0177.0.0.1/"):
            result, connects = await send_recording(sender, request_for(url))
            assert connects == [] and result.outcome is Outcome.PERMANENT, url
    finally:
        await sender.close()


async def test_public_targets_are_attempted(guarded: tuple[TargetGuard, Transport, FakeDns]) -> None:
    _, sender, _ = guarded
    for url in (f"http://{PUBLIC_V4}/", "https://public.test/hook", "http://[2606:2800:220:1::1]/"):
        result, connects = await send_recording(sender, request_for(url))
        assert len(connects) == 1 and result.outcome is Outcome.RETRYABLE, (url, result)


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", PUBLIC_V4, "2001:4860:4860::8888", "2606:4700::1111"])
def test_public_addresses_are_not_classified(address: str) -> None:
    assert classify_address(ipaddress.ip_address(address)) is None


def test_the_aiohttp_transport_never_follows_redirects() -> None:
    """(The transport contract suite proves it of every transport, on the wire.)"""
    import inspect

    from tjobs.delivery.http import HttpTransport

    assert "allow_redirects=False" in inspect.getsource(HttpTransport.send)


# ---- the send-time cache ----------------------------------------------------------------------------------


async def test_a_burst_of_sends_to_one_name_is_resolved_and_judged_once_per_ttl(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judged: list[str] = []
    real_judge = ssrf.judge

    def counting_judge(address: Any, host: str, allow: AllowList, allow_loopback: bool) -> str | None:
        judged.append(host)
        return real_judge(address, host, allow, allow_loopback)

    monkeypatch.setattr(ssrf, "judge", counting_judge)
    dns, clock = FakeDns(), ManualClock(1_000_000)
    guard = TargetGuard(resolve=dns, clock=clock)
    for _ in range(50):
        assert isinstance(await guard.policy(request_for("https://public.test/hook")), Route)
        refusal = await guard.policy(request_for("https://intranet.test/hook"))
        assert refusal == "host 'intranet.test' is not allowed as a callback target"  # the answer is not shown
        assert isinstance(await guard.policy(request_for("https://intranet.test/hook", ALLOWING_APP)), Route)
    # one resolution per name; one verdict per name and allow-list (the allowing app is judged apart)
    assert sorted(dns.calls) == ["intranet.test", "public.test"]
    assert sorted(judged) == ["intranet.test", "intranet.test", "public.test"]
    # Once the answers expire the name is resolved and judged afresh: a verdict never outlives them.
    clock.advance(ssrf.RESOLVE_CACHE_TTL_MS)
    assert isinstance(await guard.policy(request_for("https://public.test/hook")), Route)
    assert dns.calls.count("public.test") == 2 and judged.count("public.test") == 2


async def test_a_cached_answer_that_changes_is_judged_again_on_expiry(caplog: pytest.LogCaptureFixture) -> None:
    dns, clock = FakeDns(), ManualClock(1_000_000)
    guard = TargetGuard(resolve=dns, clock=clock)
    public = ipaddress.ip_address(PUBLIC_V4)
    first = await guard.policy(request_for("http://rebind.test/hook"))  # public at first
    second = await guard.policy(request_for("http://rebind.test/hook"))  # same cached answer
    assert isinstance(first, Route) and isinstance(second, Route) and first.addresses == second.addresses == (public,)
    clock.advance(ssrf.RESOLVE_CACHE_TTL_MS)
    with caplog.at_level(logging.INFO, logger="tjobs.delivery.ssrf"):
        refusal = await guard.policy(request_for("http://rebind.test/hook"))  # now private
    # the tenant is told "not allowed"; the answer (loopback 127.0.0.1) is only in the node's log
    assert refusal == "host 'rebind.test' is not allowed as a callback target"
    assert any("loopback address 127.0.0.1" in r.getMessage() for r in caplog.records)


# ---- allow-list entries: validated by the same host function as URLs ---------------------------------------


def test_allow_list_names_are_parsed_like_url_hosts() -> None:
    allow = AllowList.parse(["Billing.Internal.", "*.Bücher.example", "10.0.0.0/8", "[fd00::7]"])
    assert allow.names == frozenset({"billing.internal"})
    assert allow.suffixes == (".xn--bcher-kva.example",)
    assert ssrf.parse_target("http://api.bücher.example/").host.name == "api.xn--bcher-kva.example"
    assert allow.admits_name("api.xn--bcher-kva.example") and allow.admits_name("billing.internal.")
    assert allow.admits_address(ipaddress.ip_address("fd00::7"))


@pytest.mark.parametrize(
    "entry",
    [
        "127.1",
        "0x7f.0.0.1",
        "a..b",
        "*.",
        "*",
        "host:80",
        "user@host",
        "１２７.0.0.1",
        "a" * 64,
        "exa mple",
        "\ufffd.example",
        "",
    ],
)
def test_allow_list_entries_the_host_function_refuses_are_refused(entry: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        AllowList.parse(["ok.example", entry])
    assert refused.value.field == "allowed_callback_hosts[1]"


def test_allow_lists_with_the_same_entries_are_one_key_and_others_are_not() -> None:
    """Verdicts are kept per allow-list (hashed once, when parsed): equal lists share them, a list
    with one more entry never does."""
    one = AllowList.parse(["10.0.0.0/8", "billing.internal", "*.corp.example"])
    same = AllowList.parse(["*.corp.example", "billing.internal", "10.0.0.0/8"][::-1])
    wider = AllowList.parse(["10.0.0.0/8", "billing.internal", "*.corp.example", "127.0.0.1"])
    verdicts = {one: "one"}
    assert same == one and hash(same) == hash(one) and verdicts[same] == "one"
    assert wider != one and wider not in verdicts
