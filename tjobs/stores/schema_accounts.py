"""The operator accounts' tables (:class:`tjobs.stores.contracts.Accounts`), in the first logical database
only, beside ``apps``: ``users`` (a user's roles per app are a JSON document in its row, written whole),
``api_tokens`` (personal API tokens, by the SHA-256 of the token) and ``console_sessions`` (by the
SHA-256 of the session id the cookie holds), and the row <-> record mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.schema import SchemaItem

from tjobs.stores.contracts.accounts import ApiToken, ConsoleSession, User
from tjobs.stores.schema import _table

USERS_TABLE = "users"
API_TOKENS_TABLE = "api_tokens"
CONSOLE_SESSIONS_TABLE = "console_sessions"
API_TOKENS_INDEXES = [("api_tokens_user", ["user_name", "id"])]
CONSOLE_SESSIONS_INDEXES = [("console_sessions_subject", ["kind", "subject"])]


def users_schema_items() -> list[SchemaItem]:
    return [
        Column("name", String(64), nullable=False),
        Column("password_hash", String(255), nullable=False),
        Column("global_admin", Integer, nullable=False),
        Column("roles", Text, nullable=False),
        Column("disabled_at", BigInteger, nullable=True),
        Column("created_at", BigInteger, nullable=False),
        PrimaryKeyConstraint("name"),
    ]


def api_tokens_schema_items() -> list[SchemaItem]:
    return [
        Column("token_hash", String(64), nullable=False),
        Column("id", String(32), nullable=False),
        Column("user_name", String(64), nullable=False),
        Column("name", String(64), nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Column("expires_at", BigInteger, nullable=True),
        PrimaryKeyConstraint("token_hash"),
        UniqueConstraint("id", name="api_tokens_id"),
    ]


def console_sessions_schema_items() -> list[SchemaItem]:
    return [
        Column("id_hash", String(64), nullable=False),
        Column("kind", String(8), nullable=False),
        Column("subject", String(64), nullable=False),
        Column("key_tag", String(64), nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Column("expires_at", BigInteger, nullable=False),
        PrimaryKeyConstraint("id_hash"),
    ]


def users_table(metadata: MetaData) -> Table:
    return _table(metadata, USERS_TABLE, None, users_schema_items(), [])


def api_tokens_table(metadata: MetaData) -> Table:
    return _table(metadata, API_TOKENS_TABLE, None, api_tokens_schema_items(), API_TOKENS_INDEXES)


def console_sessions_table(metadata: MetaData) -> Table:
    return _table(metadata, CONSOLE_SESSIONS_TABLE, None, console_sessions_schema_items(), CONSOLE_SESSIONS_INDEXES)


def user_to_row(user: User) -> dict[str, Any]:
    return {
        "name": user.name,
        "password_hash": user.password_hash,
        "global_admin": int(user.global_admin),
        "roles": orjson.dumps(dict(sorted(user.roles.items()))).decode(),
        "disabled_at": user.disabled_at_ms,
        "created_at": user.created_at_ms,
    }


def user_from_row(row: Mapping[Any, Any]) -> User:
    return User(
        name=row["name"],
        password_hash=row["password_hash"],
        global_admin=bool(row["global_admin"]),
        roles=orjson.loads(row["roles"]),
        disabled_at_ms=row["disabled_at"],
        created_at_ms=int(row["created_at"]),
    )


_TOKEN_COLUMNS = ("token_hash", "id", "user_name", "name", "created_at", "expires_at")
_SESSION_COLUMNS = ("id_hash", "kind", "subject", "key_tag", "created_at", "expires_at")
_INSTANTS = {"created_at": "created_at_ms", "expires_at": "expires_at_ms"}  # column -> field, epoch ms


def _to_row(record: ApiToken | ConsoleSession, columns: tuple[str, ...]) -> dict[str, Any]:
    return {column: getattr(record, _INSTANTS.get(column, column)) for column in columns}


def _fields(row: Mapping[Any, Any], columns: tuple[str, ...]) -> dict[str, Any]:
    """A token's or session's fields from its row: the instants as ints (``expires_at`` may be null)."""
    fields = {_INSTANTS.get(column, column): row[column] for column in columns}
    return {k: int(v) if k in _INSTANTS.values() and v is not None else v for k, v in fields.items()}


def token_to_row(token: ApiToken) -> dict[str, Any]:
    return _to_row(token, _TOKEN_COLUMNS)


def token_from_row(row: Mapping[Any, Any]) -> ApiToken:
    return ApiToken(**_fields(row, _TOKEN_COLUMNS))


def session_to_row(session: ConsoleSession) -> dict[str, Any]:
    return _to_row(session, _SESSION_COLUMNS)


def session_from_row(row: Mapping[Any, Any]) -> ConsoleSession:
    return ConsoleSession(**_fields(row, _SESSION_COLUMNS))
