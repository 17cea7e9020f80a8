"""What the API asks of a node: task and app operations, validation, and per-app task counts.

- :mod:`tjobs.service.tasks` — create, read, edit, pause, trigger and delete tasks; route by shard,
  store, and hand near-term changes to the wheel.
- :mod:`tjobs.service.apps` — apps (tenants): create, update, rotate keys; a small cache.
- :mod:`tjobs.service.validation` — the parts of a task request that are not its schedule.
- :mod:`tjobs.service.task_counts` — per-app task counts for quotas and ``/v1/stats``.
"""
