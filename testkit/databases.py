"""Removing the logical databases a test or benchmark run created under its own prefix."""

from __future__ import annotations

from tjobs.settings import StorageSettings


def drop_databases(settings: StorageSettings) -> None:
    """Remove every logical database named with ``settings.database_prefix`` (MariaDB databases or
    SQLite files) — for benchmark and test runs that created their own prefix."""
    from pathlib import Path

    import pymysql
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
        connection = pymysql.connect(
            host=parsed.host or "127.0.0.1",
            port=parsed.port or 3306,
            user=parsed.username or "root",
            password=parsed.password or "",
        )
        try:
            with connection.cursor() as cursor:
                cursor.execute("SHOW DATABASES LIKE %s", (f"{prefix}\\_%",))
                for (name,) in cursor.fetchall():
                    cursor.execute(f"DROP DATABASE `{name}`")
        finally:
            connection.close()
