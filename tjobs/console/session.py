"""Console cookies. The console's sessions are kept on the server (:meth:`tjobs.console.context.Console.
principal`, rows of :class:`tjobs.stores.contracts.Accounts`: the cookie (``tjobs_console``,
``Path=/console``, ``HttpOnly``, ``SameSite=Strict``, ``Secure`` over HTTPS) holds only a random id, and
signing out deletes the row on every node). This module names the cookie and the CSRF field, and
:class:`SessionCodec` derives the tokens the console signs with one secret (the sign-in form's CSRF
token, the OIDC state cookie's MAC) and carries ``console.session_ttl_s``.

The secret: ``console.session_secret``, else one derived from ``api.admin_key`` (which the nodes of a
cluster share, so a token signed on one node holds on every node), else a random one per process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from tjobs.settings import Settings

COOKIE_NAME = "tjobs_console"
COOKIE_PATH = "/console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


def session_secret(settings: Settings) -> bytes:
    """The cookie-signing secret of these settings (see the module docstring)."""
    if settings.console.session_secret:
        return settings.console.session_secret.encode()
    if settings.api.admin_key:
        return hmac.new(settings.api.admin_key.encode(), b"tjobs console sessions", hashlib.sha256).digest()
    return secrets.token_bytes(32)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class SessionCodec:
    """Derives the console's CSRF tokens and MACs with one secret; ``ttl_s`` is a session's lifetime."""

    def __init__(self, secret: bytes, ttl_s: int) -> None:
        self._secret = secret
        self.ttl_s = ttl_s

    def _mac(self, purpose: str, value: str | bytes) -> bytes:
        data = value.encode() if isinstance(value, str) else value
        return hmac.new(self._secret, purpose.encode() + b":" + data, hashlib.sha256).digest()

    def csrf_token(self, nonce: str) -> str:
        return _b64(self._mac("csrf", nonce))
