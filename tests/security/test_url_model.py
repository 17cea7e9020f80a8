"""The callback URL model: one parse, refusing what parsers read differently.

Table-driven cases pin what is accepted (and as which ASCII host) and what is refused; Hypothesis
then checks the model against the parsers that have disagreed with it before (yarl, which aiohttp
uses; Python's ``urlsplit`` with its IDNA 2003 codec; ``inet_aton``) over every Unicode decimal digit
and every code point UTS-46 maps to digits: whenever any of them reads a URL's host as an IP address,
the model refuses the URL or reads the very same address, and the ASCII URL the model hands to the
HTTP client is read back unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import socket
import string
import unicodedata
from urllib.parse import urlsplit

import idna
import pytest
from aiohttp.helpers import is_ip_address
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from yarl import URL

from tjobs.targets.urls import CallbackUrl, UrlRefused, parse_callback_url, parse_host

# ---- accepted: the ASCII model of each --------------------------------------------------------------

ACCEPTED = [
    # url, canonical text, host name, address (None for a name)
    ("http://example.com/hook", "http://example.com/hook", "example.com", None),
    ("HTTPS://Example.COM:8443/a?b=c#frag", "https://example.com:8443/a?b=c", "example.com", None),
    ("http://example.com", "http://example.com/", "example.com", None),
    ("http://example.com:80/", "http://example.com/", "example.com", None),
    ("https://example.com:443?x", "https://example.com/?x", "example.com", None),
    ("http://example.com:/", "http://example.com/", "example.com", None),
    ("http://example.com./", "http://example.com./", "example.com.", None),
    ("http://under_score.example/", "http://under_score.example/", "under_score.example", None),
    ("http://ab--cd.example/", "http://ab--cd.example/", "ab--cd.example", None),
    ("http://ß.de/", "http://xn--zca.de/", "xn--zca.de", None),  # IDNA 2008: not "ss.de"
    ("http://xn--zca.de/", "http://xn--zca.de/", "xn--zca.de", None),
    ("http://ＥＸＡＭＰＬＥ.com/", "http://example.com/", "example.com", None),
    ("https://例え.テスト/x", "https://xn--r8jz45g.xn--zckzah/x", "xn--r8jz45g.xn--zckzah", None),
    ("http://bücher.example/ü?q=é", "http://xn--bcher-kva.example/%C3%BC?q=%C3%A9", "xn--bcher-kva.example", None),
    ("http://93.184.216.34/", "http://93.184.216.34/", "93.184.216.34", "93.184.216.34"),
    (
        "http://[2606:2800:220:1:0:0:0:1]:81/",
        "http://[2606:2800:220:1::1]:81/",
        "2606:2800:220:1::1",
        "2606:2800:220:1::1",
    ),
    ("http://[::FFFF:127.0.0.1]/", "http://[::ffff:7f00:1]/", "::ffff:7f00:1", "::ffff:7f00:1"),
    ('http://a/ü/x/../b?é=1&r=%zz"<>', "http://a/%C3%BC/b?%C3%A9=1&r=%25zz%22%3C%3E", "a", None),
    ("http://a//b.example/x", "http://a//b.example/x", "a", None),  # a path, never a second authority
    ("http://a/b@c", "http://a/b@c", "a", None),  # '@' in the path is not userinfo
    ("http://a?x=@b", "http://a/?x=@b", "a", None),
    ("http://a#@b/", "http://a/", "a", None),
    ("http://" + "a" * 63 + ".example/", "http://" + "a" * 63 + ".example/", "a" * 63 + ".example", None),
    ("http://" + ("a" * 62 + ".") * 4 + "b/", None, ("a" * 62 + ".") * 4 + "b", None),  # 253 characters
]


@pytest.mark.parametrize(("url", "text", "host", "address"), ACCEPTED)
def test_accepted_urls_have_one_ascii_model(url: str, text: str | None, host: str, address: str | None) -> None:
    parsed = parse_callback_url(url)
    assert parsed.host.name == host
    assert parsed.host.address == (ipaddress.ip_address(address) if address else None)
    if text is not None:
        assert parsed.text() == text
    assert parsed.text().isascii() and parse_callback_url(parsed.text()) == parsed  # a fixed point


def test_the_model_names_what_the_sender_needs() -> None:
    named = parse_callback_url("https://Hook.Example:8443/p?q=1")
    address = ipaddress.ip_address("93.184.216.34")
    assert (named.scheme, named.port, named.target) == ("https", 8443, "/p?q=1")
    assert (named.host_header, named.tls_name) == ("hook.example:8443", "hook.example")
    assert named.url_for(address) == "https://93.184.216.34:8443/p?q=1"
    assert named.url_for(ipaddress.ip_address("2606:2800:220:1::1")) == "https://[2606:2800:220:1::1]:8443/p?q=1"
    dotted = parse_callback_url("https://hook.example./")
    assert (dotted.host_header, dotted.tls_name) == ("hook.example.", "hook.example")
    literal = parse_callback_url("https://[2606:2800:220:1::1]/")
    assert (literal.host_header, literal.tls_name) == ("[2606:2800:220:1::1]", None)
    assert parse_callback_url("http://h.example/").tls_name is None


# ---- refused ----------------------------------------------------------------------------------------

REFUSED = [
    # userinfo, in every spelling
    "http://:@example.com/",
    "http://user@example.com/",
    "http://user:pw@example.com/",
    "http://@example.com/",
    "http://example.com@127.0.0.1/",
    "http://127.0.0.1:80@example.com/",
    "http://a%40b@example.com/",
    # hosts IDNA cannot encode
    "http://a..b/",
    "http://.example/",
    "http://example..com/",
    "http://" + "a" * 64 + ".com/",
    "http://" + ("a" * 62 + ".") * 4 + "bc/",
    "http://" + ("a" * 50 + ".") * 6 + "com/",
    "http://\u05d0a.example/",  # bidi: a right-to-left label with a left-to-right letter
    "http://a\u0627.example/",
    "http://exa\x80mple.com/",
    "http://\ufffd.com/",
    "http://exa\ufffdmple.com/",
    "http://xn--zz.com/",
    "http://xn--.com/",
    "http://-lead.example/",
    "http://trail-.example/",
    "http://a_\u00e9.example/",
    "http://ex*ample.com/",
    "http://ex%61mple.com/",
    "http://exa\u200dmple.com/",
    "http://\U0001f600.example/",  # an emoji is disallowed in IDNA 2008
    # numeric hosts that are not a canonical dotted quad
    "http://127.1/",
    "http://127.0.1/",
    "http://0x7f.0.0.1/",
    "http://0x7f000001/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://127.000.000.001/",
    "http://127.0.0.1./",
    "http://0/",
    "http://1.2.3.4.5/",
    "http://256.0.0.1/",
    "http://example.123/",
    "http://example.0x1/",
    # non-ASCII spellings of numbers
    "http://16\U0001ccf9.254.169.254/",
    "http://１２７.0.0.1/",
    "http://127。0。0。1/",
    "http://127．0．0．1/",
    "http://127.0.0.\u0661/",
    "http://\u0661\u0662\u0667.0.0.1/",
    "http://1\u0666\u0669.254.169.254/",
    "http://\U0001d7cf\U0001d7d0\U0001d7d5.0.0.1/",
    "http://①②⑦.0.0.1/",
    "http://127.0.0.¹/",
    "http://example.\u0661\u0662\u0663/",
    "http://example.xn--16-fy20a/",
    "http://xn--16-fy20a.254.169.254/",
    # IPv6 literals the model cannot represent unambiguously
    "http://[fe80::1%25eth0]/",
    "http://[fe80::1%eth0]/",
    "http://[v1.fe80::a]/",
    "http://[::1/",
    "http://[::1]x/",
    "http://::1/",
    "http://[127.0.0.1]/",
    "http://[::g]/",
    # ports
    "http://example.com:0/",
    "http://example.com:65536/",
    "http://example.com:+80/",
    "http://example.com:٨٠/",
    "http://example.com:8o/",
    "http://example.com: 80/",
    "http://example.com:80:80/",
    # characters and shapes
    "http://exa mple.com/",
    "http://example.com/a b",
    "http://example.com/\t",
    "http://example.com\\@evil/",
    "http://example.com\\.evil/",
    "http://example.com/\\",
    "http://ex\nample.com/",
    "http://\u3000.example/",
    "http://example.com/\x85",
    "",
    "http:",
    "http:/example.com/",
    "http:///example.com/",
    "http://",
    "//example.com/",
    "example.com/hook",
    "ftp://example.com/",
    "file:///etc/passwd",
    "javascript:alert(1)",
    "ws://example.com/",
    "gopher://example.com/",
    "data:text/plain,hi",
    "h\u0074tp\u00b7://example.com/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_refused_urls_say_why_in_words_safe_to_show(url: str) -> None:
    with pytest.raises(UrlRefused) as refused:
        parse_callback_url(url)
    assert refused.value.reason and "\n" not in refused.value.reason


def test_refusal_codes_name_a_bad_scheme_apart() -> None:
    with pytest.raises(UrlRefused) as refused:
        parse_callback_url("ftp://example.com/")
    assert refused.value.code == "bad_scheme"
    with pytest.raises(UrlRefused) as refused:
        parse_callback_url("http://a..b/")
    assert refused.value.code == "invalid_url"


@pytest.mark.parametrize("host", ["10.0.0.0/8", "*.example.com", "[::1", "a..b", "", "0x7f.1"])
def test_parse_host_refuses_what_is_not_a_host(host: str) -> None:
    with pytest.raises(UrlRefused):
        parse_host(host)


# ---- differential: the model against the parsers that disagreed with it ---------------------------------


@functools.cache
def digit_code_points() -> list[str]:
    """Every non-ASCII decimal digit (Nd) this Python knows, and every code point UTS-46 (as the
    ``idna`` package maps it, which may know a newer Unicode) maps to ASCII digits."""
    found = {chr(c) for c in range(0x80, 0x110000) if unicodedata.category(chr(c)) == "Nd"}
    for code in range(0x80, 0x32000):
        try:
            mapped = idna.uts46_remap(chr(code), std3_rules=False, transitional=False)
        except (idna.IDNAError, ValueError):
            continue
        if mapped and mapped.isascii() and mapped.isdigit():
            found.add(chr(code))
    return sorted(found)


def test_the_digit_classes_include_the_ones_that_bypassed_the_policy() -> None:
    digits = set(digit_code_points())
    assert {chr(0x1CCF0 + i) for i in range(10)} <= digits  # OUTLINED DIGIT ZERO..NINE (Unicode 16)
    assert {"\u0661", "\uff11", "\U0001d7cf", "\u2460", "\u00b9"} <= digits
    assert len(digits) > 600


def yarl_address(url: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a client using yarl's host would connect to without asking a resolver: aiohttp's
    own reading (an IP literal), or what ``inet_aton`` (``getaddrinfo``) makes of that host."""
    try:
        host = URL(url).host
    except (ValueError, UnicodeError):
        return None
    if not host:
        return None
    if ":" in host:
        return ipaddress.IPv6Address(host.split("%", 1)[0])
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host.rstrip(".")))
    except (ValueError, UnicodeError, OSError):
        return None


