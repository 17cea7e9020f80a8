"""The account service without a server: scrypt hashes carry their own salt and parameters, a token ends at
its expiry or with its user, a session ends at its expiry and is swept at the next sign-in."""

from __future__ import annotations

import pytest

from tjobs.clock import ManualClock
from tjobs.errors import InvalidInput
from tjobs.model import App
from tjobs.service.accounts import AccountService, hash_password, may, verify_password
from tjobs.stores.memory import MemoryTaskStore

PASSWORD = "correct horse battery"


def test_a_password_hash_carries_its_salt_and_parameters_and_verifies_only_its_password() -> None:
    first, second = hash_password(PASSWORD, n=1 << 10), hash_password(PASSWORD, n=1 << 10)
    assert first != second  # a salt per hash
    assert first.startswith("scrypt$1024$8$1$")
    assert verify_password(PASSWORD, first) and verify_password(PASSWORD, second)
    assert not verify_password(PASSWORD + "!", first)
    assert not verify_password(PASSWORD, "") and not verify_password(PASSWORD, "scrypt$x$y")


async def test_roles_name_apps_that_exist() -> None:
    accounts = AccountService(MemoryTaskStore(), ManualClock(1_000_000))
    with pytest.raises(InvalidInput) as refused:
        await accounts.create_user("ada", PASSWORD, roles={"app-z": "viewer"})
    assert refused.value.field == "roles.app-z"


async def test_a_token_ends_at_its_expiry_or_when_its_user_is_disabled() -> None:
    clock = ManualClock(1_000_000)
    store = MemoryTaskStore()
    await store.put_app(App("app-a", "a", "hash-a", ["secret"]))
    accounts = AccountService(store, clock)
    await accounts.create_user("ada", PASSWORD, roles={"app-a": "operator"})
    lasting, _ = await accounts.create_token("ada", "ci", None)
    brief, _ = await accounts.create_token("ada", "brief", 60)
    assert (await accounts.authenticate_token(brief)) is not None
    clock.advance(60_000)
    assert await accounts.authenticate_token(brief) is None
    user = await accounts.authenticate_token(lasting)
    assert user is not None and may(user, "app-a", "operator") and not may(user, "app-a", "admin")
    await accounts.update_user("ada", disabled=True)
    assert await accounts.authenticate_token(lasting) is None
    assert await accounts.authenticate_password("ada", PASSWORD) is None


async def test_a_session_ends_at_its_expiry_and_is_swept_at_the_next_sign_in() -> None:
    clock = ManualClock(1_000_000)
    store = MemoryTaskStore()
    accounts = AccountService(store, clock)
    old_id, _ = await accounts.open_session("user", "ada", "app-a", 60)
    assert await accounts.session(old_id) is not None
    clock.advance(61_000)
    assert await accounts.session(old_id) is None
    assert len(await store.list_console_sessions(None, None)) == 1  # ended, not yet swept
    await accounts.open_session("admin", "", "tag", 60)
    assert [s.kind for s in await store.list_console_sessions(None, None)] == ["admin"]
