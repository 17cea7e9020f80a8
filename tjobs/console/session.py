"""Console cookies. The console's sessions are kept on the server now (:meth:`tjobs.console.context.Console.
principal`, rows of :class:`tjobs.stores.contracts.Accounts`: the cookie holds only a random id, and
signing out deletes the row on every node); of this codec the console uses the cookie's name and path,
``ttl_s`` and :meth:`SessionCodec.csrf_token` (for the sign-in form's token). The signed
self-contained cookie below (:meth:`SessionCodec.issue` / :meth:`SessionCodec.read`) is no longer issued.

What follows describes that signed cookie.

The cookie (``tjobs_console``, ``Path=/console``, ``HttpOnly``, ``SameSite=Strict``, ``Secure`` over
HTTPS) holds ``base64url(JSON) "." base64url(HMAC-SHA256)``. The JSON says:

- ``k``: ``"app"`` or ``"admin"``; ``a``: the app id (app sessions);
- ``t``: a *key tag*, ``HMAC(secret, sha256(key))``: never the key, nor the hash the store keeps, so
  a cookie reveals nothing that signs in anywhere else. A session holds only while its tag still
  matches the app's current key (or the current admin key): rotating a key ends its sessions;
- ``n``: a random nonce; the session's CSRF token is ``HMAC(secret, "csrf:" + nonce)``;
- ``e``: when the session ends (epoch ms; ``console.session_ttl_s`` after sign-in).

Nothing is kept server-side, so a session opened on one node works on every node that shares the
secret: ``console.session_secret``, else one derived from ``api.admin_key`` (which the nodes of a
cluster share), else a random one per process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Literal

import orjson

from tjobs.settings import Settings

COOKIE_NAME = "tjobs_console"
COOKIE_PATH = "/console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"

PrincipalKind = Literal["app", "admin"]


@dataclass(frozen=True, slots=True)
class SessionClaim:
    """What a valid cookie says; the caller still checks ``key_tag`` against the current key."""

    kind: PrincipalKind
    app_id: str | None
    key_tag: str
    nonce: str
    expires_at_ms: int


def session_secret(settings: Settings) -> bytes:
    """The cookie-signing secret of these settings (see the module docstring)."""
    if settings.console.session_secret:
        return settings.console.session_secret.encode()
    if settings.api.admin_key:
        return hmac.new(settings.api.admin_key.encode(), b"tjobs console sessions", hashlib.sha256).digest()
    return secrets.token_bytes(32)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionCodec:
    """Signs and reads session cookies, and derives key tags and CSRF tokens, with one secret."""

    def __init__(self, secret: bytes, ttl_s: int) -> None:
        self._secret = secret
        self.ttl_s = ttl_s

    def _mac(self, purpose: str, value: str | bytes) -> bytes:
        data = value.encode() if isinstance(value, str) else value
        return hmac.new(self._secret, purpose.encode() + b":" + data, hashlib.sha256).digest()

    def key_tag(self, key_hash: str) -> str:
        """The tag a session carries for the key whose SHA-256 hex digest is ``key_hash``."""
        return _b64(self._mac("key", key_hash))

    def csrf_token(self, nonce: str) -> str:
        return _b64(self._mac("csrf", nonce))

    def issue(self, kind: PrincipalKind, app_id: str | None, key_hash: str, now_ms: int) -> tuple[str, SessionClaim]:
        """A new session's cookie value and what it says."""
        claim = SessionClaim(
            kind, app_id, self.key_tag(key_hash), secrets.token_urlsafe(16), now_ms + self.ttl_s * 1000
        )
        body = orjson.dumps({"k": kind, "a": app_id, "t": claim.key_tag, "n": claim.nonce, "e": claim.expires_at_ms})
        payload = _b64(body)
        return f"{payload}.{_b64(self._mac('session', payload))}", claim

    def read(self, cookie: str | None, now_ms: int) -> SessionClaim | None:
        """The claim of a cookie this codec signed and that has not expired; ``None`` otherwise."""
        if not cookie or cookie.count(".") != 1 or len(cookie) > 1024:
            return None
        payload, _, signature = cookie.partition(".")
        try:
            given = _unb64(signature)
            if not hmac.compare_digest(given, self._mac("session", payload)):
                return None
            data = orjson.loads(_unb64(payload))
        except (ValueError, orjson.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("k") not in ("app", "admin"):
            return None
        claim = SessionClaim(data["k"], data.get("a"), str(data.get("t")), str(data.get("n")), int(data.get("e", 0)))
        if claim.expires_at_ms <= now_ms or (claim.kind == "app") != isinstance(claim.app_id, str):
            return None
        return claim

    def csrf_ok(self, claim: SessionClaim, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest((given or "").encode(), self.csrf_token(claim.nonce).encode())

    def tag_matches(self, claim: SessionClaim, key_hash: str) -> bool:
        return hmac.compare_digest(claim.key_tag.encode(), self.key_tag(key_hash).encode())
