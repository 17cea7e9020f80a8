"""Operator accounts: users with a password and roles per app, their personal API tokens, and the
console's server-side sessions (records in :class:`tjobs.stores.contracts.Accounts`).

- **Passwords** are hashed with scrypt (:func:`hashlib.scrypt`, memory-hard; no dependency), a random
  16-byte salt per user, the parameters stored with the hash (``scrypt$n$r$p$salt$hash``), so they can
  be raised later without breaking stored hashes. A sign-in with an unknown name still pays one scrypt,
  so the answer's timing does not tell which names exist.
- **Roles** are per app, ordered ``viewer < operator < admin`` (:data:`ROLES`): a viewer reads, an operator
  also changes tasks (create, edit, pause, resume, trigger, redrive, delete), an app admin also changes
  the app (its settings, its key). A **global admin** may do everything the admin key may.
- **Personal API tokens** (``tjt_`` + 32 random bytes) are shown once and kept as SHA-256 digests; they
  act with their user's roles at the time of each request, and end at their expiry, when revoked, or
  when their user is disabled.
- **Console sessions** are rows keyed by the SHA-256 of a random id (the cookie holds the id): signing
  out deletes the row, so every node refuses the cookie at once; disabling a user or resetting its
  password deletes its sessions; an admin lists and revokes them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from typing import Any

from tjobs.clock import Clock
from tjobs.errors import InvalidInput, NotFound
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.accounts import ROLES, ApiToken, ConsoleSession, Role, SessionKind, User

__all__ = [
    "ROLES",
    "AccountService",
    "ApiToken",
    "ConsoleSession",
    "Role",
    "SessionKind",
    "User",
    "csrf_token_of",
    "hash_password",
    "may",
    "role_rank",
    "verify_password",
]

USER_NAME_PATTERN = r"^[a-z0-9][a-z0-9._@-]{0,63}$"
TOKEN_ID_PATTERN = r"^[0-9a-f]{16}$"  # secrets.token_hex(8)
SESSION_ID_PATTERN = r"^[0-9a-f]{64}$"  # what the API shows of a session: its id's SHA-256
TOKEN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$"
TOKEN_PREFIX = "tjt_"
MIN_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 1024
MAX_TOKEN_TTL_S = 366 * 86_400
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1  # 16 MiB per hash
_SCRYPT_MAXMEM = 64 * 1024 * 1024
_DUMMY_SALT = b"tjobs-no-such-user"


def role_rank(role: str | None) -> int:
    """0 for no role, then 1 (viewer), 2 (operator), 3 (admin)."""
    return ROLES.index(role) + 1 if role in ROLES else 0


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM, dklen=32)
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored`` (``False`` for an empty or unreadable hash)."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = _unb64(digest)
        given = hashlib.scrypt(
            password.encode(), salt=_unb64(salt), n=int(n), r=int(r), p=int(p), maxmem=_SCRYPT_MAXMEM, dklen=32
        )
    except ValueError:
        return False
    return hmac.compare_digest(given, expected)


def secret_hash(secret: str) -> str:
    """How a token or a session id is kept: its SHA-256 (they are 32 random bytes: no salt needed)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def csrf_token_of(session_id: str) -> str:
    """A console session's CSRF token: derived from its id (which only its cookie holds)."""
    return _b64(hashlib.sha256(b"tjobs console csrf:" + session_id.encode()).digest())


def check_user_name(name: Any, field: str = "name") -> str:
    if not isinstance(name, str) or not re.fullmatch(USER_NAME_PATTERN, name):
        raise InvalidInput(field, "must be 1-64 characters: lower-case letters, digits, '.', '_', '@', '-'")
    if name == "me":
        raise InvalidInput(field, "'me' is reserved (/v1/users/me is the caller)")
    return name


