"""Cost of the fire path's schedule step: ``parse_schedule(stored).next_fire(t)``.

Run ``python -m benchmarks.schedules``. For each stored schedule it times, after warm-up (parsed
expressions and zone years are cached), one ``next_fire`` from a fresh instant per call, walking the
schedule forward as the fire path does, and prints the median of several rounds in microseconds.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from tjobs.schedules.parsing import parse_schedule

START_MS = 1_790_000_000_000  # 2026-09-21
CASES: list[dict[str, Any]] = [
    {"kind": "cron", "expr": "0 9 * * *", "timezone": "Asia/Shanghai"},
    {"kind": "cron", "expr": "30 2 * * *", "timezone": "America/New_York", "dst_gap": "shift"},
    {"kind": "cron", "expr": "*/15 * * * *", "timezone": "Europe/Berlin", "dst_overlap": "twice"},
    {"kind": "cron", "expr": "0 12 * * MON-FRI", "timezone": "Australia/Lord_Howe"},
    {"kind": "cron", "expr": "*/5 * * * * *", "timezone": "UTC"},
    {"kind": "cron", "expr": "0 0 L * *", "timezone": "Africa/Cairo"},
    {"kind": "interval", "every_ms": 30_000, "start_at_ms": START_MS},
]


def time_next_fire(stored: dict[str, Any], fires: int = 2000, rounds: int = 5) -> float:
    """Median microseconds per ``parse_schedule(stored).next_fire(previous_fire)``."""
    instants = []
    cursor: int | None = START_MS
    schedule = parse_schedule(stored)
    for _ in range(fires):  # warm-up, and the instants to time from
        assert cursor is not None
        instants.append(cursor)
        cursor = schedule.next_fire(cursor)
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        for instant in instants:
            parse_schedule(stored).next_fire(instant)
        samples.append((time.perf_counter() - began) / fires * 1e6)
    return statistics.median(samples)


def main() -> None:
    for stored in CASES:
        label = stored.get("expr", stored["kind"])
        print(f"{label:18} {stored.get('timezone', ''):22} {time_next_fire(stored):6.1f} µs")


if __name__ == "__main__":
    main()
