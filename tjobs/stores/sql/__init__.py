"""The SQL store (:class:`tjobs.stores.sqlalchemy.SQLAlchemyTaskStore`), laid out by the roles of
:mod:`tjobs.stores.contracts`: one mixin per role, each over :class:`connections.SqlBase`.

==========================  =====================================================================
``connections.py``          engines, pools, connections, routing a shard to its tables
``errors.py``               the one mapping of driver errors to the store's
``fire_path.py``            load due, commit fires, record outcomes, lease stale flows
``creates.py``              inserting tasks: group commit, batches, the create timeout
``tasks.py``                task and flow records: reads, edits, deletes, searches, counts, purge
``references.py``           which tasks name which target
``tenants.py``              apps and targets
``service_levels.py``       per-minute delivery counts
``shard_admin.py``          servers, the shard map and its fence, moves, layout record, sessions
``moves.py``                a move's records, copy and fences (``tjobs shards move``)
``hot_changes.py``          the DB-poll hot tier's change log, on an engine of its own
==========================  =====================================================================

The statements of the hot path live beside them: :mod:`tjobs.stores.sql_load`,
:mod:`tjobs.stores.sql_fire`, :mod:`tjobs.stores.sql_flow_updates`, :mod:`tjobs.stores.sql_direct`, and
the task counts' deltas and reconciliation, :mod:`tjobs.stores.sql_task_counts`.
"""
