"""The overview: per app, its fire rate, p99 fire lateness, reach and dead letters.

An app session sees its own app; the admin sees every app in one table (a page of 100 at a time),
or one app's figures with ``?app=``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from tjobs.api.routes_slo import P99_OBJECTIVE_S, REACH_OBJECTIVE
from tjobs.console.context import ConsoleRoute, console_of
from tjobs.model import App
from tjobs.service.cursors import MAX_CURSOR_CHARS

if TYPE_CHECKING:
    from tjobs.node import Node

router = APIRouter(route_class=ConsoleRoute)

APPS_PER_PAGE = 100


def service_levels(node: Node, app: App) -> dict[str, Any]:
    """What the overview shows for one app, as this node sees it (the node's ``/v1/slo`` and counts)."""
    node.tasks.counts.refresh_soon()
    counts = node.tasks.counts.of(app.id)
    windows = node.slo.lateness.windows(app.id)
    outcomes = node.slo.outcome_counts
    delivered = outcomes.get((app.id, "delivered"), 0)
    dead = outcomes.get((app.id, "dead"), 0)
    reach = delivered / (delivered + dead) if delivered + dead else None
    last_minute = windows.get("1m", {})
    p99_s = windows.get("5m", {}).get("p99_s")
    return {
        "app": app,
        "fires_per_min_1m": last_minute.get("count", 0),
        "fires_per_min_5m": windows.get("5m", {}).get("count", 0) / 5,
        "lateness": windows,
        "p99_s": p99_s,
        "p99_met": p99_s is None or p99_s <= P99_OBJECTIVE_S,
        "reach": reach,
        "reach_met": reach is None or reach >= REACH_OBJECTIVE,
        "delivered": delivered,
        "dead_since_start": dead,
        "dead_letters": counts.dead_letters,
        "active_tasks": counts.active,
        "paused_tasks": counts.paused,
        "counted_at_ms": counts.counted_at_ms,
        "scope": "node",
        "disabled": app.disabled_at_ms is not None,
    }


@router.get("/console/")
async def overview(
    request: Request,
    app: Annotated[str | None, Query(max_length=200)] = None,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    scoped = await console.scope(principal, app)
    if scoped is not None:
        rows = [service_levels(console.node, scoped)]
        next_cursor = None
    else:  # the admin: every app, a page at a time
        page = await console.apps.list_page(APPS_PER_PAGE, cursor or None)
        rows = [service_levels(console.node, each) for each in page.items]
        next_cursor = page.next_cursor
    return console.render(
        request,
        "overview.html",
        principal,
        rows=rows,
        scoped=scoped,
        next_cursor=next_cursor,
        objectives={"p99_s": P99_OBJECTIVE_S, "reach": REACH_OBJECTIVE},
    )
