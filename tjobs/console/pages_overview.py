"""The overview: per app, its fire rate, first-attempt delivery lateness (commit lateness beside it), reach
and dead letters over a window, with charts.

The figures are the cluster's, the same whichever node serves the page: ``GET /v1/slo?window=``'s
(:func:`tjobs.service.cluster_slo.cluster_service_levels`, every node's minutes summed from the store,
never the flow tables). The charts cut the window into a few buckets and sum each the same way
(:data:`WINDOWS`: 5 × 1 min, 12 × 5 min, 24 × 1 h, 28 × 6 h), read concurrently. "Dead letters now"
is read from the store at the request (one statement per logical database for the page's apps), and so
are the task counts (the stores' counts, as ``GET /v1/stats`` reads them).

An app session sees its own app; the admin sees every app in one table (a page of 100 at a time,
with the total of all apps), or one app's figures and charts with ``?app=``.

The charts have a time axis in UTC (each point a bucket, labelled by its start). The figures refresh
while the page is open without reloading it: the page's figures are a fragment
(``/console/overview/figures``, same query) that ``console.js`` fetches again every
:data:`REFRESH_S` seconds and puts in place (no inline script: the console's CSP admits only its own
file); without JavaScript the page is as it was loaded. Above the figures, a warning for each pool of
the shown apps where flows found no live executor in the last 15 minutes and which has none now
(:meth:`tjobs.service.pools.PoolService.empty_pools`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from tjobs.api.routes_pools import pool_service_of
from tjobs.console.charts import Chart, TimeAxis, line_chart
from tjobs.console.context import Console, ConsoleRoute, Principal, console_of
from tjobs.errors import StorageUnavailable
from tjobs.model import App, TaskStatus
from tjobs.observability.slo import MS_PER_MINUTE, lateness_summary
from tjobs.service.cluster_slo import P99_OBJECTIVE_S, REACH_OBJECTIVE
from tjobs.service.cursors import MAX_CURSOR_CHARS

if TYPE_CHECKING:
    from tjobs.node import Node

logger = logging.getLogger(__name__)
router = APIRouter(route_class=ConsoleRoute)

APPS_PER_PAGE = 100
Window = Literal["5m", "1h", "1d", "7d"]
WINDOWS: dict[str, tuple[int, int]] = {"5m": (5, 1), "1h": (60, 5), "1d": (1_440, 60), "7d": (10_080, 360)}
WINDOW_NAMES = {"5m": "5 min", "1h": "1 hour", "1d": "1 day", "7d": "7 days"}
DEFAULT_WINDOW: Window = "1h"
REFRESH_S = 30  # the figures are per minute: a refresh every half minute shows each new one soon


async def dead_letters_now(node: Node, apps: list[App]) -> dict[str, int | None]:
    """Each app's dead letters now, read from the store at the request (``None`` for each while a
    database cannot be read: the page says so rather than show an old count as "now")."""
    try:
        counts = await node.tasks.dead_letter_counts([app.id for app in apps])
    except StorageUnavailable:
        logger.warning("dead letters could not be counted now", exc_info=True, extra={"action": "count_failed"})
        return dict.fromkeys((app.id for app in apps), None)
    return dict(counts)


async def task_counts_now(node: Node, apps: list[App]) -> dict[str, dict[str, int] | None]:
    """Each app's tasks per status now, from the stores' counts at the request (``None`` for each while
    a database cannot be read, as :func:`dead_letters_now`)."""
    try:
        counts = await node.tasks.counts.statuses([app.id for app in apps])
    except StorageUnavailable:
        logger.warning("task counts could not be read now", exc_info=True, extra={"action": "count_failed"})
        return dict.fromkeys((app.id for app in apps), None)
    return dict(counts)


async def service_levels(
    node: Node,
    app: App | None,
    window: str,
    dead_letters: dict[str, int | None] | None = None,
    tasks: dict[str, dict[str, int] | None] | None = None,
) -> dict[str, Any]:
    """One app's figures over ``window`` (every app's total: ``None``), as the overview shows them;
    ``dead_letters`` and ``tasks``: the apps' counts now, when the caller read them for a page of apps
    at once."""
    report = await node.cluster_slo.report(None if app is None else app.id, window)
    lateness = report["delivery_lateness"]
    reach = report["reach"]
    row: dict[str, Any] = {
        "app": app,
        "fires": report["fires"],
        "fires_per_min": report["fires"] / WINDOWS[window][0],
        "lateness": lateness,
        "commit_lateness": report["commit_lateness"],
        "p99_s": lateness["p99_s"],
        "p99_met": lateness["met"],
        "reach": reach["ratio"],
        "reach_met": reach["met"],
        "delivered": reach["delivered"],
        "dead": reach["dead"],
        "misses": report["misses"],
        "throttled": report["throttled"],
        "disabled": app is not None and app.disabled_at_ms is not None,
    }
    if app is not None:
        now = dead_letters if dead_letters is not None else await dead_letters_now(node, [app])
        counted = (tasks if tasks is not None else await task_counts_now(node, [app])).get(app.id)
        row.update(
            dead_letters=now.get(app.id),
            active_tasks=None if counted is None else counted[TaskStatus.ACTIVE.value],
            paused_tasks=None if counted is None else counted[TaskStatus.PAUSED.value],
        )
    return row


async def charts(node: Node, app: App, window: str) -> list[Chart]:
    """Fires per minute, p99 first-attempt delivery lateness, reach and dead flows per bucket of
    ``window``, oldest first."""
    minutes, step = WINDOWS[window]
    to_minute = node.clock.now_ms() // MS_PER_MINUTE + 1
    starts = range(to_minute - minutes, to_minute, step)
    buckets = await asyncio.gather(*(node.cluster_slo.counts(app.id, start, start + step) for start in starts))
    p99_ms: list[float | None] = []
    reach: list[float | None] = []
    for bucket in buckets:
        p99_s = lateness_summary(bucket.first_answer_lateness)["p99_s"]
        p99_ms.append(None if p99_s is None else p99_s * 1000)
        finished = bucket.delivered + bucket.dead
        reach.append(bucket.delivered / finished * 100 if finished else None)
    per = f"{step} min" if step < 60 else f"{step // 60} h"
    axis = TimeAxis(starts[0] * MS_PER_MINUTE, step * MS_PER_MINUTE)
    return [
        line_chart("Fires per minute", [bucket.fires / step for bucket in buckets], digits=1, axis=axis),
        line_chart(
            f"p99 delivery lateness, first attempts, bucket upper bound (per {per})", p99_ms, unit=" ms", axis=axis
        ),
        line_chart(f"Reach (per {per})", reach, unit=" %", digits=2, axis=axis),
        line_chart(f"Dead flows (per {per})", [float(bucket.dead) for bucket in buckets], axis=axis),
    ]


@dataclass(frozen=True, slots=True)
class OverviewQuery:
    """The overview's query, the page's and its fragment's alike."""

    app: str | None
    window: Window
    cursor: str | None

    def params(self) -> dict[str, str]:
        given = (("app", self.app), ("window", self.window), ("cursor", self.cursor))
        return {name: value for name, value in given if value}


