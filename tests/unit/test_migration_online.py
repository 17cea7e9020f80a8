"""Every migration says whether it is online (:mod:`tjobs.stores.migration_plan`), an online one's
statements are ones MariaDB runs without a table copy or a rewrite of existing rows, and
``tjobs migrate --plan`` lists what a database still needs."""

from __future__ import annotations

import ast
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event
from typer.testing import CliRunner

from tjobs.cli.main import app
from tjobs.settings import StorageSettings
from tjobs.stores import migration_plan
from tjobs.stores.migrate import MIGRATIONS_DIR, migrate_sync
from tjobs.stores.migration_plan import Migration, declared_migrations, pending_after, plan_lines
from tjobs.stores.schema_revision import known_revisions, module_literals
from tjobs.stores.sql_layout import Layout, sqlite_path

FILES = sorted((MIGRATIONS_DIR / "versions").glob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_every_migration_declares_whether_it_is_online_and_why(path: Path) -> None:
    values = module_literals(path, ("ONLINE", "ONLINE_WHY"))
    assert isinstance(values.get("ONLINE"), bool), f"{path.name}: ONLINE = True/False missing"
    why = values.get("ONLINE_WHY")
    assert isinstance(why, str) and why.strip() and "\n" not in why, f"{path.name}: ONLINE_WHY, one line"


def test_the_declarations_form_the_chain_alembic_runs() -> None:
    chain = [migration.revision for migration in declared_migrations()]
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    assert chain == [revision.revision for revision in reversed(list(script.walk_revisions()))]
    assert chain[-1] == known_revisions()[0]


def test_a_migration_without_the_declaration_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "versions").mkdir()
    newest = FILES[-1]
    text = newest.read_text()
    (tmp_path / "versions" / newest.name).write_text(re.sub(r"^ONLINE.*\n", "", text, flags=re.M))
    monkeypatch.setattr(migration_plan, "MIGRATIONS_DIR", tmp_path)
    declared_migrations.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=f"{newest.name} does not declare ONLINE"):
            declared_migrations()
    finally:
        declared_migrations.cache_clear()


# What keeps a migration from being online, judged on the statements it sends (SQLite's; the MariaDB-only
# ALTERs are in the files, where the ALGORITHM is named). A statement on a table the same migration made
# touches no existing rows.
_BLOCKING = [
    (re.compile(r"^\s*UPDATE\s", re.I), "rewrites existing rows"),
    (re.compile(r"^\s*DELETE\s", re.I), "deletes existing rows"),
    (re.compile(r"^\s*INSERT\s.*\bSELECT\b", re.I | re.S), "copies existing rows (a snapshot older nodes outdate)"),
    (re.compile(r"_alembic_tmp_", re.I), "copies a table"),
    (re.compile(r"^\s*ALTER\s+TABLE\b.*\b(MODIFY|CHANGE|DROP)\b", re.I | re.S), "changes or drops a column"),
    (re.compile(r"ALGORITHM\s*=\s*COPY", re.I), "copies a table"),
]
_CREATED = re.compile(r'^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?[`"]?(\w+)', re.I)
_TARGET = re.compile(r'^\s*(?:UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+[`"]?(\w+)', re.I)


def offline_reasons(statements: list[str]) -> list[str]:
    created: set[str] = set()
    reasons = []
    for statement in statements:
        if made := _CREATED.match(statement):
            created.add(made.group(1))
        target = _TARGET.match(statement)
        own = "alembic_version" in statement or (target is not None and target.group(1) in created)
        if own and not re.search(r"\bSELECT\b", statement, re.I):
            continue
        reasons += [f"{why}: {statement.strip()[:80]}" for pattern, why in _BLOCKING if pattern.search(statement)]
    return reasons


@pytest.mark.parametrize(
    ("statement", "online"),
    [
        ("ALTER TABLE tasks_00 ADD COLUMN children TEXT", True),
        ('CREATE TABLE "task_parents" (child VARCHAR(64))', True),
        ("ALTER TABLE `tasks_00` STATS_AUTO_RECALC=0, ALGORITHM=INSTANT", True),
        ("UPDATE tasks_00 SET revision=tasks_00.version", False),
        ("INSERT INTO task_counts (app_id, n) SELECT app_id, COUNT(*) FROM tasks_00 GROUP BY app_id", False),
        ("ALTER TABLE `tasks_00` MODIFY name VARCHAR(255) COLLATE utf8mb4_nopad_bin", False),
        ("CREATE TABLE _alembic_tmp_tasks_00 (id VARCHAR(64))", False),
        ("ALTER TABLE `flows_00` ADD COLUMN x TEXT, ALGORITHM=COPY", False),
    ],
)
def test_the_statement_check_tells_an_online_change_from_a_blocking_one(statement: str, online: bool) -> None:
    assert (offline_reasons([statement]) == []) is online


