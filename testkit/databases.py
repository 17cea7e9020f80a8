"""Removing the logical databases a test or benchmark run created under its own prefix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tjobs.settings import StorageSettings
from tjobs.stores.sql_move import DIRECTORY_NOT_EMPTY


def drop_databases(settings: StorageSettings) -> None:
    """Remove every logical database named with ``settings.database_prefix`` (MariaDB databases or
    SQLite files) — for benchmark and test runs that created their own prefix."""
    from sqlalchemy.engine import make_url

    prefix = settings.database_prefix
    for url in dict.fromkeys(settings.urls):
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            directory = Path(parsed.database or ".")
            for path in directory.glob(f"{prefix}_*.db*"):
                path.unlink(missing_ok=True)
            continue
        if parsed.get_backend_name() != "mysql":
            continue
        connection = connect_mysql(url)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SHOW DATABASES LIKE %s", (f"{prefix}\\_%",))
                for (name,) in cursor.fetchall():
                    _drop_database(cursor, name)
        finally:
            connection.close()


def connect_mysql(url: str, **options: Any) -> Any:
    """A pymysql connection (not pooled) to the server of a ``mysql+...://`` URL: its host, port, user and
    password, with ``options`` passed on (``autocommit``, ``client_flag``, ``connect_timeout``...)."""
    import pymysql
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        **options,
    )


def _drop_database(cursor: Any, name: str) -> None:
    """``DROP DATABASE``; where MariaDB 10.11 left a trigger file's backup behind (``<table>.TRG-``, seen
    once in a clean-clone run after a shard move's ``CREATE TRIGGER``s and ``DROP TRIGGER``s: no trigger
    listed, the file still there, and ``DROP DATABASE`` failing with errno 39), and the server's data
    directory is on this machine, remove those stale backups and drop again. Anything else is raised."""
    import pymysql

    try:
        cursor.execute(f"DROP DATABASE `{name}`")
        return
    except pymysql.err.OperationalError as error:
        if DIRECTORY_NOT_EMPTY not in str(error):
            raise
        cursor.execute("SELECT @@datadir")
        (datadir,) = cursor.fetchone()
        directory = Path(datadir) / name
        leftovers = sorted(path.name for path in directory.glob("*")) if directory.is_dir() else []
        stale = [directory / leftover for leftover in leftovers if leftover.endswith(".TRG-")]
        if not stale or len(stale) != len(leftovers):
            raise AssertionError(f"DROP DATABASE {name}: {error}; left in {directory}: {leftovers}") from error
        for path in stale:
            path.unlink()
        cursor.execute(f"DROP DATABASE `{name}`")
