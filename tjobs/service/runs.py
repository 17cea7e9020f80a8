"""Job runs for the API (README "Job runs", docs/targets.md "Runs"): an executor's reports and log lines,
and an owner's cancel. Each reads the flow, decides with :mod:`tjobs.delivery.run_reports` and writes
under the store's compare-and-set (:class:`tjobs.stores.contracts.runs.RunRecords`), reading again when
another writer came first; so any node may take any report, and a run ends once."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tjobs.clock import Clock
from tjobs.delivery.child_triggers import with_children
from tjobs.delivery.run_log import parse_log_lines
from tjobs.delivery.run_reports import Transition, cancel_transition, parse_report, report_transition
from tjobs.delivery.run_writes import after_write, write_transition, written
from tjobs.errors import Conflict, NotFound
from tjobs.hot_tier.base import TaskChange
from tjobs.model import App, Flow, FlowUpdate, Task
from tjobs.observability.observer import NO_OBSERVER, FireObserver
from tjobs.settings import RunSettings
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.runs import RunWrite

logger = logging.getLogger(__name__)

DecideRun = Callable[[Flow | None, Task | None], RunWrite | None]  # a report's choice from its flow and task as read
RACES = 8  # reads again after a lost compare-and-set at most this often (each loss is another writer's win)


@dataclass(frozen=True, slots=True)
class RunAnswer:
    """The flow after a report or a cancel; ``repeated``: it repeated the one that ended the run."""

    flow: Flow
    repeated: bool = False

    @property
    def cancel_requested(self) -> bool:
        run = self.flow.run
        return run is not None and run.cancel_requested_at_ms is not None


@dataclass(frozen=True, slots=True)
class LogAnswer:
    appended: int
    dropped: int  # past runs.max_log_lines
    truncated: int  # cut to runs.max_log_line_bytes
    lines: int  # the flow's log lines now


class RunService:
    def __init__(
        self,
        store: TaskStore,
        settings: RunSettings,
        clock: Clock,
        read_flow: Callable[[App, str], Awaitable[Flow]],
        *,
        flow_sink: Callable[[Task, Flow], None] | None = None,
        task_changes: Callable[[TaskChange], Awaitable[None]] | None = None,
        ended: Callable[[FlowUpdate], Awaitable[None]] | None = None,
        observer: FireObserver = NO_OBSERVER,
        decide_run: Callable[[str, DecideRun], Awaitable[bool]] | None = None,
    ) -> None:
        """``read_flow`` reads an app's flow by id (404 for another app's); ``flow_sink`` delivers a
        run's retry (the deliverer's ``deliver``); ``task_changes`` (the hot tier's publish) is told a
        fixed_delay task's next run that a run's end set; ``ended``, a run's end that triggers children;
        ``observer`` (the node's: metrics and service levels), every run transition written; ``decide_run``
        reads the flow an id names (404 where none) with its task and writes what a report decided from
        them in one call (:meth:`tjobs.stores.contracts.runs.RunRecords.decide_run`; without it: two reads,
        then the write)."""
        self._store = store
        self._settings = settings
        self._clock = clock
        self._read_flow = read_flow
        self._decide_run = decide_run
        self._flow_sink = flow_sink
        self._task_changes = task_changes
        self._ended = ended
        self._observer = observer

    async def report(self, app: App, flow_id: str, body: Any) -> RunAnswer:
        report = parse_report(body, self._settings)
        seen: list[tuple[Flow, Task | None, Transition | None, FlowUpdate | None, int]] = []  # each read's choice
        for _ in range(RACES):

            def decide(flow: Flow | None, task: Task | None) -> RunWrite | None:
                if flow is None or flow.app_id != app.id:
                    raise NotFound("flow", flow_id)
                now_ms = self._clock.now_ms()
                transition = report_transition(flow, task, report, now_ms, self._settings.timeout_ms)
                # written with the marker that its children are due
                update = None if transition is None else with_children(task, transition.update, now_ms)
                seen.append((flow, task, transition, update, now_ms))
                if transition is None or update is None:
                    return None
                return RunWrite(transition.expected, update, now_ms, transition.expected_attempts)

            wrote = await self._decide(app, flow_id, decide)
            flow, task, transition, update, now_ms = seen[-1]
            if transition is None or update is None:
                return RunAnswer(flow, repeated=True)
            if wrote:
                await after_write(
                    transition, update, task, flow, now_ms, self._flow_sink, self._task_changes,
                    ended=self._ended, observer=self._observer,
                )  # fmt: skip
                return RunAnswer(await self._answered(update, now_ms, flow, app, flow_id))
        raise Conflict(f"flow {flow_id} changed {RACES} times while the report was written; send it again")

    async def cancel(self, app: App, flow_id: str) -> RunAnswer:
        grace_ms = int(self._settings.cancel_grace_s * 1000)
        for _ in range(RACES):
            flow = await self._read_flow(app, flow_id)
            now_ms = self._clock.now_ms()
            transition = cancel_transition(flow, now_ms, grace_ms)
            if transition is None:
                return RunAnswer(flow, repeated=True)
            answered = await self._write(transition, None, now_ms, flow, app, flow_id)
            if answered is not None:
                logger.info(
                    "cancel of flow %s's run asked",
                    flow_id,
                    extra={"action": "run_cancel_requested", "flow_id": flow_id},
                )
                return RunAnswer(answered)
        raise Conflict(f"flow {flow_id} changed {RACES} times while the cancel was written; send it again")

    async def append_log(self, app: App, flow_id: str, body: Any) -> LogAnswer:
        lines = parse_log_lines(body, self._settings)
        cap = self._settings.max_log_lines
        for _ in range(RACES):
            flow = await self._read_flow(app, flow_id)
            count = max(0, min(len(lines.lines), cap - flow.run_log_lines))
            if count == 0 or flow.run_log_purged:  # full, or its app's log retention purged it: dropped
                return LogAnswer(0, len(lines.lines), lines.truncated, flow.run_log_lines)
            attempt = lines.attempt or (flow.run.attempt if flow.run is not None else max(flow.attempts, 1))
            text = lines.encoded(self._clock.now_ms(), attempt, count)
            if await self._store.append_run_log(flow.task_id, flow.scheduled_at_ms, text, count, cap):
                return LogAnswer(count, len(lines.lines) - count, lines.truncated, flow.run_log_lines + count)
        raise Conflict(f"flow {flow_id}'s log grew {RACES} times while these lines were written; send them again")

    async def _decide(self, app: App, flow_id: str, decide: DecideRun) -> bool:
        if self._decide_run is not None:
            return await self._decide_run(flow_id, decide)
        flow = await self._read_flow(app, flow_id)
        chosen = decide(flow, await self._store.get_task(flow.task_id))
        if chosen is None:
            return False
        return await self._store.write_run(
            chosen.expected, chosen.update, chosen.now_ms, expected_attempts=chosen.expected_attempts
        )

    async def _write(
        self, transition: Transition, task: Task | None, now_ms: int, flow: Flow, app: App, flow_id: str
    ) -> Flow | None:
        """Write ``transition``; the flow as written (``None``: another writer came first). The flow read
        with the change is the answer (issue 30: reading it back cost a read per report); an ending that
        triggered children is read back, as :mod:`tjobs.service.child_flows` clears its marker."""
        update = await write_transition(
            self._store,
            transition,
            task,
            flow,
            now_ms,
            self._flow_sink,
            self._task_changes,
            ended=self._ended,
            observer=self._observer,
        )
        if update is None:
            return None
        return await self._answered(update, now_ms, flow, app, flow_id)

    async def _answered(self, update: FlowUpdate, now_ms: int, flow: Flow, app: App, flow_id: str) -> Flow:
        """The flow once ``update`` is written on it (as read): see :meth:`_write`."""
        if update.children is not None:
            return await self._read_flow(app, flow_id)
        return written(flow, update, now_ms)