def _statements_per_revision(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Migrate a fresh SQLite database one revision at a time; each revision with its statements."""
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    engine = create_engine(f"sqlite:///{path}")
    sent: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _k, statement, *_a: sent.append(statement))
    try:
        for migration in declared_migrations():
            sent.clear()
            with engine.connect() as conn:

                def upgrade(heads: Any, _context: Any, revision: str = migration.revision) -> Any:
                    return script._upgrade_revs(revision, heads)

                context = MigrationContext.configure(conn, opts={"fn": upgrade})
                with context.begin_transaction():
                    context.run_migrations(operations=Operations(context), tables_per_database=2, holds_apps=True)
                conn.commit()
            yield migration.revision, list(sent)
    finally:
        engine.dispose()


def test_a_migration_declared_online_sends_no_statement_that_blocks_firing(tmp_path: Path) -> None:
    online = {migration.revision for migration in declared_migrations() if migration.online}
    ran = dict(_statements_per_revision(tmp_path / "schema.db"))
    assert set(ran) == {migration.revision for migration in declared_migrations()}
    blocking = {revision: offline_reasons(statements) for revision, statements in ran.items() if revision in online}
    assert {revision: reasons for revision, reasons in blocking.items() if reasons} == {}
    assert offline_reasons(ran["0002_task_revision"]), "the check sees 0002's rewrite of every task row"


def test_a_column_added_to_the_task_tables_is_declared_offline(tmp_path: Path) -> None:
    """MariaDB refuses ``ADD COLUMN`` on ``tasks_TT`` with ``ALGORITHM=INSTANT`` (error 1845) and with
    ``LOCK=NONE`` ("online rebuild with indexed virtual columns": ``schedule_kind``, 0007): it rebuilds the
    table with writes blocked (``LOCK=SHARED``), fires held meanwhile (``python -m benchmarks
    online_migration``). A migration that adds one is offline."""
    adds = re.compile(r"^\s*ALTER\s+TABLE\s+[`\"]?tasks_\d+[`\"]?\s+ADD\s+COLUMN", re.I)
    declared = {migration.revision: migration for migration in declared_migrations()}
    for revision, statements in _statements_per_revision(tmp_path / "schema.db"):
        if any(adds.match(statement) for statement in statements):
            assert not declared[revision].online, f"{revision} adds a column to tasks_TT: offline"


def _sql_literals_of_code(path: Path) -> list[str]:
    """The string literals (f-strings' fixed parts joined) in a migration's code but its ``downgrade``:
    the MariaDB-only statements among them, which the SQLite run above does not send."""
    tree = ast.parse(path.read_text())
    code = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name != "downgrade"]
    nodes = [inner for function in code for inner in ast.walk(function)]
    parts = {id(part) for node in nodes if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in nodes:
        if isinstance(node, ast.JoinedStr):
            found.append("".join(str(part.value) for part in node.values if isinstance(part, ast.Constant)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            found.append(node.value)
    return found


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_an_online_migrations_own_alter_statements_name_an_online_algorithm(path: Path) -> None:
    if not module_literals(path, ("ONLINE",))["ONLINE"]:
        return
    for sql in _sql_literals_of_code(path):
        if re.search(r"\bALTER\s+TABLE\b", sql, re.I) and "sqlite" not in sql.lower() and '"' not in sql:
            assert re.search(r"ALGORITHM\s*=\s*(INSTANT|INPLACE)", sql, re.I), f"{path.name}: {sql!r}"
            assert not offline_reasons([sql]), f"{path.name}: {sql!r}"


def test_the_pending_migrations_follow_the_recorded_revision() -> None:
    chain = declared_migrations()
    assert pending_after([]) == list(chain)
    assert pending_after([chain[-1].revision]) == []
    assert [m.revision for m in pending_after([chain[-3].revision])] == [m.revision for m in chain[-2:]]
    assert pending_after(["9999_from_a_newer_version"]) == []


def test_the_plan_says_what_to_do() -> None:
    online = [Migration("0023_x", True, "a column, INSTANT"), Migration("0024_y", True, "a new table")]
    lines = plan_lines(["0022_z"], online)
    assert lines[0] == "schema at 0022_z; 2 pending"
    assert "online " in lines[1] and "a column, INSTANT" in lines[1]
    assert lines[-1].startswith("all online: run `tjobs migrate` while the nodes run")
    lines = plan_lines(["0021_w"], [Migration("0022_z", False, "a count"), *online])
    assert "OFFLINE" in lines[1] and lines[-1].startswith("offline (0022_z): stop every node")
    assert plan_lines(["0024_y"], [])[-1] == "nothing to do"


def test_migrate_plan_lists_what_a_database_set_back_still_needs(tmp_path: Path) -> None:
    storage = StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x2")
    migrate_sync(storage)
    chain = declared_migrations()
    first = sqlite_path(Layout(storage).apps_database.engine_url)
    with closing(sqlite3.connect(first)) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (chain[-3].revision,))
    config = tmp_path / "tjobs.toml"
    config.write_text(f'[storage]\nurls = ["sqlite+aiosqlite:///{tmp_path / "data"}"]\ntopology = "1x1x2"\n')
    result = CliRunner().invoke(app, ["migrate", "--plan", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert f"schema at {chain[-3].revision}; 2 pending" in result.output
    for migration in chain[-2:]:
        assert migration.revision in result.output and migration.why in result.output
    with closing(sqlite3.connect(first)) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (chain[-3].revision,)