def overview_query(
    app: Annotated[str | None, Query(max_length=200)] = None,
    window: Annotated[Window, Query()] = DEFAULT_WINDOW,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> OverviewQuery:
    return OverviewQuery(app, window, cursor)


async def figures(request: Request, console: Console, principal: Principal, query: OverviewQuery) -> dict[str, Any]:
    """What the overview's figures show (the page and its refreshed fragment alike)."""
    window, cursor = query.window, query.cursor
    scoped = await console.scope(principal, query.app)
    node = console.node
    total = None
    next_cursor = None
    shown: list[Chart] = []
    if scoped is not None:
        rows = [await service_levels(node, scoped, window)]
        shown = await charts(node, scoped, window)
    else:  # the admin: every app, a page at a time, and their total
        page = await console.apps.list_page(APPS_PER_PAGE, cursor or None)
        now, counted = await asyncio.gather(
            dead_letters_now(node, list(page.items)), task_counts_now(node, list(page.items))
        )
        rows = list(await asyncio.gather(*(service_levels(node, each, window, now, counted) for each in page.items)))
        total = await service_levels(node, None, window)
        next_cursor = page.next_cursor
    pools = pool_service_of(request.app.state, node)
    empty = await pools.empty_pools(None if scoped is None else {scoped.id})
    return {
        "rows": rows,
        "total": total,
        "charts": shown,
        "scoped": scoped,
        "window": window,
        "windows": WINDOW_NAMES,
        "next_cursor": next_cursor,
        "objectives": {"p99_s": P99_OBJECTIVE_S, "reach": REACH_OBJECTIVE},
        "empty_pools": empty,
        "now_ms": node.clock.now_ms(),
        "refresh_s": REFRESH_S,
    }


@router.get("/console/")
async def overview(request: Request, query: Annotated[OverviewQuery, Depends(overview_query)]) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    shown = await figures(request, console, principal, query)
    return console.render(request, "overview.html", principal, figures_query=query.params(), **shown)


@router.get("/console/overview/figures")
async def overview_figures(request: Request, query: Annotated[OverviewQuery, Depends(overview_query)]) -> Response:
    """The overview's figures alone (no layout): what the open page fetches again every REFRESH_S s."""
    console = console_of(request)
    principal = await console.principal(request)
    return console.render(
        request, "_overview_figures.html", principal, **await figures(request, console, principal, query)
    )
