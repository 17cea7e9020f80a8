"""A page of tasks' health, as a task list shows it beside each task: its last result (the newest flow's
status and when it last changed), and over the last 24 hours its success rate and failures (dead flows).

Read when a page is shown, from the flows themselves (:meth:`tjobs.stores.contracts.TaskRecords.task_health`:
per task its newest flow and its newest :data:`HEALTH_CAP` flows of the window, ranges of the flows'
primary key), not counted on the fire path: counters kept per task on every outcome would add a write
to every fire for figures read a page at a time (docs/benchmarks.md, "Task health: read at page view,
not counted per outcome", measures both). A task that fires more than :data:`HEALTH_CAP` times in the
window is judged on its newest :data:`HEALTH_CAP` flows, and its figures say so (``capped``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tjobs.model import Task, TaskHealth
from tjobs.stores.contracts import TaskRecords

HEALTH_WINDOW_MS = 24 * 3_600_000
HEALTH_CAP = 2_000
"""The most flows per task one health read counts (a task firing every 43 s or faster reaches it)."""
HEALTH_PAGE_MAX = 100
"""The most tasks one health read covers (``GET /v1/tasks?health=true`` caps its ``limit`` at this)."""


async def health_of_page(store: TaskRecords, tasks: Sequence[Task], now_ms: int) -> dict[int, TaskHealth]:
    """Each task's :class:`TaskHealth` over the :data:`HEALTH_WINDOW_MS` before ``now_ms``."""
    if not tasks:
        return {}
    return await store.task_health([task.id for task in tasks], now_ms - HEALTH_WINDOW_MS, HEALTH_CAP)
