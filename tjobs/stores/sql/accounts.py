"""The SQL store's accounts (:class:`tjobs.stores.contracts.Accounts`): ``users``, ``api_tokens`` and
``console_sessions`` in the first logical database (:mod:`tjobs.stores.schema_accounts`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, delete, insert, select, true, update
from sqlalchemy import exc as sa_exc

from tjobs.errors import Conflict, NotFound
from tjobs.stores.contracts.accounts import Accounts, ApiToken, ConsoleSession, SessionKind, User
from tjobs.stores.schema_accounts import (
    session_from_row,
    session_to_row,
    token_from_row,
    token_to_row,
    user_from_row,
    user_to_row,
)
from tjobs.stores.sql.connections import SqlBase


class SqlAccounts(SqlBase, Accounts):
    """Users, personal API tokens and console sessions."""

    async def _execute(self, statement: Any, *, write: bool) -> Any:
        url = self.layout.apps_database.engine_url
        opener = self._write(url) if write else self._connect(url)
        async with opener as conn:
            result = await conn.execute(statement, execution_options=self.layout.apps_options)
            return result if write else result.mappings().all()

    async def put_user(self, user: User, *, create: bool) -> None:
        users = self.layout.users
        row = user_to_row(user)
        if create:
            try:
                await self._execute(insert(users).values(**row), write=True)
            except sa_exc.IntegrityError as error:
                raise Conflict(f"user {user.name!r} already exists") from error
            return
        values = {k: v for k, v in row.items() if k != "name"}
        result = await self._execute(update(users).where(users.c.name == user.name).values(**values), write=True)
        if result.rowcount == 0 and await self.get_user(user.name) is None:
            raise NotFound("user", user.name)

    async def get_user(self, name: str) -> User | None:
        users = self.layout.users
        rows = await self._execute(select(users).where(users.c.name == name), write=False)
        return user_from_row(rows[0]) if rows else None

    async def list_users(self) -> list[User]:
        users = self.layout.users
        return [user_from_row(row) for row in await self._execute(select(users).order_by(users.c.name), write=False)]

    async def put_token(self, token: ApiToken) -> None:
        await self._execute(insert(self.layout.api_tokens).values(**token_to_row(token)), write=True)

    async def find_token(self, token_hash: str) -> ApiToken | None:
        tokens = self.layout.api_tokens
        rows = await self._execute(select(tokens).where(tokens.c.token_hash == token_hash), write=False)
        return token_from_row(rows[0]) if rows else None

    async def list_tokens(self, user_name: str) -> list[ApiToken]:
        tokens = self.layout.api_tokens
        statement = select(tokens).where(tokens.c.user_name == user_name).order_by(tokens.c.id)
        return [token_from_row(row) for row in await self._execute(statement, write=False)]

    async def delete_token(self, user_name: str, token_id: str) -> bool:
        tokens = self.layout.api_tokens
        statement = delete(tokens).where(tokens.c.user_name == user_name, tokens.c.id == token_id)
        return bool((await self._execute(statement, write=True)).rowcount)

    async def put_console_session(self, session: ConsoleSession) -> None:
        await self._execute(insert(self.layout.console_sessions).values(**session_to_row(session)), write=True)

    async def find_console_session(self, id_hash: str) -> ConsoleSession | None:
        sessions = self.layout.console_sessions
        rows = await self._execute(select(sessions).where(sessions.c.id_hash == id_hash), write=False)
        return session_from_row(rows[0]) if rows else None

    def _sessions_where(
        self, id_hash: str | None, kind: SessionKind | None, subject: str | None
    ) -> ColumnElement[bool]:
        c = self.layout.console_sessions.c
        criteria = [
            column == value
            for column, value in ((c.id_hash, id_hash), (c.kind, kind), (c.subject, subject))
            if value is not None
        ]
        return and_(true(), *criteria)

    async def list_console_sessions(self, kind: SessionKind | None, subject: str | None) -> list[ConsoleSession]:
        sessions = self.layout.console_sessions
        statement = (
            select(sessions)
            .where(self._sessions_where(None, kind, subject))
            .order_by(sessions.c.created_at, sessions.c.id_hash)
        )
        return [session_from_row(row) for row in await self._execute(statement, write=False)]

    async def delete_console_sessions(
        self, *, id_hash: str | None = None, kind: SessionKind | None = None, subject: str | None = None
    ) -> int:
        if id_hash is None and kind is None and subject is None:
            raise ValueError("delete_console_sessions needs an id hash, a kind or a subject")
        statement = delete(self.layout.console_sessions).where(self._sessions_where(id_hash, kind, subject))
        return int((await self._execute(statement, write=True)).rowcount)

    async def purge_console_sessions(self, expired_before_ms: int) -> int:
        sessions = self.layout.console_sessions
        statement = delete(sessions).where(sessions.c.expires_at < expired_before_ms)
        return int((await self._execute(statement, write=True)).rowcount)