def legacy_address(url: str) -> ipaddress.IPv4Address | None:
    """What Python's ``urlsplit`` + IDNA 2003 codec + ``inet_aton`` would connect to, if an address."""
    try:
        host = urlsplit(url).hostname
        ascii_host = host.encode("idna").decode() if host else ""
        return ipaddress.IPv4Address(socket.inet_aton(ascii_host.rstrip(".")))
    except (ValueError, UnicodeError, OSError):
        return None


def assert_consistent(url: str) -> None:
    """Whenever another parser reads ``url``'s host as an address, the model refuses it or reads that
    same address; an accepted URL's ASCII form is read back unchanged by yarl."""
    try:
        parsed: CallbackUrl | None = parse_callback_url(url)
    except UrlRefused:
        parsed = None
    for other in (yarl_address(url), legacy_address(url)):
        if other is not None and parsed is not None:
            assert parsed.host.address == other, (url, parsed, other)
    if parsed is None:
        return
    as_sent = URL(parsed.text(), encoded=True)
    assert as_sent.raw_host == parsed.host.name, (url, parsed)
    assert is_ip_address(as_sent.raw_host) == (parsed.host.address is not None), (url, parsed)
    if parsed.host.address is None:
        assert yarl_address(parsed.text()) is None and legacy_address(parsed.text()) is None, (url, parsed)
        assert not parsed.host.bare_name.split(".")[-1].isdigit()


