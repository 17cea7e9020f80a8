"""The faults, each an async function of the :class:`Stage` that breaks something on real processes and
returns the :class:`FaultWindow` it caused. Node 1 is the API entry and is never the victim; MariaDB
server 0 holds the apps table, so the server faults hit server 1 (the second of the two).

Whatever a fault stops it resumes in a ``finally`` (a failing test never leaves a frozen server behind).
"""

from __future__ import annotations

import asyncio
import signal

import httpx

from testkit.cluster_rig import now_ms
from tests.chaos.receiver import ReceiverFaults
from tests.chaos.scenario import Fault, FaultWindow, Stage

VICTIM_NODE = 2
VICTIM_SERVER = 1
LEASE_TTL_MS = 5000


async def _victim_jobs(stage: Stage, index: int) -> frozenset[int]:
    return frozenset(int(job) for job in (await stage.api.view(stage.rig.nodes[index]))["jobs"])


def kill_node(index: int = VICTIM_NODE) -> Fault:
    """kill -9 of a primary. The window is the lease TTL after the kill: nobody owns its jobs meanwhile."""

    async def fault(stage: Stage) -> FaultWindow:
        jobs = await _victim_jobs(stage, index)
        killed_ms = now_ms()
        await asyncio.to_thread(stage.rig.kill, index)
        return FaultWindow("kill -9 primary", killed_ms, killed_ms + LEASE_TTL_MS, victim_node=index, victim_jobs=jobs)

    return fault


def freeze_node(index: int = VICTIM_NODE, frozen_s: float = 10.0) -> Fault:
    """SIGSTOP of a primary for ``frozen_s`` (past its lease TTL), then SIGCONT."""

    async def fault(stage: Stage) -> FaultWindow:
        jobs = await _victim_jobs(stage, index)
        stopped_ms = now_ms()
        stage.rig.signal(index, signal.SIGSTOP)
        try:
            await asyncio.sleep(frozen_s)
        finally:
            stage.rig.signal(index, signal.SIGCONT)
        resumed_ms = now_ms()
        return FaultWindow(
            f"SIGSTOP primary {frozen_s:g}s",
            stopped_ms,
            resumed_ms,
            victim_node=index,
            victim_jobs=jobs,
            victim_owns_again_ms=await _owns_jobs_again(stage, index),
        )

    return fault


async def _owns_jobs_again(stage: Stage, index: int, timeout_s: float = 20.0) -> int | None:
    """When node ``index`` (just resumed) first reports owned jobs while not fenced, polled every 100 ms;
    ``None`` if not within ``timeout_s``. (Right after SIGCONT its view may still list the jobs it held,
    with a fence reason set: that is not owning them.)"""
    deadline_ms = now_ms() + int(timeout_s * 1000)
    while now_ms() < deadline_ms:
        try:
            view = await stage.api.view(stage.rig.nodes[index])
            if view.get("jobs") and view.get("owned_jobs") and view.get("fenced") is None:
                return now_ms()
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.1)
    return None


def terminate_node(index: int = VICTIM_NODE) -> Fault:
    """SIGTERM of a primary: it drains and hands its jobs over. The window runs until it exited, and at
    least a lease TTL (the longest its jobs could wait for the backups)."""

    async def fault(stage: Stage) -> FaultWindow:
        jobs = await _victim_jobs(stage, index)
        started_ms = now_ms()
        await asyncio.to_thread(stage.rig.stop, index, 30.0)
        return FaultWindow(
            "SIGTERM hand-off",
            started_ms,
            max(now_ms(), started_ms + LEASE_TTL_MS),
            victim_node=index,
            victim_jobs=jobs,
        )

    return fault


def kill_etcd(outage_s: float = 7.0) -> Fault:
    """kill -9 of etcd, restarted after ``outage_s`` (past the lease TTL)."""

    async def fault(stage: Stage) -> FaultWindow:
        started_ms = now_ms()
        await asyncio.to_thread(stage.rig.infra.kill_service, "etcd")
        await asyncio.sleep(outage_s)
        await asyncio.to_thread(stage.rig.infra.ensure)
        return FaultWindow(f"etcd kill -9 {outage_s:g}s", started_ms, now_ms())

    return fault


