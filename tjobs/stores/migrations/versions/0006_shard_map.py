"""The shard map as data (:mod:`sharding.shard_map`): ``tjobs_shard_map`` (the embedded mode's copy of
the map) in the first logical database, and ``tjobs_fence`` in every logical database, one row whose
``epoch`` is the lowest map epoch a writer must hold (0: any). See :mod:`tjobs.stores.shard_fence`.

Revision ID: 0006_shard_map
Revises: 0005_targets
Create Date: 2026-11-28
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op as global_op
from alembic.operations import Operations

from tjobs.stores.schema import (
    MYSQL_TABLE_OPTIONS,
    SHARD_FENCE_TABLE,
    SHARD_MAP_TABLE,
    shard_fence_schema_items,
    shard_map_schema_items,
)

_OPTIONS: dict[str, Any] = dict(MYSQL_TABLE_OPTIONS)

revision = "0006_shard_map"
down_revision = "0005_targets"
branch_labels = None
depends_on = None
ONLINE = True  # docs/operations.md "Upgrades"; tjobs.stores.migration_plan
ONLINE_WHY = "new tables, each with its first row"


def upgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    if holds_apps:
        op.create_table(SHARD_MAP_TABLE, *shard_map_schema_items(), **_OPTIONS)
    fence = op.create_table(SHARD_FENCE_TABLE, *shard_fence_schema_items(), **_OPTIONS)
    assert isinstance(fence, sa.Table)
    op.bulk_insert(fence, [{"id": 1, "epoch": 0}])


def downgrade(holds_apps: bool, operations: Operations | None = None, **_: Any) -> None:
    op = operations or global_op
    op.drop_table(SHARD_FENCE_TABLE)
    if holds_apps:
        op.drop_table(SHARD_MAP_TABLE)
