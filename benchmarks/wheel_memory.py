"""Timing-wheel memory per loaded task, and the cost of add, cancel and advance.

The load is a typical cycle: ``entries`` tasks with realistic 63-bit ids (minted per shard, each a distinct
int object) and fire instants spread uniformly over ``span_ms`` ahead, added in random order (the cycle
load interleaves hundreds of shards, each read in time order; random order is the cache-unfriendly
bound). Each entry's ``fire_at_ms`` is also its ``scheduled_at_ms`` (one int object), as in the runner.

``bytes_per_task`` is traced by ``tracemalloc`` from before the ids are built to after the id list is
dropped, so it counts everything the wheel keeps alive: entries, the id and instant ints, the task-id
index, the slot nodes. ``tracemalloc`` records requested sizes; ``rss_bytes_per_task`` (Linux only) is
the resident-set growth over the same build without tracing, which adds allocator rounding and
fragmentation. ``full_gc_ms_when_loaded`` is one full ``gc.collect()`` with the wheel loaded (what the
wheel adds to the node's worst collector pause). Timings run without tracing, with the garbage
collector enabled as in a node; ``advance`` is called once per tick, as the runner does, and its
``p99``/``max`` show whether any single call stalls (a max far above p99 on a busy machine is
usually the OS scheduler, not the wheel).

``empty_jump_10min_us`` is one ``advance`` of an empty wheel ten minutes ahead; ``sparse_month_jump_ms``
one ``advance`` a month ahead over 199 entries four hours apart on 1 ms ticks (its unit test asserts the
slots it opens, not the time it takes).

``python -m benchmarks.wheel_memory [entries] [span_ms] [tick_ms]`` prints the figures as JSON.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import time
import tracemalloc
from typing import Any

from sharding import TaskIdGenerator
from tjobs.firing.wheel import TimingWheel

NOW_MS = 1_795_251_600_000  # 2026-11-21T09:00:00Z
_ID_AGE_MS = 90 * 86_400_000  # ids minted over the last 90 days
_SHARDS = 512


def _task_ids(count: int, rng: random.Random) -> list[int]:
    minter = TaskIdGenerator(_SHARDS)
    return [minter.mint(rng.randrange(_SHARDS), NOW_MS - rng.randrange(_ID_AGE_MS)) for _ in range(count)]


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _load(entries: int, span_ms: int, tick_ms: int, rng: random.Random) -> TimingWheel:
    """A wheel holding the only references to its ids and instants, as after a cycle load."""
    ids = _task_ids(entries, rng)
    wheel = TimingWheel(tick_ms, NOW_MS)
    add = wheel.add
    offset = rng.randrange
    for task_id in ids:
        fire_at_ms = NOW_MS + 1 + offset(span_ms)  # a fresh int per task, as read from a row
        add(task_id, fire_at_ms, fire_at_ms, 1)
    return wheel


def _resident(entries: int, span_ms: int, tick_ms: int, seed: int) -> tuple[float | None, float]:
    """Resident-set growth per task (first, in a fresh heap), and one full collection's time."""
    gc.collect()
    before = _rss_bytes()
    wheel = _load(entries, span_ms, tick_ms, random.Random(seed))
    gc.collect()
    after = _rss_bytes()
    started = time.perf_counter_ns()
    gc.collect()
    full_gc_ns = time.perf_counter_ns() - started
    per_task = None if before is None or after is None else (after - before) / len(wheel)
    return per_task, full_gc_ns / 1e6


