"""The bench's arithmetic: exact percentiles, and how callbacks are matched against registered tasks."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
import tomllib
from collections import Counter
from typing import Any

import orjson
import pytest
from rich.console import Console

from benchmarks.fire import default_lead_s, spread_instants, task_bodies
from benchmarks.report import (
    BenchResult,
    Delivery,
    Percentiles,
    Registration,
    account,
    emit,
    percentile,
    render_table,
    to_json,
)
from testkit.node_process import node_settings, process_cpu_s, to_toml
from testkit.sink import CallbackRecords
from tjobs.settings import Settings

T0_MS = 1_800_000_000_000


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([], 50, None),
        ([7.0], 50, 7.0),
        ([7.0], 99.9, 7.0),
        ([1.0, 2.0], 50, 1.0),  # nearest rank: ceil(0.5 * 2) = 1st value
        ([1.0, 2.0, 3.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        ([float(i) for i in range(1, 101)], 99, 99.0),
        ([float(i) for i in range(1, 101)], 100, 100.0),
        ([float(i) for i in range(1, 1001)], 99.9, 999.0),
        ([float(i) for i in range(1, 1001)], 99, 990.0),
        ([float(i) for i in range(1, 1001)], 50, 500.0),
        ([float(i) for i in range(1, 10_001)], 99.9, 9990.0),
        ([float(i) for i in range(1, 11)], 99.9, 10.0),  # fewer than 1000 values: p99.9 is the max
        ([-5.0, -1.0, 0.0, 3.0], 50, -1.0),  # early callbacks have negative lateness
    ],
)
def test_percentile_is_the_nearest_rank_observed_value(values: list[float], p: float, expected: float | None) -> None:
    assert percentile(values, p) == expected


@pytest.mark.parametrize("p", [0, -1, 100.1])
def test_percentile_outside_0_100_is_rejected(p: float) -> None:
    with pytest.raises(ValueError, match="within"):
        percentile([1.0], p)


def test_percentiles_sort_their_input_and_summarise_it() -> None:
    summary = Percentiles.of([3.0, 1.0, 2.0, 4.0])
    assert (summary.count, summary.p50, summary.p99, summary.p999) == (4, 2.0, 4.0, 4.0)
    assert (summary.min, summary.max, summary.mean) == (1.0, 4.0, 2.5)
    assert Percentiles.of([]).to_json() == dict.fromkeys(("p50", "p99", "p999", "max", "min", "mean"))


def records_of(*rows: tuple[int, int, int, int, int]) -> CallbackRecords:
    """Rows of (receive ms after T0, task id, scheduled ms after T0, flow index, attempt)."""
    records = CallbackRecords()
    for recv_ms, task_id, scheduled_ms, flow, attempt in rows:
        records.append((T0_MS + recv_ms) * 1000, task_id, T0_MS + scheduled_ms, flow, attempt)
    return records


# registered: task id → its instant (ms after T0)
CASES: list[tuple[str, dict[int, int], list[tuple[int, int, int, int, int]], dict[str, Any]]] = [
    (
        "every task once, on time",
        {1: 0, 2: 10, 3: 20},
        [(5, 1, 0, 0, 1), (12, 2, 10, 1, 1), (21, 3, 20, 2, 1)],
        {"delivered": 3, "missing": 0, "same_flow": 0, "extra_flows": 0, "duplicates": 0, "lateness": [1, 2, 5]},
    ),
    (
        "a task never called back is missing",
        {1: 0, 2: 10, 3: 20},
        [(5, 1, 0, 0, 1), (21, 3, 20, 1, 1)],
        {"delivered": 2, "missing": 1, "duplicates": 0, "lateness": [1, 5]},
    ),
    (
        "a retry of the same flow is a same-flow duplicate; lateness counts the first receipt",
        {1: 0},
        [(5, 1, 0, 0, 1), (900, 1, 0, 0, 2)],
        {
            "delivered": 1,
            "missing": 0,
            "same_flow": 1,
            "extra_flows": 0,
            "duplicates": 1,
            "retried": 1,
            "lateness": [5],
        },
    ),
    (
        "the same flow delivered twice at the same attempt is also a duplicate",
        {1: 0},
        [(5, 1, 0, 0, 1), (6, 1, 0, 0, 1)],
        {"same_flow": 1, "retried": 0, "duplicates": 1},
    ),
    (
        "a one-shot task with two distinct flow ids was fired twice",
        {1: 0, 2: 0},
        [(5, 1, 0, 0, 1), (7, 1, 0, 1, 1), (8, 2, 0, 2, 1)],
        {
            "delivered": 2,
            "same_flow": 0,
            "extra_flows": 1,
            "tasks_with_extra_flows": 1,
            "duplicates": 1,
            "lateness": [5, 8],
        },
    ),
    (
        "two extra flows, one of them retried, count separately",
        {1: 0},
        [(5, 1, 0, 0, 1), (7, 1, 0, 1, 1), (9, 1, 0, 2, 1), (2000, 1, 0, 2, 2)],
        {"same_flow": 1, "extra_flows": 2, "tasks_with_extra_flows": 1, "duplicates": 3, "retried": 1},
    ),
    (
        "callbacks out of arrival order still take the earliest receipt",
        {1: 0},
        [(50, 1, 0, 0, 2), (3, 1, 0, 0, 1)],
        {"delivered": 1, "lateness": [3], "same_flow": 1},
    ),
    (
        "callbacks for tasks not registered here are unexpected, not duplicates",
        {1: 0},
        [(5, 1, 0, 0, 1), (6, 99, 0, 1, 1)],
        {"delivered": 1, "unexpected": 1, "duplicates": 0},
    ),
    (
        "an early callback has negative lateness",
        {1: 100},
        [(90, 1, 100, 0, 1)],
        {"lateness": [-10]},
    ),
    (
        "a callback whose scheduled-at differs from the registered instant is flagged",
        {1: 100, 2: 200},
        [(105, 1, 101, 0, 1), (205, 2, 200, 1, 1)],
        {"scheduled_mismatch": 1, "lateness": [4, 5]},
    ),
    (
        "nothing arrived",
        {1: 0, 2: 0},
        [],
        {"delivered": 0, "missing": 2, "duplicates": 0, "lateness": []},
    ),
]


@pytest.mark.parametrize(
    ("registered", "rows", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_account_matches_callbacks_to_registered_tasks(
    registered: dict[int, int], rows: list[tuple[int, int, int, int, int]], expected: dict[str, Any]
) -> None:
    delivery = account({task: T0_MS + at for task, at in registered.items()}, records_of(*rows))
    observed = {
        "delivered": delivery.delivered,
        "missing": delivery.missing,
        "same_flow": delivery.same_flow,
        "extra_flows": delivery.extra_flows,
        "tasks_with_extra_flows": delivery.tasks_with_extra_flows,
        "duplicates": delivery.duplicates,
        "retried": delivery.retried,
        "unexpected": delivery.unexpected,
        "scheduled_mismatch": delivery.scheduled_mismatch,
        "lateness": list(delivery.lateness_ms),
    }
    assert {key: observed[key] for key in expected} == expected
    assert delivery.registered == len(registered)


def test_fires_per_s_is_the_sustained_arrival_rate_of_first_callbacks() -> None:
    # 1001 tasks one ms apart, each delivered 30 ms late, plus a duplicate that does not count
    registered = {task: T0_MS + task for task in range(1001)}
    rows = [(task + 30, task, task, task, 1) for task in range(1001)] + [(2000, 5, 5, 5, 2)]
    delivery = account(registered, records_of(*rows))
    assert delivery.fires_per_s() == pytest.approx(1000.0)
    # Only the first receipts inside [T0, T0 + 1 s) count for the in-window figure
    assert delivery.fires_in_window(T0_MS, 1.0) == 970
    assert account({1: T0_MS}, records_of((5, 1, 0, 0, 1))).fires_per_s() is None


def fire_result() -> BenchResult:
    registered = {task: T0_MS + task for task in range(1, 4)}
    records = records_of((3, 1, 1, 0, 1), (5, 2, 2, 1, 1), (5, 2, 2, 1, 2))
    return BenchResult(
        mode="fire",
        base_url="http://127.0.0.1:8080",
        tasks=3,
        registration=Registration(
            attempted=4,
            succeeded=3,
            errors=1,
            elapsed_s=0.5,
            create_latency_ms=Percentiles.of([1.0, 2.0, 9.0]),
            error_samples=["HTTP 500: boom"],
        ),
        window_s=1.0,
        lead_s=2.0,
        start_ms=T0_MS,
        concurrency=8,
        delivery=account(registered, records),
        drained=False,
        sink={"received": 3, "flows": 2, "tasks": 2, "malformed": 0, "cpu_ms": 1500},
        client_cpu_s=2.25,
    )


def test_json_has_the_figures_a_script_checks() -> None:
    summary = to_json(fire_result(), machine_info={"cpu_count": 2, "python": "3.11.2"})
    assert summary["registrations_per_s"] == 6.0
    assert summary["fires_per_s"] == 500.0  # 2 first receipts 2 ms apart
    assert summary["lateness_ms"]["p50"] == 2.0
    assert set(summary["lateness_ms"]) >= {"p50", "p99", "p999", "max"}
    assert (summary["missing"], summary["duplicates"], summary["registration_errors"]) == (1, 1, 1)
    assert summary["duplicates_detail"] == {"same_flow": 1, "extra_flows": 0, "tasks_with_extra_flows": 0}
    assert (summary["tasks"], summary["window_s"], summary["drained"]) == (3, 1.0, False)
    assert summary["create_latency_ms"]["p99"] == 9.0
    assert summary["machine"] == {"cpu_count": 2, "python": "3.11.2"}
    assert summary["bench_cpu_s"] == {"client": 2.25, "client_register": None, "sink": 1.5}
    json.dumps(summary)  # plain JSON types only


def test_node_cpu_is_reported_per_delivered_fire() -> None:
    result = fire_result()
    result.node_cpu_s, result.node_fire_cpu_s = 3.0, 0.002  # 2 tasks delivered
    summary = to_json(result)
    assert summary["node_cpu_s"] == {"run": 3.0, "fire": 0.002}
    assert summary["node_cpu_us_per_fire"] == 1000.0
    console = Console(record=True, width=100)
    console.print(render_table(summary))
    assert "node CPU per fire" in console.export_text()


def test_node_cpu_of_the_registration_is_reported_per_node_and_per_create() -> None:
    result = fire_result()
    result.node_register_cpu_s = [0.006, 0.003]  # two nodes; the registration stored 3 tasks
    summary = to_json(result)
    assert summary["node_register_cpu_s"] == [0.006, 0.003]
    assert summary["node_cpu_us_per_create"] == 3000.0
    console = Console(record=True, width=100)
    console.print(render_table(summary))
    assert "node CPU per create" in console.export_text()


def test_node_cpu_is_absent_when_the_node_is_not_ours() -> None:
    summary = to_json(fire_result())
    assert summary["node_cpu_s"] == {"run": None, "fire": None}
    assert summary["node_cpu_us_per_fire"] is None
    assert (summary["node_register_cpu_s"], summary["node_cpu_us_per_create"]) == (None, None)


def test_process_cpu_is_read_from_proc_and_grows_with_work() -> None:
    # /proc counts CPU in clock ticks (10 ms) that the kernel derives from its runtime accounting: one fixed
    # ~20 ms of work could read the same tick before and after (a clean-clone CI run read 153.16 twice), so
    # the work goes on, in slices, until the count moves, and must within 2 s of CPU.
    before = process_cpu_s(os.getpid())
    assert before is not None
    after = before
    worked_until = time.process_time() + 2.0
    while after <= before and time.process_time() < worked_until:
        sum(i * i for i in range(100_000))
        after = process_cpu_s(os.getpid()) or before
    assert after > before
    assert process_cpu_s(2**22 + 12345) is None  # no such process


def test_register_only_json_has_no_fire_figures() -> None:
    result = fire_result()
    result.mode, result.delivery, result.window_s, result.start_ms = "register", None, None, None
    summary = to_json(result)
    assert summary["fires_per_s"] is None and summary["lateness_ms"] is None and summary["missing"] is None
    assert summary["machine"]["cpu_count"] >= 1
    assert summary["registrations_per_s"] == 6.0


@pytest.mark.parametrize("mode", ["fire", "register"])
def test_table_renders_every_figure(mode: str) -> None:
    result = fire_result()
    if mode == "register":
        result.mode, result.delivery = "register", None
    console = Console(record=True, width=100)
    console.print(render_table(to_json(result)))
    text = console.export_text()
    assert "registrations/s" in text
    assert ("lateness p99.9" in text) == (mode == "fire")


# ---- what the fire bench registers, and the node it can start ---------------------------------------


def test_instants_are_spread_uniformly_over_the_window() -> None:
    instants = spread_instants(T0_MS, 60.0, 120_000)
    assert len(instants) == 120_000
    assert instants[0] == T0_MS and instants[-1] < T0_MS + 60_000
    assert list(instants) == sorted(instants)
    per_second = Counter((at - T0_MS) // 1000 for at in instants)
    assert set(per_second) == set(range(60)) and set(per_second.values()) == {2000}


def test_lead_covers_the_registration_with_a_margin() -> None:
    assert default_lead_s(120_000, 2000.0) == pytest.approx(60 * 1.25 + 5)
    assert default_lead_s(1000, None) > 1000 / 1500


def test_task_bodies_are_the_create_contract() -> None:
    body_of = task_bodies({"url": "http://127.0.0.1:1/cb", "method": "POST"}, "bench", lambda i: T0_MS + i)
    assert orjson.loads(body_of(17)) == {
        "name": "bench-17",
        "schedule": {"kind": "at", "at_ms": T0_MS + 17},
        "callback": {"url": "http://127.0.0.1:1/cb", "method": "POST"},
        "payload": {"i": 17},
    }


def test_node_config_is_toml_the_settings_accept() -> None:
    settings = node_settings(
        storage_urls=['sqlite+aiosqlite:////tmp/a "b"'],
        port=18080,
        admin_key="k",
        topology="2x2x4",
        extra={"scheduler": {"tick_ms": 5}, "api": {"host": "127.0.0.2"}},
    )
    parsed = Settings.model_validate(tomllib.loads(to_toml(settings)))
    assert parsed.storage.urls == ['sqlite+aiosqlite:////tmp/a "b"'] and parsed.storage.topology == "2x2x4"
    assert (parsed.api.host, parsed.api.port, parsed.api.admin_key) == ("127.0.0.2", 18080, "k")
    assert parsed.allow_loopback_callbacks and parsed.scheduler.tick_ms == 5


def test_emit_prints_json_on_stdout_and_warnings_on_the_console() -> None:
    result = fire_result()
    result.warnings.append("lead too short")
    console, out = Console(record=True, width=100), io.StringIO()
    summary = emit(result, console, as_json=True, out=out)
    assert json.loads(out.getvalue()) == summary
    assert "lead too short" in console.export_text()
    emit(result, console, as_json=False, out=out)
    assert "fires/s (sustained)" in console.export_text() and out.getvalue().count("\n") == 1


def test_lateness_by_slice_shows_where_in_the_window_fires_were_late() -> None:
    delivery = Delivery(
        registered=4,
        delivered=4,
        missing=0,
        same_flow=0,
        extra_flows=0,
        tasks_with_extra_flows=0,
        retried=0,
        unexpected=0,
        scheduled_mismatch=0,
        lateness_ms=(10.0, 12.0, 20.0, 4000.0),
        first_receipts_us=(),
        lateness_by_instant=((1_000, 10.0), (2_000, 12.0), (7_000, 4000.0), (9_000, 20.0)),
    )

    slices = delivery.lateness_by_slice(start_ms=1_000)

    assert [(s["from_s"], s["n"], s["max_ms"]) for s in slices] == [(0.0, 2, 12.0), (5.0, 2, 4000.0)]


def test_json_slices_the_window_by_5_s_and_by_1_s() -> None:
    """A stall of a second at the window's edge fills a 5-s slice's p99; 1-s slices say when it was."""
    result = fire_result()
    assert result.delivery is not None and result.start_ms is not None
    late = ((T0_MS + 100, 10.0), (T0_MS + 1_500, 12.0), (T0_MS + 6_200, 1_200.0), (T0_MS + 6_900, 20.0))
    result.delivery = dataclasses.replace(result.delivery, lateness_by_instant=late)
    summary = to_json(result)
    assert [(s["from_s"], s["n"], s["max_ms"]) for s in summary["lateness_by_1s"]] == [
        (0.0, 1, 10.0),
        (1.0, 1, 12.0),
        (6.0, 2, 1_200.0),
    ]
    assert [(s["from_s"], s["n"]) for s in summary["lateness_by_5s"]] == [(0.0, 2), (5.0, 2)]
