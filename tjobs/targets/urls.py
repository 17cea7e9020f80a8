"""The callback URL model: one parse, shared by validation, the target policy and the sender.

A callback URL is parsed once into a :class:`CallbackUrl` whose parts no other parser needs to
re-read: the scheme (``http``/``https``), the host as ASCII (a lowercase A-label name, or the
canonical text of an address), the port and the request target (path and query, ASCII). Validation
refuses what this model refuses; the policy judges :attr:`CallbackUrl.host`; the sender connects to
the judged address with :meth:`CallbackUrl.url_for` and sends :attr:`CallbackUrl.host_header`. No
library re-parses the host to decide where to connect.

Anything that parsers are known to read differently is refused rather than interpreted
(:class:`UrlRefused`, whose ``reason`` is safe to show the caller):

* userinfo (``http://:@host/``, ``http://user@host/``): credentials belong in headers;
* a host that is numeric in any spelling a library would accept but is not a canonical dotted quad
  (``127.1``, ``0x7f.0.0.1``, ``2130706433``, ``0177.0.0.1``, ``127.0.0.1.``), including non-ASCII
  spellings that Unicode normalisation or digit folding turns into one (``16\\U0001ccf9.254.169.254``,
  ``１２７.0.0.1``, Arabic-Indic digits): :func:`parse_host` refuses a host whose last label is a
  number after any such folding unless it *is* a canonical ASCII IPv4 address;
* an IPv6 zone id (``[fe80::1%25eth0]``) or an IPvFuture literal;
* a name that IDNA 2008 / UTS-46 (non-transitional, the mapping ``yarl`` and browsers use) cannot
  encode: empty labels (``a..b``, ``.example``), labels over 63 or names over 253 characters,
  bidi-rule violations, disallowed code points (``\\x80``, ``\\ufffd``), invalid ``xn--`` labels;
* control characters, whitespace and backslashes anywhere; ``%`` in the host; a port outside
  1..65535 or not written in ASCII digits.

A fragment is dropped (it is never sent); the path and query are encoded as HTTP clients send them
(percent-encoded UTF-8, dot segments removed).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import re
import unicodedata
from dataclasses import dataclass

import idna
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SCHEMES = {"http": 80, "https": 443}
MAX_HOST_CHARS = 253
MAX_LABEL_CHARS = 63

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_ASCII_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_IPV6_CHARS = re.compile(r"^[0-9a-fA-F:.]+$")
# Characters some URL parser treats as a label separator (UTS-46 maps these to ".").
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


class UrlRefused(ValueError):
    """A callback URL (or host) the model refuses; ``reason`` says why and is safe to show."""

    def __init__(self, reason: str, code: str = "invalid_url") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


@dataclass(frozen=True, slots=True)
class Host:
    """A validated host: ``name`` is ASCII (a lowercase A-label name, a trailing dot kept, or the
    canonical text of ``address``); ``address`` is set exactly when the host is an IP literal."""

    name: str
    address: IPAddress | None

    @property
    def uri_text(self) -> str:
        """The host as written in a URL or a ``Host`` header (IPv6 in brackets)."""
        if isinstance(self.address, ipaddress.IPv6Address):
            return f"[{self.name}]"
        return self.name

    @property
    def bare_name(self) -> str:
        """The name without a trailing dot (for comparisons, TLS names and allow-lists)."""
        return self.name.rstrip(".")


@dataclass(frozen=True, slots=True)
class CallbackUrl:
    """A parsed callback URL (see the module docstring for what is refused)."""

    scheme: str
    host: Host
    port: int
    target: str  # path and query, ASCII, starting with "/"

    @property
    def is_default_port(self) -> bool:
        return SCHEMES[self.scheme] == self.port

    @property
    def host_header(self) -> str:
        """The ``Host`` header the receiver sees: the host as registered (ASCII), with a
        non-default port."""
        text = self.host.uri_text
        return text if self.is_default_port else f"{text}:{self.port}"

    @property
    def tls_name(self) -> str | None:
        """The name TLS sends (SNI) and verifies the certificate against; ``None`` for an address
        (the certificate is then verified against the address) or plain HTTP."""
        if self.scheme != "https" or self.host.address is not None:
            return None
        return self.host.bare_name

    def text(self) -> str:
        """The canonical ASCII form of the URL."""
        return f"{self.scheme}://{self.host_header}{self.target}"

    def url_for(self, address: IPAddress) -> str:
        """The URL that connects to ``address`` (a judged answer for the host): already encoded,
        to be handed to the HTTP client as is, with :attr:`host_header` and :attr:`tls_name`."""
        text = f"[{address.compressed}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
        return f"{self.scheme}://{text}:{self.port}{self.target}"


@functools.lru_cache(maxsize=16384)
def parse_callback_url(value: str) -> CallbackUrl:
    """Parse a callback URL into the model; raise :class:`UrlRefused` for anything it refuses."""
    if not value:
        raise UrlRefused("must be a non-empty string")
    for char in value:
        if char <= " " or char == "\x7f" or char == "\\" or char.isspace() or unicodedata.category(char) == "Cc":
            raise UrlRefused("must not contain whitespace, control characters or backslashes")
    scheme_match = _SCHEME.match(value)
    if scheme_match is None:
        raise UrlRefused("must be an absolute http or https URL", "bad_scheme")
    scheme = scheme_match.group(1).lower()
    if scheme not in SCHEMES:
        raise UrlRefused("scheme must be http or https", "bad_scheme")
    rest = value[scheme_match.end() :]
    if not rest.startswith("//"):
        raise UrlRefused("must be an absolute http or https URL (scheme://host/path)")
    rest = rest[2:].partition("#")[0]  # a fragment is never sent
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, target = rest[:cut], rest[cut:]
    if "@" in authority:
        raise UrlRefused("credentials in the URL are not allowed; use callback.headers")
    raw_host, port_text = _split_authority(authority)
    host = parse_host(raw_host)
    port = _parse_port(port_text, scheme)
    if not target.startswith("/"):
        target = "/" + target
    return CallbackUrl(scheme, host, port, _encode_target(target))


def _split_authority(authority: str) -> tuple[str, str | None]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise UrlRefused("host: an IPv6 address must be closed with ']'")
        host, after = authority[: end + 1], authority[end + 1 :]
        if after and not after.startswith(":"):
            raise UrlRefused("host: unexpected characters after the IPv6 address")
        return host, after[1:] if after else None
    host, colon, port = authority.partition(":")
    if ":" in port:
        raise UrlRefused("host: an IPv6 address must be written in brackets")
    return host, port if colon else None


def _parse_port(text: str | None, scheme: str) -> int:
    if not text:  # absent, or "host:" (the default port)
        return SCHEMES[scheme]
    if not _PORT.match(text) or not 1 <= int(text) <= 65535:
        raise UrlRefused("port must be a number within 1..65535")
    return int(text)


def _encode_target(target: str) -> str:
    """The path and query as HTTP clients send them: percent-encoded (UTF-8), invalid escapes
    repaired, dot segments removed (yarl's rules, applied to the target alone: the host is ours)."""
    encoded = URL("http://target.invalid" + target).raw_path_qs
    return encoded if encoded.startswith("/") else "/" + encoded


@functools.lru_cache(maxsize=16384)
def parse_host(raw: str) -> Host:
    """The one host validator: a URL host (or an allow-list name) to its ASCII :class:`Host`.

    Raises :class:`UrlRefused` for a host the model cannot represent unambiguously.
    """
    if not raw:
        raise UrlRefused("has no host")
    if raw.startswith("["):
        return _parse_ipv6_literal(raw)
    if raw.isascii():
        return _parse_ascii_host(raw)
    if _folds_to_number(raw):
        raise UrlRefused("host: a numeric address must be written in ASCII digits")
    try:
        encoded = idna.encode(raw, uts46=True, std3_rules=True, transitional=False).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError):
        raise UrlRefused("host: not a valid internationalised domain name (IDNA 2008 / UTS-46)") from None
    host = _parse_ascii_host(encoded)
    if host.address is not None:  # unreachable after _folds_to_number; kept as the invariant
        raise UrlRefused("host: a numeric address must be written in ASCII digits")
    return host