def _traced_bytes_per_task(entries: int, span_ms: int, tick_ms: int, seed: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        wheel = _load(entries, span_ms, tick_ms, random.Random(seed))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / len(wheel)


def measure(entries: int = 1_000_000, span_ms: int = 300_000, tick_ms: int = 10, seed: int = 1) -> dict[str, Any]:
    """Memory and speed of a wheel loaded with ``entries`` tasks due within ``span_ms``."""
    if entries < 10 or span_ms < 1:
        raise ValueError("need at least 10 entries and a positive span")
    rss_per_task, full_gc_ms = _resident(entries, span_ms, tick_ms, seed)
    bytes_per_task = _traced_bytes_per_task(entries, span_ms, tick_ms, seed)

    rng = random.Random(seed)
    ids = _task_ids(entries, rng)
    fires = [NOW_MS + 1 + rng.randrange(span_ms) for _ in range(entries)]
    gc.collect()
    wheel = TimingWheel(tick_ms, NOW_MS)
    add = wheel.add
    started = time.perf_counter_ns()
    for task_id, fire_at_ms in zip(ids, fires, strict=True):
        add(task_id, fire_at_ms, fire_at_ms, 1)
    add_ns = (time.perf_counter_ns() - started) / entries
    loaded = len(wheel)

    doomed = rng.sample(ids, entries // 10)
    cancel = wheel.cancel
    started = time.perf_counter_ns()
    for task_id in doomed:
        cancel(task_id)
    cancel_ns = (time.perf_counter_ns() - started) / len(doomed)

    returned = 0
    advance_ns: list[int] = []
    now_ms = NOW_MS
    while now_ms < NOW_MS + span_ms + tick_ms:  # one advance per tick, as the runner's tick loop
        now_ms += tick_ms
        started = time.perf_counter_ns()
        returned += len(wheel.advance(now_ms))
        advance_ns.append(time.perf_counter_ns() - started)
    if returned != loaded - len(doomed) or len(wheel):
        raise AssertionError(f"wheel returned {returned} of {loaded - len(doomed)} entries")

    empty = TimingWheel(tick_ms, NOW_MS)
    started = time.perf_counter_ns()
    empty.advance(NOW_MS + 600_000)
    empty_jump_ns = time.perf_counter_ns() - started

    # A sparse wheel of 1 ms ticks (199 entries, one every 4 hours) jumping a month: 2.6 billion ticks,
    # of which the wheel visits only the occupied slots (tests/unit/test_wheel.py counts them).
    sparse = TimingWheel(1, NOW_MS)
    for task_id in range(1, 200):
        sparse.add(task_id, NOW_MS + task_id * 4 * 3_600_000, NOW_MS, 1)
    started = time.perf_counter_ns()
    sparse_due = len(sparse.advance(NOW_MS + 30 * 86_400_000))
    sparse_jump_ns = time.perf_counter_ns() - started
    if sparse_due != 180:
        raise AssertionError(f"the month's jump returned {sparse_due} of 180 entries")

    return {
        "entries": loaded,
        "span_ms": span_ms,
        "tick_ms": tick_ms,
        "bytes_per_task": round(bytes_per_task, 1),
        "rss_bytes_per_task": None if rss_per_task is None else round(rss_per_task, 1),
        "full_gc_ms_when_loaded": round(full_gc_ms, 1),
        "add_ns_per_op": round(add_ns),
        "cancel_ns_per_op": round(cancel_ns),
        "advance_ns_per_entry": round(sum(advance_ns) / max(returned, 1)),
        "advance_calls": len(advance_ns),
        "advance_p99_ms": round(sorted(advance_ns)[len(advance_ns) * 99 // 100] / 1e6, 3),
        "advance_max_ms": round(max(advance_ns) / 1e6, 2),
        "empty_jump_10min_us": round(empty_jump_ns / 1e3, 1),
        "sparse_month_jump_ms": round(sparse_jump_ns / 1e6, 2),
        "python": sys.version.split()[0],
    }


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    entries = int(args[0]) if len(args) > 0 else 1_000_000
    span_ms = int(args[1]) if len(args) > 1 else 300_000
    tick_ms = int(args[2]) if len(args) > 2 else 10
    print(json.dumps(measure(entries, span_ms, tick_ms), indent=2))


if __name__ == "__main__":
    main()
