"""The memory twin's accounts (:class:`tjobs.stores.contracts.Accounts`): users, tokens and console
sessions in dicts, one set per :class:`tjobs.stores.memory.MemoryTaskStore`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from tjobs.errors import Conflict, NotFound
from tjobs.stores.contracts.accounts import Accounts, ApiToken, ConsoleSession, SessionKind, User


@dataclass
class _Rows:
    users: dict[str, User] = field(default_factory=dict)
    tokens: dict[str, ApiToken] = field(default_factory=dict)  # by token hash
    sessions: dict[str, ConsoleSession] = field(default_factory=dict)  # by id hash


def _matches(session: ConsoleSession, kind: SessionKind | None, subject: str | None) -> bool:
    return (kind is None or session.kind == kind) and (subject is None or session.subject == subject)


class MemoryAccounts(Accounts):
    @cached_property
    def _accounts(self) -> _Rows:
        return _Rows()

    async def put_user(self, user: User, *, create: bool) -> None:
        users = self._accounts.users
        if create and user.name in users:
            raise Conflict(f"user {user.name!r} already exists")
        if not create and user.name not in users:
            raise NotFound("user", user.name)
        users[user.name] = replace(user, roles=dict(user.roles))

    async def get_user(self, name: str) -> User | None:
        return self._accounts.users.get(name)

    async def list_users(self) -> list[User]:
        users = self._accounts.users
        return [users[name] for name in sorted(users)]

    async def put_token(self, token: ApiToken) -> None:
        self._accounts.tokens[token.token_hash] = token

    async def find_token(self, token_hash: str) -> ApiToken | None:
        return self._accounts.tokens.get(token_hash)

    async def list_tokens(self, user_name: str) -> list[ApiToken]:
        return sorted((t for t in self._accounts.tokens.values() if t.user_name == user_name), key=lambda t: t.id)

    async def delete_token(self, user_name: str, token_id: str) -> bool:
        tokens = self._accounts.tokens
        for token_hash, token in list(tokens.items()):
            if token.user_name == user_name and token.id == token_id:
                del tokens[token_hash]
                return True
        return False

    async def put_console_session(self, session: ConsoleSession) -> None:
        self._accounts.sessions[session.id_hash] = session

    async def find_console_session(self, id_hash: str) -> ConsoleSession | None:
        return self._accounts.sessions.get(id_hash)

    async def list_console_sessions(self, kind: SessionKind | None, subject: str | None) -> list[ConsoleSession]:
        found = [s for s in self._accounts.sessions.values() if _matches(s, kind, subject)]
        return sorted(found, key=lambda s: (s.created_at_ms, s.id_hash))

    async def delete_console_sessions(
        self, *, id_hash: str | None = None, kind: SessionKind | None = None, subject: str | None = None
    ) -> int:
        if id_hash is None and kind is None and subject is None:
            raise ValueError("delete_console_sessions needs an id hash, a kind or a subject")
        sessions = self._accounts.sessions
        gone = [
            key for key, s in sessions.items() if (id_hash is None or key == id_hash) and _matches(s, kind, subject)
        ]
        for key in gone:
            del sessions[key]
        return len(gone)

    async def purge_console_sessions(self, expired_before_ms: int) -> int:
        sessions = self._accounts.sessions
        gone = [key for key, s in sessions.items() if s.expires_at_ms < expired_before_ms]
        for key in gone:
            del sessions[key]
        return len(gone)
