"""Accounts on the store seam (:class:`tjobs.stores.contracts.Accounts`): users (created once, replaced
whole, listed by name), personal API tokens (found by hash, listed and revoked per user) and console
sessions (found by id hash, listed and deleted by one id or by kind and subject, purged once expired),
proven on every backend: memory, SQLite, MariaDB."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contract.backends import NOW_MS
from tjobs.errors import Conflict, NotFound
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.accounts import ApiToken, ConsoleSession, User

ALICE = User("alice", "scrypt$16384$8$1$c2FsdA$aGFzaA", roles={"app-a": "operator"}, created_at_ms=NOW_MS)


async def test_a_user_is_created_once_replaced_whole_and_listed_by_name(store: TaskStore) -> None:
    await store.put_user(ALICE, create=True)
    with pytest.raises(Conflict):
        await store.put_user(replace(ALICE, password_hash="other"), create=True)
    await store.put_user(User("bob", "", global_admin=True, created_at_ms=NOW_MS), create=True)
    assert await store.get_user("alice") == ALICE
    assert await store.get_user("nobody") is None

    changed = replace(ALICE, roles={"app-a": "viewer", "app-b": "admin"}, disabled_at_ms=NOW_MS + 5)
    await store.put_user(changed, create=False)
    await store.put_user(changed, create=False)  # the same values again: still found
    assert await store.get_user("alice") == changed
    assert [user.name for user in await store.list_users()] == ["alice", "bob"]
    assert (await store.list_users())[1].global_admin

    with pytest.raises(NotFound):
        await store.put_user(User("carol", ""), create=False)


async def test_tokens_are_found_by_hash_listed_per_user_and_revoked_only_by_their_user(store: TaskStore) -> None:
    first = ApiToken("tok1", "alice", "ci", "a" * 64, NOW_MS, NOW_MS + 60_000)
    second = ApiToken("tok2", "alice", "laptop", "b" * 64, NOW_MS)
    other = ApiToken("tok3", "bob", "ci", "c" * 64, NOW_MS)
    for token in (second, other, first):
        await store.put_token(token)

    assert await store.find_token("a" * 64) == first
    assert await store.find_token("d" * 64) is None
    assert await store.list_tokens("alice") == [first, second]

    assert not await store.delete_token("bob", "tok1")  # another user's token
    assert await store.delete_token("alice", "tok1")
    assert not await store.delete_token("alice", "tok1")
    assert await store.find_token("a" * 64) is None
    assert await store.list_tokens("alice") == [second]


def session(id_char: str, kind: str = "user", subject: str = "alice", at_ms: int = NOW_MS) -> ConsoleSession:
    return ConsoleSession(id_char * 64, kind, subject, "", at_ms, at_ms + 1_000)  # type: ignore[arg-type]


async def test_console_sessions_are_listed_deleted_and_purged_by_kind_subject_id_and_expiry(store: TaskStore) -> None:
    sessions = [session("a"), session("b", at_ms=NOW_MS + 1), session("c", subject="bob"), session("d", "app", "app-a")]
    for each in sessions:
        await store.put_console_session(each)

    assert await store.find_console_session("a" * 64) == sessions[0]
    assert await store.find_console_session("e" * 64) is None
    assert await store.list_console_sessions("user", "alice") == sessions[:2]
    assert len(await store.list_console_sessions(None, None)) == 4
    assert await store.list_console_sessions("app", None) == [sessions[3]]

    assert await store.delete_console_sessions(id_hash="a" * 64) == 1
    assert await store.delete_console_sessions(id_hash="a" * 64) == 0
    assert await store.delete_console_sessions(kind="user", subject="alice") == 1
    assert await store.list_console_sessions("user", None) == [sessions[2]]
    with pytest.raises(ValueError):
        await store.delete_console_sessions()

    await store.put_console_session(session("f", at_ms=NOW_MS + 10_000))
    assert await store.purge_console_sessions(NOW_MS + 1_500) == 2  # bob's and app-a's ended at NOW + 1 s
    assert [s.id_hash for s in await store.list_console_sessions(None, None)] == ["f" * 64]
