"""The cycle-load-tail bench's arithmetic: the loads read off the node's log, slices with and without one."""

from __future__ import annotations

import orjson

from benchmarks.cycle_load_tail import cpu_by_load, loads_from_log, slice_figures
from benchmarks.report import Delivery


def _log(ts: float, message: str, action: str) -> str:
    return orjson.dumps({"ts": ts, "level": "info", "message": message, "action": action}).decode()


def test_the_loads_are_read_off_the_cycle_loaded_lines() -> None:
    lines = [
        _log(100.5, "loaded 120000 tasks due before 5 (not again those due in [1, 2)) in 1500 ms", "cycle_loaded"),
        _log(101.0, "something else in 3 ms", "other"),
        "not json",
        _log(160.0, "loaded 7 tasks due before 9 in 12 ms", "cycle_loaded"),
    ]
    assert loads_from_log(lines) == [
        {"start_ms": 99_000, "end_ms": 100_500, "tasks": 120_000},
        {"start_ms": 159_988, "end_ms": 160_000, "tasks": 7},
    ]


def test_a_slice_holds_a_load_when_it_overlaps_the_load_or_the_second_after_it() -> None:
    # 4 slices of 10 s from 0: fires 10 ms late everywhere, 100 ms late in the second slice
    by_instant = tuple((at, 100.0 if 10_000 <= at < 20_000 else 10.0) for at in range(0, 40_000, 100))
    delivery = Delivery(400, 400, 0, 0, 0, 0, 0, 0, 0, (), (), by_instant)
    loads = [{"start_ms": 12_000, "end_ms": 14_000, "tasks": 5}, {"start_ms": 28_000, "end_ms": 29_500, "tasks": 5}]

    figures = slice_figures(delivery, 0, 40, 10.0, loads)

    assert [s["load"] for s in figures["slices"]] == [False, True, True, True]  # 29.5 s + 1 s reaches slice 4
    assert figures["with_load"]["slices"] == 3 and figures["without_load"]["slices"] == 1
    assert figures["with_load"]["median_p99_ms"] == 10.0 and figures["with_load"]["max_p99_ms"] == 100.0
    assert figures["median_p99_ratio"] == 1.0
    assert figures["pooled_p99_ratio"] == 10.0


def test_cpu_is_split_between_the_seconds_holding_a_load_and_the_others() -> None:
    samples: list[tuple[int, dict[str, float | None]]] = [
        (0, {"node": 0.0}),
        (1000, {"node": 0.2}),
        (2000, {"node": 1.1}),
        (3000, {"node": 1.3}),
    ]
    loads = [{"start_ms": 1200, "end_ms": 1500, "tasks": 5}]  # + 1 s of backlog: reaches into [2000, 3000)

    assert cpu_by_load(samples, loads) == {"node": {"during_loads": 0.55, "outside_loads": 0.2}}
