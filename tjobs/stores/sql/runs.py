"""The SQL store's job runs (:class:`tjobs.stores.contracts.runs.RunRecords`): a run's transition as one
guarded ``UPDATE`` of its flow (and, for a fixed_delay task's run, one of its task, in the same
transaction), a log append as one guarded ``UPDATE`` that concatenates in place, and a shard's live runs
(and the fires parked behind them) as range reads of ``(status, next_attempt_at)``. A report's read and
write (:meth:`SqlRunRecords.decide_run`) are one transaction on MariaDB (:mod:`tjobs.stores.sql_run_writes`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, and_, bindparam, func, select, text, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from tjobs.model import Flow, FlowStatus, FlowUpdate, Task, TaskStatus
from tjobs.stores import sql_run_writes
from tjobs.stores.contracts.runs import LogPurgePage, RunRecords, RunWrite
from tjobs.stores.flow_documents import run_to_text
from tjobs.stores.schema import clip_error, flow_from_row, flows_indexes, search_flow_indexes, task_from_row
from tjobs.stores.sql.connections import SqlBase
from tjobs.stores.sql_layout import MYSQL, ShardTables

_LIVE = tuple(s.value for s in FlowStatus if s.running)
_run_reads: dict[tuple[Table, Table], tuple[Select[Any], tuple[str, ...], tuple[str, ...]]] = {}


def _run_read(home: ShardTables) -> tuple[Select[Any], tuple[str, ...], tuple[str, ...]]:
    """A flow with its task (outer join) by the flow's key as bound parameters, and the two tables' column
    names in the row's order: built once per table pair (a report reads it; issue 30), not per call."""
    key = (home.flows, home.tasks)
    found = _run_reads.get(key)
    if found is None:
        flows, tasks = key
        statement = (
            select(flows, tasks)
            .select_from(flows.outerjoin(tasks, tasks.c.id == flows.c.task_id))
            .where(flows.c.task_id == bindparam("task_id"), flows.c.scheduled_at == bindparam("scheduled_at"))
        )
        if len(_run_reads) >= 4096:  # tables of layouts since reloaded
            _run_reads.clear()
        found = _run_reads[key] = (statement, tuple(c.name for c in flows.c), tuple(c.name for c in tasks.c))
    return found


_OPEN = tuple(s.value for s in FlowStatus if not s.terminal)
_ENDED = tuple(s.value for s in FlowStatus if s.terminal)


def _retrying(home: ShardTables) -> ColumnElement[bool]:
    """A flow whose run ended failed or timed out and that awaits its retry: ``pending`` with a run."""
    c = home.flows.c
    return and_(c.status == FlowStatus.PENDING.value, c.run.is_not(None))