SEPARATORS = [".", ".", ".", "\u3002", "\uff0e", "\uff61"]


@functools.cache
def digit_labels() -> st.SearchStrategy[list[str]]:
    """1-5 labels of 1-4 digits, ASCII or Unicode. Built once, not for every host drawn: building the text
    strategy's alphabet (the digits' interval set) again for each of 400 examples took ~1 s of CPU."""
    digit = st.one_of(st.sampled_from(string.digits), st.sampled_from(digit_code_points()))
    return st.lists(st.text(digit, min_size=1, max_size=4), min_size=1, max_size=5)


@st.composite
def numeric_hosts(draw: st.DrawFn) -> str:
    """Hosts of 1-5 labels of digits, mixing ASCII with one or more Unicode digit classes."""
    labels = draw(digit_labels())
    host = labels[0]
    for label in labels[1:]:
        host += draw(st.sampled_from(SEPARATORS)) + label
    if draw(st.booleans()):
        host = draw(st.sampled_from(["0x", "0X", ""])) + host
    if draw(st.integers(0, 5)) == 0:
        host += "."
    return host


def test_every_digit_code_point_in_an_address_is_refused() -> None:
    for digit in digit_code_points():
        for host in (
            f"{digit}.0.0.1",
            f"12{digit}.0.0.1",
            f"127.0.0.{digit}",
            f"16{digit}.254.169.254",
            f"{digit}",
            f"0x{digit}",
            f"example.{digit}",
            f"{digit}{digit}.example",
        ):
            url = f"http://{host}/"
            assert_consistent(url)
            if host != f"{digit}{digit}.example":
                with pytest.raises(UrlRefused):
                    parse_callback_url(url)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(numeric_hosts(), st.sampled_from(["http", "https"]), st.sampled_from(["", ":8080"]))