def _parse_ipv6_literal(raw: str) -> Host:
    inner = raw[1:-1] if raw.endswith("]") else ""
    if "%" in inner:
        raise UrlRefused("host: IPv6 zone ids are not allowed")
    if not inner or not _IPV6_CHARS.match(inner):
        raise UrlRefused("host: not a valid IPv6 address")
    try:
        address = ipaddress.IPv6Address(inner)
    except ValueError:
        raise UrlRefused("host: not a valid IPv6 address") from None
    return Host(address.compressed, address)


def _parse_ascii_host(raw: str) -> Host:
    name = raw.lower()
    bare = name[:-1] if name.endswith(".") else name
    if not bare:
        raise UrlRefused("has no host")
    if len(bare) > MAX_HOST_CHARS:
        raise UrlRefused(f"host: longer than {MAX_HOST_CHARS} characters")
    labels = bare.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        # What WHATWG parsers and inet_aton read as an IPv4 address: only the canonical form passes.
        try:
            address = ipaddress.IPv4Address(name)
        except ValueError:
            address = None
        if address is None or str(address) != name:
            raise UrlRefused("host: a numeric address must be a canonical dotted quad (like 192.0.2.1)")
        return Host(name, address)
    for label in labels:
        if not label:
            raise UrlRefused("host: empty label")
        if len(label) > MAX_LABEL_CHARS:
            raise UrlRefused(f"host: a label is longer than {MAX_LABEL_CHARS} characters")
        if not _ASCII_LABEL.match(label):
            raise UrlRefused("host: only letters, digits, '-' and '_' in labels, no '-' at either end")
        if label.startswith("xn--"):
            _check_a_label(label)
    return Host(name, None)


def _check_a_label(label: str) -> None:
    """An ``xn--`` label must decode to a valid U-label that does not fold to a number."""
    try:
        decoded = idna.decode(label)
    except (idna.IDNAError, UnicodeError, ValueError):
        raise UrlRefused("host: an 'xn--' label that is not valid IDNA") from None
    if _folds_to_number(decoded):
        raise UrlRefused("host: a numeric address must be written in ASCII digits")


def _folds_to_number(text: str) -> bool:
    """Whether any normalisation a URL library applies (NFKC, UTS-46 mapping, decimal-digit folding,
    ideographic full stops) makes ``text``'s last label a number, i.e. an IPv4 address candidate."""
    candidates = {text, unicodedata.normalize("NFKC", text), _fold_digits(text)}
    with contextlib.suppress(idna.IDNAError, UnicodeError, ValueError):
        candidates.add(idna.uts46_remap(text, std3_rules=False, transitional=False))
    candidates |= {_fold_digits(unicodedata.normalize("NFKC", c)) for c in tuple(candidates)}
    for candidate in candidates:
        labels = candidate.translate(_DOTS).lower().rstrip(".").split(".")
        if _NUMERIC_LABEL.match(labels[-1]):
            return True
    return False


def _fold_digits(text: str) -> str:
    return "".join(
        str(unicodedata.decimal(c)) if not c.isascii() and unicodedata.decimal(c, None) is not None else c for c in text
    )
