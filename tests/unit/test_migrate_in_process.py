"""testkit's node start-up migrates in the caller's process: from inside a running event loop too, and a
settings mistake is a NodeStartError naming it (as ``tjobs migrate`` would refuse it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from testkit.node_process import NodeStartError, migrate_in_process, node_settings, to_toml


def _config(tmp_path: Path, **extra: object) -> Path:
    url = f"sqlite+aiosqlite:///{tmp_path / 'data'}"
    settings = node_settings(storage_urls=[url], port=1, admin_key="tja_test_" + "k" * 20, topology="1x1x2")
    settings.update(extra)
    path = tmp_path / "node.toml"
    path.write_text(to_toml(settings))
    return path


def _revisions(directory: Path) -> list[str]:
    databases = sorted(directory.glob("data/*.db"))
    assert databases, list(directory.rglob("*"))
    revisions = []
    for database in databases:
        with sqlite3.connect(database) as conn:
            (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            revisions.append(revision)
    return revisions


async def test_a_caller_inside_an_event_loop_gets_every_database_at_head(tmp_path: Path) -> None:
    migrate_in_process(_config(tmp_path), timeout_s=120)
    revisions = _revisions(tmp_path)
    assert len(set(revisions)) == 1 and revisions[0], revisions


def test_a_settings_mistake_is_a_node_start_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(NodeStartError, match="no_such_setting"):
        migrate_in_process(_config(tmp_path, no_such_setting=1), timeout_s=120)