def test_no_digit_spelling_reaches_an_address_the_model_did_not_read(host: str, scheme: str, port: str) -> None:
    url = f"{scheme}://{host}{port}/hook"
    assert_consistent(url)
    parsed = None
    with contextlib.suppress(UrlRefused):
        parsed = parse_callback_url(url)
    if parsed is not None and not host.isascii():  # a non-ASCII spelling is never read as an address
        assert parsed.host.address is None


@settings(max_examples=1000, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_text_host_is_refused_or_modelled_consistently(host: str) -> None:
    url = f"http://{host}/x"
    try:
        parsed = parse_callback_url(url)
    except UrlRefused:
        return
    assert parsed.text().isascii() and len(parsed.host.bare_name) <= 253
    assert all(0 < len(label) <= 63 for label in parsed.host.bare_name.split(".")) or parsed.host.address
    assert_consistent(url)


@settings(max_examples=800, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["dec", "hex", "oct", "short", "mapped", "compat"]))
def test_every_ipv4_spelling_is_canonical_or_refused(value: int, spelling: str) -> None:
    address = ipaddress.IPv4Address(value)
    a, b, c, d = address.packed
    host = {
        "dec": str(value),
        "hex": hex(value),
        "oct": ".".join(f"0{o:o}" for o in (a, b, c, d)),
        "short": f"{a}.{(b << 16) | (c << 8) | d}",
        "mapped": f"[::ffff:{address}]",
        "compat": f"[::{address}]",
    }[spelling]
    url = f"http://{host}/"
    assert_consistent(url)
    if spelling in ("mapped", "compat"):
        parsed = parse_callback_url(url)
        assert parsed.host.address == ipaddress.IPv6Address(host[1:-1])
    elif host != str(address):
        with pytest.raises(UrlRefused):
            parse_callback_url(url)


@settings(max_examples=300, deadline=None)
@given(st.ip_addresses(v=6), st.sampled_from(["%25eth0", "%251", "%lo", ""]))
def test_ipv6_literals_are_canonicalised_and_zone_ids_refused(address: ipaddress.IPv6Address, zone: str) -> None:
    url = f"http://[{address.exploded.upper()}{zone}]/"
    if zone:
        with pytest.raises(UrlRefused, match="zone"):
            parse_callback_url(url)
        return
    parsed = parse_callback_url(url)
    assert parsed.host.address == address and parsed.host.name == address.compressed
    assert_consistent(url)
