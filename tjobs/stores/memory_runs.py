"""The memory twin's job runs (:class:`tjobs.stores.contracts.runs.RunRecords`), over
:class:`tjobs.stores.memory.MemoryTaskStore`'s flows and tasks."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import replace

import orjson

from tjobs.model import Flow, FlowStatus, FlowUpdate, Reschedule, Task, TaskStatus
from tjobs.stores.contracts.runs import LogPurgePage, RunRecords
from tjobs.stores.schema import clip_error


class MemoryRuns(RunRecords):
    _flows: list[dict[tuple[int, int], Flow]]  # per shard, by (task_id, scheduled_at_ms): the store's own
    _tasks: list[dict[int, Task]]

    @abstractmethod
    def _shard_of(self, task_id: int) -> int | None:
        """The shard of ``task_id`` (``None``: no shard of the topology)."""

    @abstractmethod
    def _check_shard(self, shard: int) -> None:
        """Raise ``ValueError`` for a shard outside the topology."""

    async def write_run(
        self, expected: FlowStatus, update: FlowUpdate, now_ms: int, *, expected_attempts: int | None = None
    ) -> bool:
        shard = self._shard_of(update.task_id)
        flow = None if shard is None else self._flows[shard].get((update.task_id, update.scheduled_at_ms))
        attempts = update.attempts if expected_attempts is None else expected_attempts
        if shard is None or flow is None or flow.status is not expected or flow.attempts != attempts:
            return False
        write_flow(flow, update, now_ms)
        reschedule(self._tasks[shard].get(update.task_id), update.reschedule, now_ms)
        return True

    async def flow_with_task(self, task_id: int, scheduled_at_ms: int) -> tuple[Flow | None, Task | None]:
        shard = self._shard_of(task_id)
        flow = None if shard is None else self._flows[shard].get((task_id, scheduled_at_ms))
        if shard is None or flow is None:
            return None, None
        return replace(flow), _copy(self._tasks[shard].get(task_id))

    async def shards_with_live_runs(self, shards: Sequence[int]) -> set[int]:
        for shard in shards:
            self._check_shard(shard)
        return {shard for shard in shards if any(flow.status.running for flow in self._flows[shard].values())}

    async def live_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        self._check_shard(shard)
        live = sorted(
            (flow.next_attempt_at_ms, flow.task_id, flow.scheduled_at_ms)
            for flow in self._flows[shard].values()
            if flow.status.running and flow.next_attempt_at_ms is not None
        )
        keys = [key for key in live if after is None or key > after][:limit]
        flows = [self._flows[shard][(task_id, at_ms)] for _, task_id, at_ms in keys]
        tasks = self._tasks[shard]
        return [(replace(flow), _copy(tasks.get(flow.task_id))) for flow in flows]

    async def shards_with_retrying_runs(self, shards: Sequence[int]) -> set[int]:
        for shard in shards:
            self._check_shard(shard)
        return {shard for shard in shards if any(_retrying(flow) for flow in self._flows[shard].values())}

    async def retrying_runs(
        self, shard: int, limit: int, after: tuple[int, int, int] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        self._check_shard(shard)
        waiting = sorted(
            (flow.next_attempt_at_ms, flow.task_id, flow.scheduled_at_ms)
            for flow in self._flows[shard].values()
            if _retrying(flow) and flow.next_attempt_at_ms is not None
        )
        keys = [key for key in waiting if after is None or key > after][:limit]
        flows = [self._flows[shard][(task_id, at_ms)] for _, task_id, at_ms in keys]
        tasks = self._tasks[shard]
        return [(replace(flow), _copy(tasks.get(flow.task_id))) for flow in flows]

    async def open_flows_of_task(self, app_id: str, task_id: int, limit: int) -> list[Flow]:
        shard = self._shard_of(task_id)
        if shard is None:
            return []
        flows = self._flows[shard].values()
        open_ = [f for f in flows if f.task_id == task_id and f.app_id == app_id and not f.status.terminal]
        return [replace(flow) for flow in sorted(open_, key=lambda f: f.scheduled_at_ms)[:limit]]

    async def parked_behind(self, shard: int, runs: Sequence[tuple[int, int]]) -> list[Flow]:
        self._check_shard(shard)
        wanted = set(runs)
        flows = self._flows[shard].values()
        parked = [f for f in flows if f.status is FlowStatus.PENDING and (f.task_id, f.next_attempt_at_ms) in wanted]
        return [replace(flow) for flow in sorted(parked, key=lambda f: (f.task_id, f.scheduled_at_ms))]

    async def clear_children_due(self, task_id: int, scheduled_at_ms: int) -> None:
        shard = self._shard_of(task_id)
        flow = None if shard is None else self._flows[shard].get((task_id, scheduled_at_ms))
        if flow is not None and flow.status.triggers_children:
            flow.next_attempt_at_ms = None

    async def append_run_log(self, task_id: int, scheduled_at_ms: int, text: str, lines: int, max_lines: int) -> bool:
        shard = self._shard_of(task_id)
        flow = None if shard is None else self._flows[shard].get((task_id, scheduled_at_ms))
        if flow is None or flow.run_log_purged or flow.run_log_lines + lines > max_lines:
            return False
        flow.run_log = (flow.run_log or "") + text
        flow.run_log_lines += lines
        return True

    async def purge_run_logs(
        self, shard: int, app_id: str, finished_before_ms: int, limit: int, after: tuple[int, int] | None = None
    ) -> LogPurgePage:
        self._check_shard(shard)
        flows = self._flows[shard]
        keys = sorted(
            (flow.scheduled_at_ms, flow.task_id)
            for flow in flows.values()
            if flow.app_id == app_id and flow.scheduled_at_ms < finished_before_ms
        )
        page = [key for key in keys if after is None or key > after][: max(limit, 0)]
        cleared = 0
        unsettled = None
        for at_ms, task_id in page:
            flow = flows[(task_id, at_ms)]
            if not (flow.status.terminal and flow.updated_at_ms < finished_before_ms):
                unsettled = unsettled or (at_ms, task_id)
            elif flow.run_log is not None:
                flow.run_log = None
                cleared += 1
        return LogPurgePage(cleared, len(page), page[-1] if page else None, unsettled)


def _retrying(flow: Flow) -> bool:
    """A flow whose run ended (failed or timed out) and that awaits its retry."""
    return flow.status is FlowStatus.PENDING and flow.run is not None


def _copy(task: Task | None) -> Task | None:
    """A copy sharing nothing mutable (the payload through JSON, as the store's own copies)."""
    return None if task is None else replace(task, payload=orjson.loads(orjson.dumps(task.payload)))


def write_flow(flow: Flow, update: FlowUpdate, now_ms: int) -> None:
    """What every write of ``update`` sets on its flow (a delivery's and a run's): status, attempts, next
    attempt, error (clipped), the run when it carries one, and ``updated_at_ms``."""
    flow.status = update.status
    flow.attempts = update.attempts
    flow.next_attempt_at_ms = update.next_attempt_at_ms
    flow.last_error = clip_error(update.last_error)
    if update.run is not None:
        flow.run = update.run
    flow.updated_at_ms = now_ms


def reschedule(task: Task | None, moved: Reschedule | None, now_ms: int) -> None:
    """A fixed_delay task's next run (:class:`tjobs.model.Reschedule`), set only where the task is still
    active and parked where its fire put it: the SQL stores' guarded ``UPDATE``."""
    if (
        moved is not None
        and task is not None
        and task.status is TaskStatus.ACTIVE
        and task.next_run_at_ms == moved.parked_at_ms
        and task.version == moved.version
    ):
        task.next_run_at_ms = moved.next_run_at_ms
        task.updated_at_ms = now_ms


def is_stale(flow: Flow, now_ms: int) -> bool:
    """Whether a compensation pass leases ``flow`` at ``now_ms``: open and its next attempt due, or ended
    with its children due (:meth:`tjobs.stores.contracts.FirePath.lease_stale_flows`)."""
    due = flow.next_attempt_at_ms
    return due is not None and due <= now_ms and (not flow.status.terminal or flow.status.triggers_children)
