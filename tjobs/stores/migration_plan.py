"""``tjobs migrate --plan``: which migrations a database still needs, and whether each is online.

Every migration file declares ``ONLINE`` (bool) and ``ONLINE_WHY`` (one line). Online means it can run
while nodes of the previous version fire: it rebuilds no table (new tables; on MariaDB a nullable or
defaulted column added last, ``ALGORITHM=INSTANT``; table options with ``ALGORITHM=INSTANT``), holds a
table's metadata lock only for a moment, and what it writes stays true while older nodes keep writing.
An offline one (a table copy, a rewrite of every row, a count or copy the older nodes' writes would make
stale) runs with every node stopped (docs/operations.md, "Upgrades"). A unit test holds every
file to the declaration and checks the online ones' statements.

Read from the files' literal assignments, as :mod:`tjobs.stores.schema_revision` reads the revisions.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from tjobs.settings import StorageSettings
from tjobs.stores.schema_revision import MIGRATIONS_DIR, module_literals, recorded_revisions
from tjobs.stores.sql_layout import Layout, create_engine_for

DECLARED = ("revision", "down_revision", "ONLINE", "ONLINE_WHY")


@dataclass(frozen=True)
class Migration:
    revision: str
    online: bool
    why: str


@functools.cache
def declared_migrations() -> tuple[Migration, ...]:
    """Every migration this version ships, oldest first (the revisions form one chain)."""
    found: dict[str | None, tuple[str, bool, str]] = {}
    for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        values = module_literals(path, DECLARED)
        if not isinstance(values.get("ONLINE"), bool) or not isinstance(values.get("ONLINE_WHY"), str):
            raise RuntimeError(f"{path.name} does not declare ONLINE (bool) and ONLINE_WHY (str)")
        found[values.get("down_revision")] = (values["revision"], values["ONLINE"], values["ONLINE_WHY"])
    chain: list[Migration] = []
    parent: str | None = None
    while parent in found:
        revision, online, why = found[parent]
        chain.append(Migration(revision, online, why))
        parent = revision
    if len(chain) != len(found):
        raise RuntimeError(f"the migrations in {MIGRATIONS_DIR} are not one chain")
    return tuple(chain)


def pending_after(recorded: Sequence[str]) -> list[Migration]:
    """The migrations a database at ``recorded`` (its ``alembic_version`` rows) still needs: all of them
    for none, none for a revision this version does not ship (a newer version migrated it)."""
    chain = declared_migrations()
    revisions = [migration.revision for migration in chain]
    if not recorded:
        return list(chain)
    if any(revision not in revisions for revision in recorded):
        return []
    return list(chain[max(revisions.index(revision) for revision in recorded) + 1 :])


async def migration_plan(settings: StorageSettings) -> tuple[list[str], list[Migration]]:
    """The first logical database's recorded revisions and what it still needs (``tjobs migrate``
    brings every logical database to the same head, so the first one speaks for the others)."""
    if all(url.startswith("memory:") for url in settings.urls):
        return [], []
    layout = Layout(settings)
    engine = create_engine_for(layout.apps_database.engine_url, settings)
    try:
        async with engine.connect() as conn:
            recorded = await recorded_revisions(conn, layout)
    finally:
        await engine.dispose()
    return recorded, pending_after(recorded)


def plan_lines(recorded: Sequence[str], pending: Sequence[Migration]) -> list[str]:
    """What ``tjobs migrate --plan`` prints: each pending migration, then what to do."""
    lines = [f"schema at {', '.join(recorded) or 'no revision'}; {len(pending)} pending"]
    lines += [f"  {m.revision:<28} {'online ' if m.online else 'OFFLINE'}  {m.why}" for m in pending]
    if not pending:
        lines.append("nothing to do")
    elif all(m.online for m in pending):
        lines.append("all online: run `tjobs migrate` while the nodes run, then replace the nodes one at a time")
    else:
        offline = ", ".join(m.revision for m in pending if not m.online)
        lines.append(f"offline ({offline}): stop every node, run `tjobs migrate`, start the new version")
    return lines
