"""A page of tasks' health, as a task list shows it beside each task: its last result (the newest flow's
status and when it last changed), and over the last 24 hours its success rate and failures (dead flows).

Read when a page is shown, from the flows themselves
(:meth:`tjobs.stores.contracts.TaskRecords.task_health`: per task its newest flow and its newest
:data:`HEALTH_CAP` flows of the window, two ranges of the flows' primary key, the page's tasks in one
statement per server), not counted per outcome. Counters batched into the deliverer's flush would cost it
nothing measurable and make the page cheaper (docs/benchmarks.md, "A flow's answers and the task health",
measures both), but they would be a write on every node's every flush for figures read a page at a time, one
more table of a row per task and hour to keep and purge, and they could not be exact: the outcome ``UPDATE``
is guarded (a terminal flow is never changed again, an outdated outcome never lowers the attempts) and a
multi-row statement does not say which rows it changed, so a repeated or outdated outcome would be counted
twice (the drift issue 27 found in the service levels' dead count). The read is bounded instead: a task that
fires more than :data:`HEALTH_CAP` times in the window is judged on its newest :data:`HEALTH_CAP` flows, and
its figures say so (``capped``); a page costs at most :data:`HEALTH_PAGE_MAX` × (:data:`HEALTH_CAP` + 1)
index rows whatever the fire rate.
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