def freeze_etcd(outage_s: float = 7.0) -> Fault:
    async def fault(stage: Stage) -> FaultWindow:
        started_ms = now_ms()
        stage.rig.infra.signal_service("etcd", signal.SIGSTOP)
        try:
            await asyncio.sleep(outage_s)
        finally:
            stage.rig.infra.signal_service("etcd", signal.SIGCONT)
        return FaultWindow(f"etcd SIGSTOP {outage_s:g}s", started_ms, now_ms())

    return fault


def kill_mariadb(server: int = VICTIM_SERVER, outage_s: float = 15.0) -> Fault:
    """kill -9 of one of the two MariaDB servers, restarted (crash recovery) after ``outage_s``."""

    async def fault(stage: Stage) -> FaultWindow:
        name = stage.rig.infra.mariadb(server)
        started_ms = now_ms()
        await asyncio.to_thread(stage.rig.infra.kill_service, name)
        await asyncio.sleep(outage_s)
        await asyncio.to_thread(stage.rig.infra.ensure)
        return FaultWindow(f"MariaDB {server} kill -9 {outage_s:g}s", started_ms, now_ms(), victim_server=server)

    return fault


def freeze_mariadb(server: int = VICTIM_SERVER, outage_s: float = 15.0) -> Fault:
    """SIGSTOP of one of the two MariaDB servers for ``outage_s``: connections hang instead of failing."""

    async def fault(stage: Stage) -> FaultWindow:
        name = stage.rig.infra.mariadb(server)
        started_ms = now_ms()
        stage.rig.infra.signal_service(name, signal.SIGSTOP)
        try:
            await asyncio.sleep(outage_s)
        finally:
            stage.rig.infra.signal_service(name, signal.SIGCONT)
        return FaultWindow(f"MariaDB {server} SIGSTOP {outage_s:g}s", started_ms, now_ms(), victim_server=server)

    return fault


def lock_rows(server: int = VICTIM_SERVER, hold_s: float = 13.0) -> Fault:
    """``BEGIN; SELECT ... FOR UPDATE; DO SLEEP(hold_s)`` over every task row of the app on one server:
    fire transactions on it wait on the locks (and fail after innodb_lock_wait_timeout, 10 s)."""

    async def fault(stage: Stage) -> FaultWindow:
        loop = asyncio.get_running_loop()
        locked: asyncio.Future[int] = loop.create_future()

        def on_locked(rows: int) -> None:
            loop.call_soon_threadsafe(locked.set_result, rows)

        holder = asyncio.create_task(
            asyncio.to_thread(stage.rig.hold_row_locks, server, stage.client.app_id, hold_s, on_locked)
        )
        rows = await asyncio.wait_for(locked, 30)
        started_ms = now_ms()
        await holder
        window = FaultWindow(f"row lock on MariaDB {server} {hold_s:g}s", started_ms, now_ms(), victim_server=server)
        assert rows > 0, "the lock holder found no task rows on the server"
        return window

    return fault


def flush_redis(flushes: int = 3, every_s: float = 4.0) -> Fault:
    """FLUSHALL of the hot tier ``flushes`` times, ``every_s`` apart (the one-shot stream is in flight)."""

    async def fault(stage: Stage) -> FaultWindow:
        started_ms = now_ms()
        for count in range(flushes):
            if count:
                await asyncio.sleep(every_s)
            await asyncio.to_thread(stage.rig.infra.flush_redis)
        return FaultWindow(f"Redis FLUSHALL x{flushes}", started_ms, now_ms())

    return fault


TEN_PERCENT_5XX_ONE_PERCENT_TIMEOUTS = ReceiverFaults(error_share=0.10, timeout_share=0.01)


def failing_receiver(faults: ReceiverFaults = TEN_PERCENT_5XX_ONE_PERCENT_TIMEOUTS) -> Fault:
    """The receiver answers 10 % of requests 500 and lets 1 % time out, until the window's last instant."""

    async def fault(stage: Stage) -> FaultWindow:
        started_ms = now_ms()
        stage.receiver.faults = faults
        try:
            await asyncio.sleep(max(stage.window_end_ms - now_ms(), 0) / 1000)
        finally:
            stage.receiver.faults = None
        return FaultWindow(
            f"receiver {faults.error_share:.0%} 5xx + {faults.timeout_share:.0%} timeouts", started_ms, now_ms()
        )

    return fault
