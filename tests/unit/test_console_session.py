"""Console sessions: what a cookie may say, and when it stops saying it (tjobs.console.session)."""

from __future__ import annotations

from tjobs.console.session import SessionCodec, session_secret
from tjobs.service.apps import hash_api_key
from tjobs.settings import load_settings

NOW_MS = 1_800_000_000_000
KEY_HASH = hash_api_key("tjk_the-app-key")


def codec(secret: bytes = b"s" * 32, ttl_s: int = 3600) -> SessionCodec:
    return SessionCodec(secret, ttl_s)


def test_a_cookie_reads_back_as_the_session_it_was_issued_for() -> None:
    cookie, issued = codec().issue("app", "app_1", KEY_HASH, NOW_MS)

    claim = codec().read(cookie, NOW_MS + 1000)

    assert claim == issued
    assert claim is not None and claim.kind == "app" and claim.app_id == "app_1"
    assert codec().tag_matches(claim, KEY_HASH)


def test_the_cookie_holds_neither_the_key_nor_its_stored_hash() -> None:
    cookie, _ = codec().issue("app", "app_1", KEY_HASH, NOW_MS)

    assert "tjk_the-app-key" not in cookie and KEY_HASH not in cookie


def test_a_tampered_expired_or_foreign_cookie_is_no_session() -> None:
    cookie, _ = codec().issue("app", "app_1", KEY_HASH, NOW_MS)
    payload, _, signature = cookie.partition(".")
    forged = payload.replace(payload[3], "A" if payload[3] != "A" else "B", 1) + "." + signature

    assert codec().read(forged, NOW_MS) is None
    assert codec().read(cookie, NOW_MS + 3600 * 1000) is None  # expired
    assert codec(secret=b"t" * 32).read(cookie, NOW_MS) is None  # signed by another secret
    assert codec().read("garbage", NOW_MS) is None
    assert codec().read(None, NOW_MS) is None


def test_a_rotated_key_no_longer_matches_the_session() -> None:
    cookie, _ = codec().issue("app", "app_1", KEY_HASH, NOW_MS)
    claim = codec().read(cookie, NOW_MS)
    assert claim is not None

    assert not codec().tag_matches(claim, hash_api_key("tjk_the-new-key"))


def test_the_csrf_token_is_the_sessions_own() -> None:
    _, mine = codec().issue("admin", None, KEY_HASH, NOW_MS)
    _, other = codec().issue("admin", None, KEY_HASH, NOW_MS)

    assert codec().csrf_ok(mine, codec().csrf_token(mine.nonce))
    assert not codec().csrf_ok(mine, codec().csrf_token(other.nonce))
    assert not codec().csrf_ok(mine, "")
    assert not codec().csrf_ok(mine, None)


def test_nodes_sharing_the_admin_key_share_the_session_secret() -> None:
    one = load_settings(None, api={"admin_key": "k" * 32})
    two = load_settings(None, api={"admin_key": "k" * 32})
    given = load_settings(None, api={"admin_key": "k" * 32}, console={"session_secret": "chosen"})

    assert session_secret(one) == session_secret(two) != ("k" * 32).encode()
    assert session_secret(given) == b"chosen"
    assert session_secret(load_settings(None)) != session_secret(load_settings(None))  # random per process
