"""The moves of logical databases as operators read them (``GET /v1/shards/moves``, the console's
cluster page, the ``tjobs_shard_move_*`` metrics): what :class:`tjobs.cluster.shard_move.ShardMover`
records in ``tjobs_shard_moves``, with every server shown as ``host:port`` (never a credential).

A move is ``in_progress`` at a step (``copying``, ``catching_up``, ``cutting_over``) until the map names
the target; then its outcome is ``moved`` and it stays listed until ``tjobs shards drop-old``. An
aborted move leaves no record (the database stays where it was; the mover's log says so).

:class:`MoveWatch` reads the record in the background every ``interval_s`` for the metrics: a scrape
of ``/metrics`` never waits for a database.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

from tjobs.cancellation import stop_task
from tjobs.clock import iso_ms
from tjobs.errors import TjobsError
from tjobs.model import DONE
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts import MoveRow

logger = logging.getLogger(__name__)

Outcome = Literal["in_progress", "moved"]
IN_PROGRESS: Outcome = "in_progress"
MOVED: Outcome = "moved"
DEFAULT_WATCH_INTERVAL_S = 5.0


def outcome_of(row: MoveRow) -> Outcome:
    return MOVED if row.state == DONE else IN_PROGRESS


def without_credentials(server: str) -> str:
    """``host:port`` of a server name or URL: any scheme, user, password, path and query removed."""
    if "://" in server:
        parts = urlsplit(server)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{parts.port}" if parts.port else host
    return server.rsplit("@", 1)[-1]


def move_json(row: MoveRow) -> dict[str, Any]:
    def instant(ms: int | None) -> str | None:
        return None if not ms else iso_ms(ms)

    return {
        "database": row.database,
        "from": without_credentials(row.source),
        "to": without_credentials(row.target),
        "step": row.state,
        "outcome": outcome_of(row),
        "rows_copied": row.rows_copied,
        "tables_copied": len(row.tables_copied),
        "lag_rows": row.lag_rows,
        "started_at": instant(row.started_at_ms),
        "finished_at": instant(row.finished_at_ms),
        "cut_over_pause_s": None if row.cut_over_pause_ms is None else row.cut_over_pause_ms / 1000,
        "epoch": row.epoch or None,
    }


def select_moves(rows: Sequence[MoveRow], outcome: Outcome | None, database: int | None) -> list[MoveRow]:
    """The rows with that outcome and of that database (``None``: any)."""
    return [
        row
        for row in rows
        if (outcome is None or outcome_of(row) == outcome) and (database is None or row.database == database)
    ]


class MoveWatch:
    """The recorded moves, re-read every ``interval_s`` off the scrape path; :attr:`latest` is the
    last successful read (a failed read keeps the previous one and is logged)."""

    def __init__(self, store: TaskStore, interval_s: float = DEFAULT_WATCH_INTERVAL_S) -> None:
        self.store = store
        self.interval_s = interval_s
        self.latest: list[MoveRow] = []
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> list[MoveRow]:
        self.latest = await self.store.read_shard_moves()
        return self.latest

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="shard-move-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task)  # cancelled again if a driver's wait_for lost it (gh-86296)

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except TjobsError as error:  # the next round retries; the metrics keep the last read
                logger.warning(
                    "reading the recorded shard moves failed: %s", error, extra={"action": "shard_moves_unread"}
                )
            await asyncio.sleep(self.interval_s)