def check_password(password: Any, field: str = "password") -> str:
    if not isinstance(password, str) or not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise InvalidInput(field, f"must be a string of {MIN_PASSWORD_CHARS}-{MAX_PASSWORD_CHARS} characters")
    return password


def check_roles(roles: Any, field: str = "roles") -> dict[str, Role]:
    if not isinstance(roles, Mapping) or len(roles) > 1000:
        raise InvalidInput(field, "must be an object of app id -> role (at most 1,000)")
    checked: dict[str, Role] = {}
    for app_id, role in roles.items():
        if not isinstance(app_id, str) or not 0 < len(app_id) <= 64:
            raise InvalidInput(field, "an app id must be a string of 1-64 characters")
        if role not in ROLES:
            raise InvalidInput(f"{field}.{app_id}", f"must be one of {', '.join(ROLES)}")
        checked[app_id] = role
    return checked


class AccountService:
    """Users, tokens and sessions over one store; ``clock`` gives now (epoch ms)."""

    def __init__(self, store: TaskStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    async def _known_roles(self, roles: Any) -> dict[str, Role]:
        """``roles`` checked (:func:`check_roles`), each naming an app that exists (else 422 naming it)."""
        checked = check_roles(roles)
        for app_id in checked:
            if await self.store.get_app(app_id) is None:
                raise InvalidInput(f"roles.{app_id}", f"there is no app {app_id!r}")
        return checked

    # ---- users -----------------------------------------------------------------------------------

    async def create_user(
        self, name: str, password: str | None, *, global_admin: bool = False, roles: Mapping[str, Role] = {}
    ) -> User:
        """A new user (``password=None``: no password sign-in until one is set); 409 if the name is taken."""
        user = User(
            check_user_name(name),
            "" if password is None else hash_password(check_password(password)),
            global_admin,
            await self._known_roles(roles),
            None,
            self.clock.now_ms(),
        )
        await self.store.put_user(user, create=True)
        return user

    async def user(self, name: str) -> User:
        user = await self.find_user(name)
        if user is None:
            raise NotFound("user", name)
        return user

    async def find_user(self, name: str) -> User | None:
        return await self.store.get_user(name) if re.fullmatch(USER_NAME_PATTERN, name) else None

    async def list_users(self) -> list[User]:
        return await self.store.list_users()

    async def update_user(
        self,
        name: str,
        *,
        roles: Mapping[str, Role] | None = None,
        global_admin: bool | None = None,
        disabled: bool | None = None,
        password: str | None = None,
    ) -> User:
        """Change what is given; disabling a user or setting its password ends its console sessions."""
        user = await self.user(name)
        changes: dict[str, Any] = {}
        if roles is not None:
            changes["roles"] = await self._known_roles(roles)
        if global_admin is not None:
            changes["global_admin"] = global_admin
        if disabled is not None:
            changes["disabled_at_ms"] = (user.disabled_at_ms or self.clock.now_ms()) if disabled else None
        if password is not None:
            changes["password_hash"] = hash_password(check_password(password))
        updated = User(**{**{f: getattr(user, f) for f in User.__dataclass_fields__}, **changes})
        await self.store.put_user(updated, create=False)
        if disabled or password is not None:
            await self.store.delete_console_sessions(kind="user", subject=name)
        return updated

    async def authenticate_password(self, name: str, password: str) -> User | None:
        """The enabled user ``name`` if ``password`` is its password; ``None`` otherwise (a name that does not
        exist costs the same scrypt as one that does)."""
        user = await self.store.get_user(name) if re.fullmatch(USER_NAME_PATTERN, name) else None
        if user is None or not user.password_hash:
            hashlib.scrypt(
                password.encode(), salt=_DUMMY_SALT, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=_SCRYPT_MAXMEM
            )
            return None
        if not verify_password(password, user.password_hash) or user.disabled_at_ms is not None:
            return None
        return user

    # ---- personal API tokens ------------------------------------------------------------------------

    async def create_token(self, user_name: str, name: Any, ttl_s: Any) -> tuple[str, ApiToken]:
        """A new token of ``user_name`` (the token itself, returned once, and its record)."""
        if not isinstance(name, str) or not re.fullmatch(TOKEN_NAME_PATTERN, name):
            raise InvalidInput("name", "must be 1-64 characters: letters, digits, ' ', '.', '_', '-'")
        if ttl_s is not None and (
            not isinstance(ttl_s, int) or isinstance(ttl_s, bool) or not 60 <= ttl_s <= MAX_TOKEN_TTL_S
        ):
            raise InvalidInput("expires_in_s", f"must be whole seconds from 60 to {MAX_TOKEN_TTL_S}, or null")
        now_ms = self.clock.now_ms()
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = ApiToken(
            secrets.token_hex(8),
            user_name,
            name,
            secret_hash(secret),
            now_ms,
            None if ttl_s is None else now_ms + ttl_s * 1000,
        )
        await self.store.put_token(token)
        return secret, token

    async def list_tokens(self, user_name: str) -> list[ApiToken]:
        return await self.store.list_tokens(user_name)

    async def revoke_token(self, user_name: str, token_id: str) -> None:
        if not re.fullmatch(TOKEN_ID_PATTERN, token_id) or not await self.store.delete_token(user_name, token_id):
            raise NotFound("token", token_id)

    async def authenticate_token(self, secret: str) -> User | None:
        """The enabled user of an unexpired token; ``None`` otherwise."""
        token = await self.store.find_token(secret_hash(secret))
        if token is None or (token.expires_at_ms is not None and token.expires_at_ms <= self.clock.now_ms()):
            return None
        user = await self.store.get_user(token.user_name)
        return None if user is None or user.disabled_at_ms is not None else user

    # ---- console sessions --------------------------------------------------------------------------

    async def open_session(
        self, kind: SessionKind, subject: str, key_tag: str, ttl_s: int
    ) -> tuple[str, ConsoleSession]:
        """A new session: the id for its cookie, and its row. The sessions that ended are deleted first (a
        sign-in is rare enough to carry that sweep)."""
        session_id = secrets.token_urlsafe(32)
        now_ms = self.clock.now_ms()
        await self.store.purge_console_sessions(now_ms)
        session = ConsoleSession(secret_hash(session_id), kind, subject, key_tag, now_ms, now_ms + ttl_s * 1000)
        await self.store.put_console_session(session)
        return session_id, session

    async def session(self, session_id: str) -> ConsoleSession | None:
        """The live session of a cookie's id (``None``: unknown, signed out, revoked or expired)."""
        if not session_id or len(session_id) > 128:
            return None
        session = await self.store.find_console_session(secret_hash(session_id))
        return None if session is None or session.expires_at_ms <= self.clock.now_ms() else session

    async def close_session(self, session_id: str) -> None:
        await self.store.delete_console_sessions(id_hash=secret_hash(session_id))

    async def list_sessions(self, user_name: str | None) -> list[ConsoleSession]:
        """The live sessions of ``user_name`` (``None``: every session, of keys too)."""
        now_ms = self.clock.now_ms()
        kind: SessionKind | None = None if user_name is None else "user"
        sessions = await self.store.list_console_sessions(kind, user_name)
        return [s for s in sessions if s.expires_at_ms > now_ms]

    async def revoke_session(self, id_hash: str) -> None:
        if not re.fullmatch(SESSION_ID_PATTERN, id_hash) or not await self.store.delete_console_sessions(
            id_hash=id_hash
        ):
            raise NotFound("session", id_hash)


def may(user: User, app_id: str | None, needed: Role) -> bool:
    """Whether ``user`` may act with role ``needed`` on ``app_id`` (``None``: across apps, global admin only)."""
    if user.global_admin:
        return True
    return app_id is not None and role_rank(user.roles.get(app_id)) >= role_rank(needed)
