"""The live runs that hold their task's overlap gate (:mod:`tjobs.pools.overlap`; README "Job runs").

A pool flow whose task must not overlap itself, once its executor accepted it as a run, still counts as
running for the gate of the node that sent it, until the run ends: its executor's final report, its
cancel or its timeout. Any node may write that end (a report reaches whichever node the executor's
request reached; the shard's owner times a run out), so the sending node reads the stored status of
its watched runs every ``interval_s`` and tells ``ended`` of each flow that is final there (or gone).
A run that failed and is retried stays watched while its retry is on another node (its flow is
``pending`` or running again): the gate holds until the flow's final end. A retry that comes back to
this node's delivery is taken off the watch (:meth:`RunWatch.discard`): delivery tracks it again.
A fire queued behind a watched run is parked in the store until the run's deadline
(:meth:`RunWatch.deadline_of`): the compensator leaves it alone meanwhile (a lease would count an
attempt on it every pass), and should this node stop, the shard's next owner sends it then.

One read per watched run a round, only while some run is watched; nothing on the fire path."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tjobs.delivery.outcomes import FlowReader

logger = logging.getLogger(__name__)

RUN_WATCH_S = 1.0


class RunWatch:
    def __init__(self, reader: FlowReader, interval_s: float, ended: Callable[[int, str], None]) -> None:
        """``ended(task_id, flow_id)`` is told once for each watched run found final."""
        self._reader = reader
        self._interval_s = interval_s
        self._ended = ended
        self._runs: dict[str, tuple[int, int, int]] = {}  # flow id -> (task id, scheduled at, deadline)
        self._loop: asyncio.Task[None] | None = None

    def __contains__(self, flow_id: object) -> bool:
        return flow_id in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def add(self, flow_id: str, task_id: int, scheduled_at_ms: int, deadline_ms: int) -> None:
        self._runs[flow_id] = (task_id, scheduled_at_ms, deadline_ms)
        if self._loop is None or self._loop.done():
            self._loop = asyncio.get_running_loop().create_task(self._watch())

    def deadline_of(self, flow_id: str | None) -> int | None:
        """The deadline of the watched run ``flow_id`` as it started here (``None``: not watched)."""
        run = self._runs.get(flow_id) if flow_id is not None else None
        return None if run is None else run[2]

    def discard(self, flow_id: str) -> None:
        self._runs.pop(flow_id, None)

    async def stop(self) -> None:
        """Forget every run (the gate they held is this node's memory, gone with it)."""
        self._runs.clear()
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None

    async def _watch(self) -> None:
        while self._runs:
            await asyncio.sleep(self._interval_s)
            for flow_id, (task_id, scheduled_at_ms, _) in list(self._runs.items()):
                try:
                    stored = await self._reader.get_flow(task_id, scheduled_at_ms)
                except Exception:  # the store is down: the run stays watched, read again next round
                    logger.warning(
                        "could not read watched run %s", flow_id, exc_info=True, extra={"action": "run_watch_failed"}
                    )
                    break
                if (stored is None or stored.status.terminal) and self._runs.get(flow_id) is not None:
                    del self._runs[flow_id]
                    self._ended(task_id, flow_id)
