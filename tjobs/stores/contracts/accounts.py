"""Operator accounts: named users with roles per app, their personal API tokens, and console sessions.

Records only: hashing passwords and tokens, and deciding what a role may do, belong to
:mod:`tjobs.service.accounts`; the store keeps what it is given (a password hash with its parameters,
the SHA-256 of a token or a session id, never the secret itself).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from tjobs.stores.contracts.lifecycle import StoreLifecycle

Role = Literal["viewer", "operator", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "admin")  # each may do what the ones before it may
SessionKind = Literal["user", "app", "admin"]


@dataclass(frozen=True, slots=True)
class User:
    """A named operator. ``password_hash`` is ``scrypt$<n>$<r>$<p>$<salt>$<hash>`` (empty: no password
    sign-in); ``roles`` maps an app id to the user's role on it; a ``global_admin`` may do anything."""

    name: str
    password_hash: str
    global_admin: bool = False
    roles: Mapping[str, Role] = field(default_factory=dict)
    disabled_at_ms: int | None = None
    created_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A personal API token: it acts with its user's roles. ``id`` is public (lists, revocation); the
    token itself is shown once and only its SHA-256 (``token_hash``) is kept."""

    id: str
    user_name: str
    name: str
    token_hash: str
    created_at_ms: int
    expires_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """A signed-in console session, kept by the SHA-256 of the random id its cookie holds. ``subject``
    is the user's name (``kind="user"``), the app id (``"app"``) or empty (``"admin"``, the admin key);
    ``key_tag`` ties a key session to the key it signed in with (rotating the key ends it)."""

    id_hash: str
    kind: SessionKind
    subject: str
    key_tag: str
    created_at_ms: int
    expires_at_ms: int


class Accounts(StoreLifecycle):
    """Users, tokens and console sessions live beside the apps, in the first logical database."""

    # ---- users -----------------------------------------------------------------------------

    @abstractmethod
    async def put_user(self, user: User, *, create: bool) -> None:
        """``create``: insert ``user`` or raise :class:`tjobs.errors.Conflict` if the name is taken.
        Otherwise replace the stored user of that name whole, or raise :class:`tjobs.errors.NotFound`."""

    @abstractmethod
    async def get_user(self, name: str) -> User | None: ...

    @abstractmethod
    async def list_users(self) -> list[User]:
        """Every user, by name."""

    # ---- personal API tokens ----------------------------------------------------------------

    @abstractmethod
    async def put_token(self, token: ApiToken) -> None:
        """Insert ``token`` (its hash and its id are new: random)."""

    @abstractmethod
    async def find_token(self, token_hash: str) -> ApiToken | None: ...

    @abstractmethod
    async def list_tokens(self, user_name: str) -> list[ApiToken]:
        """The user's tokens, by id."""

    @abstractmethod
    async def delete_token(self, user_name: str, token_id: str) -> bool:
        """Delete the user's token ``token_id``; ``False`` if the user has no such token."""

    # ---- console sessions ---------------------------------------------------------------------

    @abstractmethod
    async def put_console_session(self, session: ConsoleSession) -> None:
        """Insert ``session`` (its id hash is new: random)."""

    @abstractmethod
    async def find_console_session(self, id_hash: str) -> ConsoleSession | None:
        """The stored session, expired or not (the caller compares ``expires_at_ms`` with its clock)."""

    @abstractmethod
    async def list_console_sessions(self, kind: SessionKind | None, subject: str | None) -> list[ConsoleSession]:
        """The sessions of that kind and subject (``None``: any), by creation then id hash."""

    @abstractmethod
    async def delete_console_sessions(
        self, *, id_hash: str | None = None, kind: SessionKind | None = None, subject: str | None = None
    ) -> int:
        """Delete one session (``id_hash``) or every session of ``kind`` and ``subject``; how many went.
        At least one criterion is required (``ValueError`` otherwise)."""

    @abstractmethod
    async def purge_console_sessions(self, expired_before_ms: int) -> int:
        """Delete the sessions that ended before ``expired_before_ms``; how many went."""
