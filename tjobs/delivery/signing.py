"""Standard Webhooks signatures: ``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``.

A secret is ``whsec_`` followed by the base64 of 32 random bytes; the HMAC key is the decoded bytes.
While an app rotates its secret it lists several, and every callback carries one signature per secret,
space-separated, so a receiver holding either the old or the new secret verifies it
(https://www.standardwebhooks.com/ spec, "Signature scheme").
"""

from __future__ import annotations

import _hashlib
import base64
import binascii
import hmac
import secrets as _secrets
from collections.abc import Mapping, Sequence
from functools import lru_cache

from tjobs.clock import SystemClock

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
DEFAULT_TOLERANCE_S = 300  # the spec's default window against replays


def generate_secret() -> str:
    """A new signing secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(SECRET_BYTES)).decode("ascii")


@lru_cache(maxsize=4096)
def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret (decoded once and cached: apps sign on every callback)."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError("a webhook secret must be whsec_ followed by base64") from error
    if not key:
        raise ValueError("a webhook secret must not be empty")
    return key


@lru_cache(maxsize=4096)
def _keyed(secret: str) -> _hashlib.HMAC:
    """OpenSSL's HMAC-SHA256 keyed with ``secret`` and fed nothing: each signature starts from a copy
    of it, which skips the digest lookup and key setup the one-shot ``hmac.digest`` pays per call
    (``_hashlib`` is what :mod:`hmac` runs on; its ``HMAC`` without the Python wrapper's three calls)."""
    return _hashlib.hmac_new(secret_key(secret), digestmod="sha256")


def _signature(keyed: _hashlib.HMAC, msg_id: str, timestamp_s: int, body: bytes) -> str:
    mac = keyed.copy()
    mac.update(f"{msg_id}.{timestamp_s}.".encode() + body)
    return "v1," + binascii.b2a_base64(mac.digest(), newline=False).decode("ascii")


def sign(secret: str, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of ``body`` for message ``msg_id`` sent at ``timestamp_s``."""
    return _signature(_keyed(secret), msg_id, timestamp_s, body)


def signature_header(secrets: Sequence[str], msg_id: str, timestamp_s: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per secret, space-separated."""
    if not secrets:
        raise ValueError("an app needs at least one signing secret")
    if len(secrets) == 1:
        return _signature(_keyed(secrets[0]), msg_id, timestamp_s, body)
    return " ".join(_signature(_keyed(s), msg_id, timestamp_s, body) for s in secrets)


def verify(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    now_s: int | None = None,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> bool:
    """True if ``headers`` carry a valid, fresh signature of ``body`` by any of ``secrets``.

    ``headers`` may be any mapping; names are matched case-insensitively. This is the receiver's side,
    used by the demo echo endpoint; tests verify with the independent ``standardwebhooks`` library.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not msg_id or not timestamp or not signatures or not (timestamp.isascii() and timestamp.isdigit()):
        return False
    timestamp_s = int(timestamp)
    now = SystemClock().now_ms() // 1000 if now_s is None else now_s
    if abs(now - timestamp_s) > tolerance_s:
        return False
    offered = [part.encode() for part in signatures.split(" ") if part.startswith("v1,")]
    for secret in secrets:
        try:
            expected = sign(secret, msg_id, timestamp_s, body).encode()
        except ValueError:
            continue
        if any(hmac.compare_digest(expected, candidate) for candidate in offered):
            return True
    return False
