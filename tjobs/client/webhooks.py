"""Verify an incoming tjobs callback in any framework: give the raw body, the headers and the secret(s).

tjobs signs per the Standard Webhooks spec: ``webhook-signature`` holds ``v1,<base64 HMAC-SHA256 of
"{webhook-id}.{webhook-timestamp}.{body}">``, one per signing secret while the app rotates, so either the
old or the new secret verifies. ``webhook-id`` is the flow id: identical on every retry, so use it to
deduplicate.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_TOLERANCE_S = 300


@dataclass(frozen=True, slots=True)
class VerifiedCallback:
    """What a verified callback says about itself."""

    flow_id: str  # the idempotency key
    task_id: str | None
    scheduled_at_ms: int | None
    attempt: int | None
    timestamp_s: int


def _key(secret: str) -> bytes:
    encoded = secret.removeprefix("whsec_")
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError("a signing secret is whsec_ followed by base64") from error


def verify(
    body: bytes | str,
    headers: Mapping[str, str],
    secrets: str | Sequence[str],
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now_s: int | None = None,
) -> VerifiedCallback:
    """Check a callback's signature and freshness; raise :class:`WebhookVerificationError` if it fails."""
    from tjobs.client.errors import WebhookVerificationError

    lowered = {k.lower(): v for k, v in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not msg_id or not timestamp or not signatures:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    if not (timestamp.isascii() and timestamp.isdigit()):
        raise WebhookVerificationError("webhook-timestamp is not a number")
    timestamp_s = int(timestamp)
    now = int(time.time()) if now_s is None else now_s
    if abs(now - timestamp_s) > tolerance_s:
        raise WebhookVerificationError(f"webhook-timestamp is more than {tolerance_s} s away from now")
    raw = body.encode() if isinstance(body, str) else body
    message = f"{msg_id}.{timestamp_s}.".encode() + raw
    offered = [part[3:].encode() for part in signatures.split() if part.startswith("v1,")]
    for secret in [secrets] if isinstance(secrets, str) else secrets:
        expected = base64.b64encode(hmac.new(_key(secret), message, hashlib.sha256).digest())
        if any(hmac.compare_digest(expected, candidate) for candidate in offered):
            scheduled = lowered.get("tjobs-scheduled-at", "")
            attempt = lowered.get("tjobs-attempt", "")
            return VerifiedCallback(
                msg_id,
                lowered.get("tjobs-task-id"),
                int(scheduled) if scheduled.isascii() and scheduled.isdigit() else None,
                int(attempt) if attempt.isascii() and attempt.isdigit() else None,
                timestamp_s,
            )
    raise WebhookVerificationError("no signature matches the given secret(s)")
