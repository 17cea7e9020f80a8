"""Signatures follow Standard Webhooks: checked with the independent ``standardwebhooks`` library."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tjobs.delivery.signing import generate_secret, sign, signature_header, verify


def _headers(msg_id: str, timestamp_s: int, signature: str) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp_s), "webhook-signature": signature}


def test_generated_secrets_are_whsec_base64_of_32_random_bytes() -> None:
    secret = generate_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    assert generate_secret() != secret


def test_a_signature_verifies_with_the_standardwebhooks_library() -> None:
    secret = generate_secret()
    body = b'{"flow_id":"42-1000","payload":{"order":123}}'
    now_s = int(time.time())
    signature = sign(secret, "42-1000", now_s, body)
    assert signature.startswith("v1,")
    assert Webhook(secret).verify(body, _headers("42-1000", now_s, signature)) == {
        "flow_id": "42-1000",
        "payload": {"order": 123},
    }


def test_the_signature_matches_the_library_byte_for_byte() -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the spec's published example secret
    expected = Webhook(secret).sign(
        "msg_p5jXN8AQM9LWM0D4loKWxJek", datetime.fromtimestamp(1614265330, UTC), '{"test": 2432232314}'
    )
    assert sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}') == expected
    assert expected == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


@settings(max_examples=50)
@given(
    body=st.binary(max_size=512).filter(lambda b: _is_utf8(b)),
    msg_id=st.from_regex(r"[0-9]{1,19}-[0-9]{1,13}", fullmatch=True),
)
def test_any_utf8_body_verifies(body: bytes, msg_id: str) -> None:
    secret = generate_secret()
    now_s = int(time.time())
    Webhook(secret).verify(body, _headers(msg_id, now_s, sign(secret, msg_id, now_s, body)), json_parse=False)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_while_rotating_every_secret_signs_and_either_one_verifies() -> None:
    old, new = generate_secret(), generate_secret()
    body = b"{}"
    now_s = int(time.time())
    header = signature_header([new, old], "7-1", now_s, body)
    parts = header.split(" ")
    assert len(parts) == 2 and all(p.startswith("v1,") for p in parts)
    for secret in (old, new):
        Webhook(secret).verify(body, _headers("7-1", now_s, header))
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(body, _headers("7-1", now_s, header))


def test_a_tampered_body_id_or_timestamp_fails() -> None:
    secret = generate_secret()
    now_s = int(time.time())
    signature = sign(secret, "7-1", now_s, b'{"a":1}')
    webhook = Webhook(secret)
    tampered = ((b'{"a":2}', "7-1", now_s), (b'{"a":1}', "7-2", now_s), (b'{"a":1}', "7-1", now_s + 1))
    for body, msg_id, ts in tampered:
        with pytest.raises(WebhookVerificationError):
            webhook.verify(body, _headers(msg_id, ts, signature))


def test_signature_header_needs_a_secret() -> None:
    with pytest.raises(ValueError):
        signature_header([], "7-1", 0, b"")


def test_a_malformed_secret_is_refused() -> None:
    with pytest.raises(ValueError):
        sign("whsec_not base64!", "7-1", 0, b"")


def test_our_verify_accepts_fresh_valid_signatures_and_rejects_the_rest() -> None:
    old, new = generate_secret(), generate_secret()
    now_s = 1_800_000_000
    body = b'{"x":1}'
    headers = _headers("9-9", now_s, signature_header([new, old], "9-9", now_s, body))
    assert verify([old], headers, body, now_s=now_s)
    assert verify([new], {k.upper(): v for k, v in headers.items()}, body, now_s=now_s)
    assert not verify([generate_secret()], headers, body, now_s=now_s)
    assert not verify([new], headers, b'{"x":2}', now_s=now_s)
    assert not verify([new], headers, body, now_s=now_s + 301)  # stale: replay window is 5 minutes
    assert not verify([new], {"webhook-id": "9-9"}, body, now_s=now_s)


def test_signing_one_message_leaves_the_next_signature_of_the_secret_alone() -> None:
    """Signatures of one secret start from the same keyed state: the order of signing changes nothing."""
    secret = generate_secret()
    first = sign(secret, "1-1", 1614265330, b'{"n": 1}')
    second = sign(secret, "2-2", 1614265331, b'{"n": 2}')
    assert sign(secret, "1-1", 1614265330, b'{"n": 1}') == first
    assert signature_header([secret], "2-2", 1614265331, b'{"n": 2}') == second
    expected = Webhook(secret).sign("2-2", datetime.fromtimestamp(1614265331, UTC), '{"n": 2}')
    assert second == expected