class SqlRunRecords(SqlBase, RunRecords):
    async def write_run(
        self, expected: FlowStatus, update_: FlowUpdate, now_ms: int, *, expected_attempts: int | None = None
    ) -> bool:
        home = self._shard_of_task(update_.task_id)
        if home is None:
            return False
        c = home.flows.c
        values: dict[str, Any] = {
            "status": update_.status.value,
            "attempts": update_.attempts,
            "next_attempt_at": update_.next_attempt_at_ms,
            "last_error": clip_error(update_.last_error),
            "updated_at": now_ms,
        }
        if update_.run is not None:
            values["run"] = run_to_text(update_.run)
        attempts = update_.attempts if expected_attempts is None else expected_attempts
        statement = (
            update(home.flows)
            .where(
                c.task_id == update_.task_id,
                c.scheduled_at == update_.scheduled_at_ms,
                c.status == expected.value,
                c.attempts == attempts,
            )
            .values(values)
        )
        async with self._write(home.database.engine_url) as conn:
            result = await self._fenced(conn, home.database, statement, home.options)
            if not result.rowcount:
                return False
            moved = update_.reschedule
            if moved is not None:
                t = home.tasks.c
                await conn.execute(
                    update(home.tasks)
                    .where(
                        t.id == update_.task_id,
                        t.status == TaskStatus.ACTIVE.value,
                        t.next_run_at == moved.parked_at_ms,
                        t.version == moved.version,
                    )
                    .values(next_run_at=moved.next_run_at_ms, updated_at=now_ms),
                    execution_options=home.options,
                )
        return True

    async def decide_run(
        self, task_id: int, scheduled_at_ms: int, decide: Callable[[Flow | None, Task | None], RunWrite | None]
    ) -> bool:
        home = self._shard_of_task(task_id)
        url = None if home is None else home.database.engine_url
        pool = None if url is None else self._run_pools.get(url)
        if home is None or url is None or pool is None:  # SQLite, or MariaDB without a direct pool
            return await super().decide_run(task_id, scheduled_at_ms, decide)
        async with self._direct_call(url):
            return await sql_run_writes.decide_run(pool, home, self._fence_epoch, task_id, scheduled_at_ms, decide)

    async def flow_with_task(self, task_id: int, scheduled_at_ms: int) -> tuple[Flow | None, Task | None]:
        home = self._shard_of_task(task_id)
        if home is None:
            return None, None
        statement, flow_names, task_names = _run_read(home)
        async with self._connect(home.database.engine_url) as conn:
            result = await conn.execute(
                statement, {"task_id": task_id, "scheduled_at": scheduled_at_ms}, execution_options=home.options
            )
            row = result.first()
        if row is None:
            return None, None
        values = tuple(row)  # the flow's columns, then the task's (the two tables share names: id, status...)
        split = len(flow_names)
        flow = flow_from_row(dict(zip(flow_names, values[:split], strict=True)))
        if values[split + task_names.index("id")] is None:
            return flow, None
        return flow, task_from_row(dict(zip(task_names, values[split:], strict=True)))

    async def shards_with_live_runs(self, shards: Sequence[int]) -> set[int]:
        # the databases at once: a take-over waits for this read before it loads (nothing of it fires yet)
        return await self._shards_where(shards, lambda home: home.flows.c.status.in_(_LIVE), databases_at_once=True)

    async def live_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        home = self._shard(shard)
        c = home.flows.c
        rows: list[Any] = []
        async with self._connect(home.database.engine_url) as conn:
            for status in _LIVE:
                pick = select(home.flows).where(c.status == status, c.next_attempt_at.is_not(None))
                if after is not None:  # the range starts at the last key's deadline; the tuple drops what came before
                    pick = pick.where(
                        c.next_attempt_at >= after[0], tuple_(c.next_attempt_at, c.task_id, c.scheduled_at) > after
                    )
                pick = pick.order_by(c.next_attempt_at, c.task_id, c.scheduled_at).limit(limit)
                rows += (await conn.execute(pick, execution_options=home.options)).mappings().all()
            rows.sort(key=lambda r: (r["next_attempt_at"], r["task_id"], r["scheduled_at"]))
            return await _with_tasks(conn, home, [flow_from_row(row) for row in rows[:limit]])

    async def shards_with_retrying_runs(self, shards: Sequence[int]) -> set[int]:
        # the databases at once, beside shards_with_live_runs: a take-over waits for both
        return await self._shards_where(shards, _retrying, databases_at_once=True)

    async def retrying_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        home = self._shard(shard)
        c = home.flows.c
        pick = select(home.flows).where(_retrying(home), c.next_attempt_at.is_not(None))
        if after is not None:  # as live_runs: the range starts at the last key's retry time
            pick = pick.where(
                c.next_attempt_at >= after[0], tuple_(c.next_attempt_at, c.task_id, c.scheduled_at) > after
            )
        pick = pick.order_by(c.next_attempt_at, c.task_id, c.scheduled_at).limit(limit)
        async with self._connect(home.database.engine_url) as conn:
            rows = (await conn.execute(pick, execution_options=home.options)).mappings()
            return await _with_tasks(conn, home, [flow_from_row(row) for row in rows])

    async def open_flows_of_task(self, app_id: str, task_id: int, limit: int) -> list[Flow]:
        home = self._shard_of_task(task_id)
        if home is None:
            return []
        # along the index at the task, named: left to choose, SQLite walks the app's whole history in instant
        # order (flows_TT_app_at) for the ORDER BY ... LIMIT, ANALYZE or not, and MariaDB took the primary key's
        # range of the task's whole history (EXPLAIN); tests/contract/test_open_flows_read.py
        index = flows_indexes(home.flows.name)[1][0]
        hint = f"FORCE INDEX (`{index}`)" if self.layout.dialect == MYSQL else f'INDEXED BY "{index}"'
        statuses = ", ".join(f"'{status}'" for status in _OPEN)
        pick = text(
            f"SELECT * FROM {home.flows_sql} {hint} WHERE app_id = :app_id AND status IN ({statuses}) "
            "AND task_id = :task_id ORDER BY scheduled_at LIMIT :limit"
        )
        values = {"app_id": app_id, "task_id": task_id, "limit": limit}
        async with self._connect(home.database.engine_url) as conn:
            rows = (await conn.execute(pick, values, execution_options=home.options)).mappings().all()
        return [flow_from_row(row) for row in rows]

    async def parked_behind(self, shard: int, runs: Sequence[tuple[int, int]]) -> list[Flow]:
        if not runs:
            return []
        home = self._shard(shard)
        c = home.flows.c
        pick = select(home.flows).where(
            c.status == FlowStatus.PENDING.value,
            c.next_attempt_at.in_(sorted({deadline for _, deadline in runs})),
            c.task_id.in_(sorted({task_id for task_id, _ in runs})),
        )
        async with self._connect(home.database.engine_url) as conn:
            rows = (await conn.execute(pick, execution_options=home.options)).mappings().all()
        wanted = set(runs)
        flows = [flow for flow in map(flow_from_row, rows) if (flow.task_id, flow.next_attempt_at_ms) in wanted]
        return sorted(flows, key=lambda f: (f.task_id, f.scheduled_at_ms))

    async def clear_children_due(self, task_id: int, scheduled_at_ms: int) -> None:
        home = self._shard_of_task(task_id)
        if home is None:
            return
        c = home.flows.c
        ended = [s.value for s in FlowStatus if s.triggers_children]
        statement = (
            update(home.flows)
            .where(c.task_id == task_id, c.scheduled_at == scheduled_at_ms, c.status.in_(ended))
            .values(next_attempt_at=None)
        )
        async with self._write(home.database.engine_url) as conn:
            await conn.execute(statement, execution_options=home.options)

    async def append_run_log(self, task_id: int, scheduled_at_ms: int, text: str, lines: int, max_lines: int) -> bool:
        home = self._shard_of_task(task_id)
        if home is None:
            return False
        c = home.flows.c
        held = func.coalesce(c.run_log_lines, 0)
        purged = and_(c.run_log.is_(None), held > 0)  # the app's log retention cleared it: no append
        statement = (
            update(home.flows)
            .where(c.task_id == task_id, c.scheduled_at == scheduled_at_ms, held + lines <= max_lines, ~purged)
            .values(run_log=func.coalesce(c.run_log, "").concat(text), run_log_lines=held + lines)
        )
        async with self._write(home.database.engine_url) as conn:
            result = await self._fenced(conn, home.database, statement, home.options)
        return bool(result.rowcount)

    async def purge_run_logs(
        self, shard: int, app_id: str, finished_before_ms: int, limit: int, after: tuple[int, int] | None = None
    ) -> LogPurgePage:
        if limit <= 0:
            return LogPurgePage(0, 0, None, None)
        home = self._shard(shard)
        c = home.flows.c
        # Along flows_TT_app_at (app_id, scheduled_at, task_id; migration 0006): the app's range from `after`,
        # at most `limit` entries and their rows, never the app's flows before it. MariaDB is told the index
        # (its statistics are as old as the last ANALYZE: it might take app_status and sort); SQLite takes
        # it for the range and the order.
        read = select(c.scheduled_at, c.task_id, c.status, c.updated_at, c.run_log.is_not(None)).where(
            c.app_id == app_id, c.scheduled_at < finished_before_ms
        )
        if after is not None:  # the range starts at the last key's instant; the tuple drops what came before
            read = read.where(c.scheduled_at >= after[0], tuple_(c.scheduled_at, c.task_id) > after)
        read = read.order_by(c.scheduled_at, c.task_id).limit(limit)
        if self.layout.dialect == MYSQL:
            read = read.with_hint(home.flows, f"FORCE INDEX (`{search_flow_indexes(home.flows.name)[0][0]}`)")
        async with self._write(home.database.engine_url) as conn:
            rows = [tuple(row) for row in (await self._fenced(conn, home.database, read, home.options)).rows]
            unsettled = None
            due: list[tuple[int, int]] = []
            for at_ms, task_id, status, updated_at, has_log in rows:
                if status not in _ENDED or updated_at >= finished_before_ms:
                    unsettled = unsettled or (int(at_ms), int(task_id))
                elif has_log:
                    due.append((int(at_ms), int(task_id)))
            cleared = 0
            if due:
                # The rows read, as ranges of the key: each task's flows between the first and the last
                # instant due (the walk read every flow of the app between them, but for ties at the last
                # instant, which are as due as these if they pass the same guards); a list of pairs cost
                # MariaDB more a row the longer it was (tjobs.stores.sql.tasks purge).
                result = await conn.execute(
                    update(home.flows)
                    .where(
                        c.task_id.in_(sorted({task_id for _, task_id in due})),
                        c.scheduled_at.between(due[0][0], due[-1][0]),
                        c.app_id == app_id,
                        c.status.in_(_ENDED),
                        c.updated_at < finished_before_ms,
                        c.run_log.is_not(None),
                    )
                    .values(run_log=None),
                    execution_options=home.options,
                )
                cleared = int(result.rowcount)
        last = (int(rows[-1][0]), int(rows[-1][1])) if rows else None
        return LogPurgePage(cleared, len(rows), last, unsettled)


async def _with_tasks(conn: AsyncConnection, home: ShardTables, flows: list[Flow]) -> list[tuple[Flow, Task | None]]:
    """``flows`` (of ``home``'s shard) with their tasks (``None``: deleted), read by id in one statement."""
    if not flows:
        return []
    task_rows = await conn.execute(
        select(home.tasks).where(home.tasks.c.id.in_(sorted({f.task_id for f in flows}))),
        execution_options=home.options,
    )
    tasks = {task.id: task for task in (task_from_row(row) for row in task_rows.mappings())}
    return [(flow, tasks.get(flow.task_id)) for flow in flows]
