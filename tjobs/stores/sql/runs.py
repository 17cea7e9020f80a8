"""The SQL store's job runs (:class:`tjobs.stores.contracts.runs.RunRecords`): a run's transition as one
guarded ``UPDATE`` of its flow (and, for a fixed_delay task's run, one of its task, in the same
transaction), and a log append as one guarded ``UPDATE`` that concatenates in place."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, update

from tjobs.model import FlowStatus, FlowUpdate, TaskStatus
from tjobs.stores.contracts.runs import RunRecords
from tjobs.stores.flow_documents import run_to_text
from tjobs.stores.schema import clip_error
from tjobs.stores.sql.connections import SqlBase


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
        statement = (
            update(home.flows)
            .where(c.task_id == task_id, c.scheduled_at == scheduled_at_ms, held + lines <= max_lines)
            .values(run_log=func.coalesce(c.run_log, "").concat(text), run_log_lines=held + lines)
        )
        async with self._write(home.database.engine_url) as conn:
            result = await self._fenced(conn, home.database, statement, home.options)
        return bool(result.rowcount)
