"""The reverse index of child tasks (README "Child tasks"): ``task_parents`` in the first logical
database, beside ``apps`` (:mod:`tjobs.stores.schema_task_parents`). Empty when made: a task whose
children were set before it is indexed when its children are next edited.

Revision ID: 0024_task_parents
Revises: 0023_task_children
Create Date: 2026-12-03
"""

from __future__ import annotations

from tjobs.stores.migration_app_tables import app_tables
from tjobs.stores.schema_task_parents import TASK_PARENTS_TABLE, task_parents_indexes, task_parents_schema_items

revision = "0024_task_parents"
down_revision = "0023_task_children"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "a new table"

upgrade, downgrade = app_tables((TASK_PARENTS_TABLE, task_parents_schema_items, task_parents_indexes()))
