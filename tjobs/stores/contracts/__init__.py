"""The storage seam, cut by role: one abstract base per role, the contract written once in its docstrings.

=====================  ==============================================================================
:class:`FirePath`      load due tasks, commit fires, record delivery outcomes, lease stale flows
:class:`TaskRecords`   tasks and flows for owners: create, read, edit, delete, search, count, purge
:class:`RunRecords`    job runs: a run's transitions under a compare-and-set, its log appended in place
:class:`Tenants`       apps and their named delivery targets
:class:`ServiceLevels` every node's per-minute delivery counts
:class:`ShardAdmin`    servers, the shard map and its fence, moves, the layout record, sessions
:class:`HotChanges`    the DB-poll hot tier's log of task changes: append, read after an id, prune
:class:`Accounts`      operator accounts: users and their roles per app, personal API tokens, console sessions
=====================  ==============================================================================

Every role shares :class:`StoreLifecycle` (topology, start, close, ping). :class:`tjobs.stores.base.
TaskStore` is all of them at once: the one object a node takes. A component that needs one role takes
that role's type. Each store (the memory twin, SQLAlchemy on SQLite or MariaDB) passes one contract
suite per role in ``tests/contract``.
"""

from __future__ import annotations

from tjobs.stores.contracts.accounts import Accounts
from tjobs.stores.contracts.fire_path import FirePath, FirePlanner
from tjobs.stores.contracts.hot_changes import HotChange, HotChangeLog, HotChanges
from tjobs.stores.contracts.lifecycle import StoreLifecycle
from tjobs.stores.contracts.runs import RunRecords
from tjobs.stores.contracts.service_levels import ServiceLevels
from tjobs.stores.contracts.shard_admin import (
    RETIRED_EPOCH,
    DatabaseMove,
    DatabaseMoves,
    MoveRow,
    ServerSessions,
    ShardAdmin,
    ShardMapMismatch,
    StorageLayoutMismatch,
    check_shard_map,
)
from tjobs.stores.contracts.tasks import EDITABLE_FIELDS, CountCorrection, TaskRecords
from tjobs.stores.contracts.tenants import Tenants

__all__ = [
    "EDITABLE_FIELDS",
    "RETIRED_EPOCH",
    "Accounts",
    "CountCorrection",
    "DatabaseMove",
    "DatabaseMoves",
    "FirePath",
    "FirePlanner",
    "HotChange",
    "HotChangeLog",
    "HotChanges",
    "MoveRow",
    "RunRecords",
    "ServerSessions",
    "ServiceLevels",
    "ShardAdmin",
    "ShardMapMismatch",
    "StorageLayoutMismatch",
    "StoreLifecycle",
    "TaskRecords",
    "Tenants",
    "check_shard_map",
]
