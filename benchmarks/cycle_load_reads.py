"""One cycle load of the job runner: rows read and wall time, reading again what is already loaded or not.

The cycle load raises the horizon by one cycle ``load_lead_s`` before the cycle starts. Until a1903b4 it
read every active task due before the new horizon, so the tasks due in the lead (``[now, old
horizon)``), already in the wheel, were read again and ignored; since then it reads the overdue tasks
and the new cycle ``[old horizon, new horizon)`` only (tjobs/firing/runner.py, invariant 7 in
docs/design.md). This stores ``--loaded`` tasks due within the lead and ``--next-cycle`` tasks in
the next cycle across every shard, starts a runner on a frozen clock just before its cycle load
(so nothing fires and its own cycle loop stays asleep), lets the take-over load put the lead's tasks
in the wheel, then times the runner's load of the next cycle both ways, interleaved: as the cycle
load runs it now (``skip``) and the full read it replaced (``full``, what take-over loads still do):
wall time and this process's CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from benchmarks.cycle_load import _fill
from tjobs.clock import ManualClock, SystemClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.firing.planner import FirePlanner, FirePolicy
from tjobs.firing.runner import JobRunner
from tjobs.settings import SchedulerSettings, StorageSettings
from tjobs.stores import create_store
from tjobs.stores.base import TaskStore


async def measure(
    store: TaskStore,
    loaded: int,
    next_cycle: int,
    repeats: int,
    modes: tuple[str, ...] = ("full", "skip"),
    cycle_s: int = 300,
    lead_s: int = 30,
) -> dict[str, Any]:
    cycle_ms, lead_ms = cycle_s * 1000, lead_s * 1000
    real_now = SystemClock().now_ms()
    horizon_ms = (real_now // cycle_ms + 2) * cycle_ms
    wake_ms = horizon_ms - lead_ms  # the cycle load's start
    now_ms = wake_ms - 1  # one millisecond before it: the runner's own cycle loop stays asleep
    # the lead's tasks spread over (now, old horizon), the next cycle's over [old horizon, new horizon)
    await _fill(store, loaded, 0, lambda i: wake_ms + (i * lead_ms) // max(loaded, 1), real_now)
    await _fill(
        store, next_cycle, loaded, lambda i: horizon_ms + ((i - loaded) * cycle_ms) // max(next_cycle, 1), real_now
    )

    settings = SchedulerSettings(cycle_s=cycle_s, load_lead_s=lead_s)
    clock = ManualClock(now_ms)
    coordinator = LocalCoordinator(store.topology.shard_count)
    runner = JobRunner(store, coordinator, FirePlanner(FirePolicy(60_000, 100)), lambda _t, _f: None, settings, clock)
    await runner.start()
    try:
        started = time.perf_counter()
        await coordinator.start(runner.set_owned)  # the take-over load: everything before the old horizon
        take_over_s = time.perf_counter() - started
        assert runner.horizon_ms == horizon_ms and len(runner.wheel) == loaded, (runner.horizon_ms, len(runner.wheel))
        shards = sorted(runner.firing_jobs())
        new_horizon_ms = horizon_ms + cycle_ms
        runs: dict[str, list[tuple[float, float, int]]] = {mode: [] for mode in modes}
        await runner._load(shards, new_horizon_ms, (clock.now_ms(), horizon_ms))  # warm-up: the next cycle in the wheel
        for _ in range(repeats):
            for mode, skip in (("full", None), ("skip", (clock.now_ms(), horizon_ms))):
                if mode not in modes:
                    continue
                before = runner.stats.loaded
                started, cpu_started = time.perf_counter(), time.process_time()
                # the call _cycle_loop makes (skip), and the one it made before a1903b4 (full)
                await runner._load(shards, new_horizon_ms, skip)
                runs[mode].append(
                    (time.perf_counter() - started, time.process_time() - cpu_started, runner.stats.loaded - before)
                )
        return {
            "shards": len(shards),
            "loaded_in_lead": loaded,
            "next_cycle": next_cycle,
            "take_over_load_s": round(take_over_s, 3),
            **{
                mode: {
                    "rows_read": times[0][2],
                    "median_s": round(statistics.median(t for t, _, _ in times), 3),
                    # this process's CPU (the runner, the driver, the event loop), not the server's
                    "median_cpu_s": round(statistics.median(c for _, c, _ in times), 3),
                    "runs_s": [round(t, 3) for t, _, _ in times],
                }
                for mode, times in runs.items()
            },
        }
    finally:
        await runner.stop()
        await coordinator.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks cycle_load_reads", description=__doc__)
    parser.add_argument("--storage", default="memory://", help="storage URL (memory://, SQLite or MariaDB)")
    parser.add_argument("--topology", default="8x4x16")
    parser.add_argument("--prefix", default="tjcycle", help="database prefix for the run (dropped afterwards)")
    parser.add_argument("--loaded", type=int, default=30_000, help="tasks due within the lead, loaded before")
    parser.add_argument("--next-cycle", type=int, default=30_000, help="tasks due in the next cycle")
    parser.add_argument("--repeats", type=int, default=5, help="loads of each kind, interleaved")
    parser.add_argument("--mode", choices=("full", "skip"), action="append", help="only these (default: both)")
    args = parser.parse_args()
    settings = StorageSettings(urls=[args.storage], topology=args.topology, database_prefix=args.prefix)

    async def run() -> dict[str, Any]:
        sql = not args.storage.startswith("memory:")
        if sql:
            from tjobs.stores.migrate import migrate

            await migrate(settings)
        store = create_store(settings)
        await store.start()
        try:
            modes = tuple(args.mode or ("full", "skip"))
            return await measure(store, args.loaded, args.next_cycle, args.repeats, modes)
        finally:
            await store.close()
            if sql:
                from testkit.databases import drop_databases

                drop_databases(settings)

    print(json.dumps(asyncio.run(run())))


if __name__ == "__main__":
    main()
