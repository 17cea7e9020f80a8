"""A flow search as CSV: streamed page by page (never the whole result in memory), capped at
:data:`MAX_EXPORT_ROWS` rows, newest first.

Cells are made safe for spreadsheets: a cell whose text starts with ``=``, ``+``, ``-``, ``@``, a tab or
a carriage return is prefixed with ``'``, so a task name or an error text an app controls is never read
as a formula (CSV injection); quoting follows RFC 4180 (:mod:`csv`, ``\\r\\n`` line ends).
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime

from tjobs.model import Flow
from tjobs.service.flow_filters import FlowFilters
from tjobs.service.search import SearchService
from tjobs.stores.queries import FlowPosition, flow_position

MAX_EXPORT_ROWS = 100_000
EXPORT_PAGE = 1000
EXPORT_COLUMNS = (
    "flow_id",
    "task_id",
    "task_name",
    "scheduled_at",
    "kind",
    "status",
    "attempts",
    "last_status_code",
    "last_error",
    "next_attempt_at",
    "updated_at",
)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> str:
    """``value`` as a cell's text, never starting as a spreadsheet formula (see the module)."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _instant(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def flow_row(flow: Flow, task_name: str | None) -> list[str]:
    values: list[object] = [
        flow.id,
        flow.task_id,
        task_name,
        _instant(flow.scheduled_at_ms),
        flow.kind.value,
        flow.status.value,
        flow.attempts,
        flow.last_status_code,
        flow.last_error,
        _instant(None if flow.status.terminal else flow.next_attempt_at_ms),  # ended: marks its children due
        _instant(flow.updated_at_ms),
    ]
    return [safe_cell(value) for value in values]


def csv_text(rows: Iterable[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue()


async def export_csv(
    search: SearchService, app_id: str, filters: FlowFilters, max_rows: int = MAX_EXPORT_ROWS
) -> AsyncIterator[bytes]:
    """The header, then the matching flows' rows, at most ``max_rows``, one chunk per page read."""
    yield csv_text([list(EXPORT_COLUMNS)]).encode()
    resolved = await search.flow_query(app_id, filters)
    after: FlowPosition | None = None
    left = max_rows
    while left > 0:
        merged = await search.read_flows(resolved, after, min(EXPORT_PAGE, left))
        if not merged.items:
            return
        names = await search.task_names({flow.task_id for flow in merged.items})
        yield csv_text(flow_row(flow, names.get(flow.task_id)) for flow in merged.items).encode()
        left -= len(merged.items)
        if not merged.more:
            return
        after = flow_position(merged.items[-1])
