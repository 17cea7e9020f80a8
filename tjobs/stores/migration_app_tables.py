"""The upgrade and downgrade of a revision that only adds tables beside ``apps`` (the first logical
database): 0015 (alerts), 0016 (accounts), 0017 (audit log), 0018 (calendars), 0019 (operator jobs) and
0024 (task parents) are each one call of :func:`app_tables` rather than the same two functions again.

The upgrade creates the tables the database lacks (:func:`create_missing_tables`, so a revision that
runs again over its own work creates nothing); the downgrade drops them, the last named first. Other
databases (``holds_apps`` false) are left alone by both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from alembic import op as global_op
from alembic.operations import Operations
from sqlalchemy.schema import SchemaItem

from tjobs.stores.migration_tables import Index, create_missing_tables

# a table: its name, what makes its schema items (fresh ones for each upgrade), its indexes
NewTable = tuple[str, Callable[[], Sequence[SchemaItem]], Sequence[Index]]


class Step(Protocol):
    """A revision's ``upgrade`` or ``downgrade`` as :mod:`tjobs.stores.migrate` and ``env.py`` call it."""

    def __call__(self, holds_apps: bool, operations: Operations | None = None, **_: Any) -> None: ...


def app_tables(*tables: NewTable) -> tuple[Step, Step]:
    """``upgrade, downgrade`` of a revision adding ``tables`` to the database that holds ``apps``."""

    def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
        if holds_apps:
            create_missing_tables(
                operations or global_op, [(name, items(), indexes) for name, items, indexes in tables]
            )

    def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
        op = operations or global_op
        if holds_apps:
            for name, _items, _indexes in reversed(tables):
                op.drop_table(name)

    return upgrade, downgrade
