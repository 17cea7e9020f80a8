"""The soak's nemesis: runs the planned faults (:mod:`tests.chaos.soak.schedule`) on the
:class:`SoakCluster` at their times, records each as a :class:`FaultRecord`, and undoes each in a
``finally`` (an interrupted soak leaves no node frozen, cut off or skewed).

A fault's record runs from when it struck to when it was undone (for a kill: until the restarted node
answers ``/healthz``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence

from testkit.cluster_rig import Api, now_ms
from tests.chaos.soak.cluster import CUT_SERVER, SoakCluster
from tests.chaos.soak.report import FaultRecord
from tests.chaos.soak.schedule import (
    CLOCK_AHEAD,
    CLOCK_BEHIND,
    CLOCK_STEP_S,
    KILL,
    PARTITION,
    ROW_LOCK,
    STOP,
    PlannedFault,
)

log = logging.getLogger("soak.nemesis")


class Nemesis:
    def __init__(self, cluster: SoakCluster, api: Api, current_app: Callable[[], str]) -> None:
        self.cluster = cluster
        self.api = api
        self.current_app = current_app  # the app whose task rows a row lock holds
        self.records: list[FaultRecord] = []
        self.running: PlannedFault | None = None
        self.running_since_ms = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def run(self, plan: Sequence[PlannedFault], started_ms: int) -> None:
        for planned in plan:
            wait_ms = started_ms + int(planned.at_s * 1000) - now_ms()
            if wait_ms > 0:
                await asyncio.sleep(wait_ms / 1000)
            self.running, self.running_since_ms = planned, now_ms()
            self._idle.clear()
            try:
                record = await self.strike(planned)
            except Exception as error:  # a fault that could not be done is reported, not fatal
                log.exception("fault %s on node %s failed", planned.kind, planned.victim_node)
                record = FaultRecord(
                    planned.kind, self.running_since_ms, now_ms(), planned.victim_node, detail=f"failed: {error!r}"
                )
            finally:
                self.running = None
                self._idle.set()
            self.records.append(record)
            log.info(
                "fault %s node=%s %d ms %s",
                record.kind,
                record.victim_node,
                record.end_ms - record.start_ms,
                record.detail,
            )

    async def settled_after(self, instant_ms: int) -> int:
        """Once no fault that struck by ``instant_ms`` is still running: the latest end of those (0: none)."""
        while self.running is not None and self.running_since_ms <= instant_ms:
            await self._idle.wait()
            await asyncio.sleep(0)
        return max((r.end_ms for r in self.records if r.start_ms <= instant_ms), default=0)

    def quiet_for_ms(self) -> int | None:
        """How long ago the last fault ended (about now in ms when none has run yet); ``None`` while one runs."""
        if self.running is not None:
            return None
        return now_ms() - max((r.end_ms for r in self.records), default=0)

    async def strike(self, planned: PlannedFault) -> FaultRecord:
        cluster, node = self.cluster, planned.victim_node
        if planned.kind == ROW_LOCK:
            return await self._lock_rows(planned.duration_s)
        assert node is not None
        if planned.kind == KILL:
            started = now_ms()
            await asyncio.to_thread(cluster.rig.kill, node)
            await asyncio.sleep(planned.duration_s)
            cluster.start(node)
            await self.api.wait_healthy(cluster.rig.nodes[node], timeout_s=120)
            return FaultRecord(KILL, started, now_ms(), node, detail=f"restarted as pid {cluster.pid(node)}")
        if planned.kind == STOP:
            started = now_ms()
            cluster.rig.signal(node, signal.SIGSTOP)
            try:
                await asyncio.sleep(planned.duration_s)
            finally:
                cluster.rig.signal(node, signal.SIGCONT)
            return FaultRecord(STOP, started, now_ms(), node)
        if planned.kind == PARTITION:
            started = now_ms()
            cluster.proxy.set_mode("blackhole", f"node{node}")
            try:
                await asyncio.sleep(planned.duration_s)
            finally:
                cluster.proxy.set_mode("pass", f"node{node}")
            return FaultRecord(PARTITION, started, now_ms(), node, CUT_SERVER)
        if planned.kind in (CLOCK_AHEAD, CLOCK_BEHIND):
            started = now_ms()
            cluster.step_clock(node, CLOCK_STEP_S[planned.kind])
            try:
                await asyncio.sleep(planned.duration_s)
            finally:
                cluster.step_clock(node, 0)
            return FaultRecord(planned.kind, started, now_ms(), node, detail=f"{CLOCK_STEP_S[planned.kind]:+g} s")
        raise ValueError(f"unknown fault kind {planned.kind}")

    async def _lock_rows(self, hold_s: float) -> FaultRecord:
        loop = asyncio.get_running_loop()
        locked: asyncio.Future[int] = loop.create_future()

        def on_locked(rows: int) -> None:
            loop.call_soon_threadsafe(locked.set_result, rows)

        # from the first SELECT ... FOR UPDATE: the locks are taken shard by shard before on_locked
        started = now_ms()
        holder = asyncio.create_task(
            asyncio.to_thread(self.cluster.rig.hold_row_locks, CUT_SERVER, self.current_app(), hold_s, on_locked)
        )
        rows = await asyncio.wait_for(locked, 30)
        await holder
        return FaultRecord(ROW_LOCK, started, now_ms(), victim_server=CUT_SERVER, detail=f"{rows} task rows")
