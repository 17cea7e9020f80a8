"""Console session secrets and CSRF tokens (tjobs.console.session)."""

from __future__ import annotations

from tjobs.console.session import SessionCodec, session_secret
from tjobs.settings import load_settings


def codec(secret: bytes = b"s" * 32, ttl_s: int = 3600) -> SessionCodec:
    return SessionCodec(secret, ttl_s)


def test_a_csrf_token_is_bound_to_its_value_and_its_secret() -> None:
    token = codec().csrf_token("signin:abc")

    assert token == codec(ttl_s=60).csrf_token("signin:abc")
    assert token != codec().csrf_token("signin:abd")
    assert token != codec(secret=b"t" * 32).csrf_token("signin:abc")


def test_nodes_sharing_the_admin_key_share_the_session_secret() -> None:
    one = load_settings(None, api={"admin_key": "k" * 32})
    two = load_settings(None, api={"admin_key": "k" * 32})
    given = load_settings(None, api={"admin_key": "k" * 32}, console={"session_secret": "chosen"})

    assert session_secret(one) == session_secret(two) != ("k" * 32).encode()
    assert session_secret(given) == b"chosen"
    assert session_secret(load_settings(None)) != session_secret(load_settings(None))  # random per process
