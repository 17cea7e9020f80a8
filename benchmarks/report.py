"""What a bench run measured, and how it is shown: exact percentiles, delivery accounting, JSON, a table.

Everything here is pure (no I/O, no clock) except the rich renderers at the bottom.

Definitions (the JSON keys say the same):

- *lateness* of a task: its first callback's receive time minus its ``tjobs-scheduled-at``, in ms
  (negative when it came early). Percentiles are nearest-rank on the sorted values (an observed value,
  never an interpolation); ``p999`` is the 99.9th.
- *missing*: registered tasks that got no callback at all.
- *duplicates*: callbacks beyond one per registered task: ``same_flow`` counts repeats of a webhook-id
  already received (retries or replays), ``extra_flows`` counts distinct webhook-ids beyond the first
  for one task (the node fired a one-shot task twice). ``duplicates`` is their sum. ``retried_flows``
  (fire bench): the first 10 flows called back with ``tjobs-attempt`` > 1, read back from the node
  (``GET /v1/flows/{id}``) before the run ends: status, attempts and each attempt's record (its status
  code or error, its duration), so a repeat says why the attempt before it counted as failed.
- *fires_per_s*: the sustained rate at which tasks' first callbacks arrived:
  ``(delivered - 1) / (last first-receipt - first first-receipt)``. For tasks spread uniformly over the
  window and delivered with constant lateness this is exactly ``tasks / window_s``; a node that falls
  behind stretches the span and lowers it. ``fires_in_window_per_s`` is the literal count of first
  receipts inside ``[start, start + window_s)`` divided by ``window_s`` (always a little below the
  offered rate, since the last tasks' callbacks land just after the window).
- *node_cpu_s*: CPU time (user + system) of the node process over the whole run and over the fire
  phase (from just before the window to the end of the drain), when the bench started the node;
  ``node_cpu_us_per_fire`` is the fire phase's share per delivered task. Unlike wall-clock rates it
  holds on a machine shared with other work.
- *node_register_cpu_s*: per started node (in ``--nodes`` order, the first takes the creates), its CPU
  time during the registration (the fire and register benches; not the register bench's cleanup);
  ``node_cpu_us_per_create`` is their sum per stored task (a cluster's other nodes pay for reading what
  the first publishes).
- *mariadb_cpu_us_per_fire*, *statements_per_fire* (fire bench with ``--storage mysql…``): the server
  process's CPU and ``SHOW GLOBAL STATUS`` ``Questions`` over the node's fire phase, per delivered task
  (every client of the server counts); ``mariadb_per_fire`` holds them with every counter of
  :data:`benchmarks._db_cost.COUNTERS` per fire, ``gross`` and ``net`` of the ``quiet`` rate measured
  between the registration's end and the fire phase, and the counters the server lacks (``absent``).
  The register bench gives the same per stored task over the registration (``mariadb_cpu_us_per_create``,
  ``statements_per_create``, ``mariadb_per_create``), net of a quiet second just before it, and the
  client's own CPU over the registration alone (``bench_cpu_s.client_register``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from testkit.sink import CallbackRecords

ProgressFn = Callable[[str, int, int], None]
"""Called with (phase, done, total): phases are "register", "fire" and "cleanup"."""

# ---- percentiles ---------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile ``p`` (0 < p <= 100) of values sorted ascending; None when empty."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be within (0, 100], got {p}")
    if not sorted_values:
        return None
    rank = math.ceil(p / 100 * len(sorted_values) - 1e-9)
    return sorted_values[max(rank, 1) - 1]


@dataclass(frozen=True)
class Percentiles:
    count: int
    p50: float | None
    p99: float | None
    p999: float | None
    max: float | None
    min: float | None
    mean: float | None

    @classmethod
    def of(cls, values: Sequence[float], *, presorted: bool = False) -> Percentiles:
        ordered = values if presorted else sorted(values)
        if not ordered:
            return cls(0, None, None, None, None, None, None)
        return cls(
            count=len(ordered),
            p50=percentile(ordered, 50),
            p99=percentile(ordered, 99),
            p999=percentile(ordered, 99.9),
            max=ordered[-1],
            min=ordered[0],
            mean=math.fsum(ordered) / len(ordered),
        )

    def to_json(self) -> dict[str, float | None]:
        return {
            "p50": _round(self.p50),
            "p99": _round(self.p99),
            "p999": _round(self.p999),
            "max": _round(self.max),
            "min": _round(self.min),
            "mean": _round(self.mean),
        }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# ---- delivery accounting -------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """How the callbacks a sink recorded match the tasks a bench registered."""

    registered: int
    delivered: int  # registered tasks with at least one callback
    missing: int
    same_flow: int  # callbacks repeating a webhook-id already received
    extra_flows: int  # distinct webhook-ids beyond the first, summed over tasks
    tasks_with_extra_flows: int
    retried: int  # callbacks with tjobs-attempt > 1
    unexpected: int  # callbacks for task ids this bench did not register
    scheduled_mismatch: int  # first callbacks whose tjobs-scheduled-at differs from the registered instant
    lateness_ms: tuple[float, ...]  # per delivered task, sorted ascending
    first_receipts_us: tuple[int, ...]  # per delivered task, sorted ascending
    # (scheduled instant ms, lateness ms) per delivered task, by instant: where in the window it was late
    lateness_by_instant: tuple[tuple[int, float], ...] = ()
    # the API ids (``<task id>-<scheduled_at_ms>``) of the registered tasks' flows called back with
    # tjobs-attempt > 1, sorted: the flows whose stored attempt history says why an attempt was retried
    retried_flows: tuple[str, ...] = ()

    @property
    def duplicates(self) -> int:
        return self.same_flow + self.extra_flows

    def fires_per_s(self) -> float | None:
        """Sustained arrival rate of first callbacks (see the module docstring)."""
        receipts = self.first_receipts_us
        if len(receipts) < 2 or receipts[-1] == receipts[0]:
            return None
        return (len(receipts) - 1) / ((receipts[-1] - receipts[0]) / 1e6)

    def fires_in_window(self, start_ms: int, window_s: float) -> int:
        start_us, end_us = start_ms * 1000, start_ms * 1000 + int(window_s * 1e6)
        return sum(1 for recv_us in self.first_receipts_us if start_us <= recv_us < end_us)

    def lateness_by_slice(self, start_ms: int, slice_s: float = 5.0) -> list[dict[str, Any]]:
        """Per ``slice_s`` of scheduled instants from ``start_ms``: how many fired, p99 and max lateness."""
        slices: dict[int, list[float]] = {}
        for scheduled_ms, late_ms in self.lateness_by_instant:
            slices.setdefault(int((scheduled_ms - start_ms) // (slice_s * 1000)), []).append(late_ms)
        out = []
        for index in sorted(slices):
            values = sorted(slices[index])
            p99 = Percentiles.of(values, presorted=True).to_json()["p99"]
            out.append({"from_s": index * slice_s, "n": len(values), "p99_ms": p99, "max_ms": round(values[-1], 1)})
        return out


def account(registered: Mapping[int, int], records: CallbackRecords) -> Delivery:
    """Match ``records`` against ``registered`` (task id → the instant it was registered for, epoch ms)."""
    first: dict[int, tuple[int, int]] = {}  # task id → (first receive µs, scheduled ms of that callback)
    flows_of_task: dict[int, set[int]] = {}
    seen_flows: set[int] = set()
    same_flow = retried = unexpected = 0
    retried_flows: set[str] = set()
    for recv_us, task_id, scheduled_ms, flow, attempt in zip(
        records.recv_us, records.task_id, records.scheduled_ms, records.flow, records.attempt, strict=True
    ):
        if attempt > 1:
            retried += 1
        if task_id not in registered:
            unexpected += 1
            continue
        if attempt > 1:
            retried_flows.add(f"{task_id}-{scheduled_ms}")
        if flow in seen_flows:
            same_flow += 1
        else:
            seen_flows.add(flow)
            flows_of_task.setdefault(task_id, set()).add(flow)
        earliest = first.get(task_id)
        if earliest is None or recv_us < earliest[0]:
            first[task_id] = (recv_us, scheduled_ms)
    extra = [len(flows) - 1 for flows in flows_of_task.values() if len(flows) > 1]
    lateness = sorted(recv_us / 1000 - scheduled_ms for recv_us, scheduled_ms in first.values())
    mismatch = sum(1 for task_id, (_, scheduled_ms) in first.items() if registered[task_id] != scheduled_ms)
    return Delivery(
        registered=len(registered),
        delivered=len(first),
        missing=len(registered) - len(first),
        same_flow=same_flow,
        extra_flows=sum(extra),
        tasks_with_extra_flows=len(extra),
        retried=retried,
        unexpected=unexpected,
        scheduled_mismatch=mismatch,
        lateness_ms=tuple(lateness),
        first_receipts_us=tuple(sorted(recv_us for recv_us, _ in first.values())),
        lateness_by_instant=tuple(
            sorted((scheduled_ms, recv_us / 1000 - scheduled_ms) for recv_us, scheduled_ms in first.values())
        ),
        retried_flows=tuple(sorted(retried_flows)),
    )


# ---- the result ----------------------------------------------------------------------------------


@dataclass
class Registration:
    """The registration phase: how many creates succeeded, how fast, and what failed."""

    attempted: int
    succeeded: int
    errors: int
    elapsed_s: float
    create_latency_ms: Percentiles
    error_samples: list[str] = field(default_factory=list)
    late: int = 0  # creates answered after the instant they registered (fire bench only)

    @property
    def per_s(self) -> float:
        return self.succeeded / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass
class BenchResult:
    mode: str  # "fire" or "register"
    base_url: str
    tasks: int
    registration: Registration
    window_s: float | None = None
    lead_s: float | None = None
    start_ms: int | None = None  # the first task's instant (fire bench)
    target_register_rate: float | None = None
    calibrated_register_rate: float | None = None  # creates/s the lead-sizing probe measured
    concurrency: int = 0
    max_concurrency: int | None = None  # the bench app's cap on deliveries in flight (fire bench)
    batch_size: int | None = None
    delivery: Delivery | None = None
    drained: bool = True  # every registered task got a callback before the drain timeout
    sink: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    client_cpu_s: float | None = None  # CPU the registering process used during the run
    client_register_cpu_s: float | None = None  # ... during the registration alone (register bench)
    node_cpu_s: float | None = None  # CPU the node used during the run (when its pid is known)
    node_fire_cpu_s: float | None = None  # ... from just before the window to the end of the drain
    node_register_cpu_s: list[float] | None = None  # per node, during the registration (fire, register)
    # what ``delivery`` was accounted from (fire bench; not in the JSON): task id → its instant (epoch ms),
    # and the sink's records, for a bench that accounts them its own way (benchmarks.pool_fire)
    instants: Mapping[int, int] = field(default_factory=dict)
    records: CallbackRecords | None = None
    slo: dict[str, Any] | None = None  # fire --slo: the node's SLO p99 beside the sink's (benchmarks.slo_compare)
    mariadb: dict[str, Any] | None = None  # on MariaDB: its cost per fire, or per create (register bench)
    # fire bench: the first retried flows (``Delivery.retried_flows``) as the node stored them: status,
    # attempts and attempt history (each attempt's status code or error), read back before the run ends
    retried_flows: list[dict[str, Any]] | None = None

    def lateness(self) -> Percentiles | None:
        if self.delivery is None:
            return None
        return Percentiles.of(self.delivery.lateness_ms, presorted=True)


def node_us_per_fire(result: BenchResult) -> float | None:
    """The node's fire-phase CPU per delivered task, in µs: the cost figure that survives a busy machine."""
    delivered = result.delivery.delivered if result.delivery else 0
    if result.node_fire_cpu_s is None or not delivered:
        return None
    return result.node_fire_cpu_s / delivered * 1e6


def node_us_per_create(result: BenchResult) -> float | None:
    """The nodes' CPU during the registration (summed) per successful create, in µs."""
    created = result.registration.succeeded
    if result.node_register_cpu_s is None or not created:
        return None
    return sum(result.node_register_cpu_s) / created * 1e6


def machine() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(terse=True),
    }


def to_json(result: BenchResult, machine_info: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One JSON object a script can check (see the module docstring for each figure's definition)."""
    registration = result.registration
    delivery = result.delivery
    lateness = result.lateness()
    fires_per_s = delivery.fires_per_s() if delivery else None
    in_window = None
    if delivery is not None and result.start_ms is not None and result.window_s:
        in_window = delivery.fires_in_window(result.start_ms, result.window_s) / result.window_s
    return {
        "mode": result.mode,
        "tasks": result.tasks,
        "window_s": result.window_s,
        "window_start_ms": result.start_ms,
        "registered": registration.succeeded,
        "registrations_per_s": _round(registration.per_s, 1),
        "registration_s": _round(registration.elapsed_s),
        "registration_errors": registration.errors,
        "registration_error_samples": registration.error_samples,
        "late_registrations": registration.late,
        "create_latency_ms": registration.create_latency_ms.to_json(),
        "fires_per_s": _round(fires_per_s, 1),
        "fires_in_window_per_s": _round(in_window, 1),
        "lateness_ms": lateness.to_json() if lateness else None,
        "lateness_by_5s": (
            delivery.lateness_by_slice(result.start_ms)
            if delivery is not None and result.start_ms is not None
            else None
        ),
        "lateness_by_1s": (
            delivery.lateness_by_slice(result.start_ms, 1.0)
            if delivery is not None and result.start_ms is not None
            else None
        ),
        "delivered": delivery.delivered if delivery else None,
        "missing": delivery.missing if delivery else None,
        "duplicates": delivery.duplicates if delivery else None,
        "duplicates_detail": (
            {
                "same_flow": delivery.same_flow,
                "extra_flows": delivery.extra_flows,
                "tasks_with_extra_flows": delivery.tasks_with_extra_flows,
            }
            if delivery
            else None
        ),
        "retried_callbacks": delivery.retried if delivery else None,
        "retried_flows": result.retried_flows,
        "unexpected_callbacks": delivery.unexpected if delivery else None,
        "scheduled_mismatch": delivery.scheduled_mismatch if delivery else None,
        "drained": result.drained,
        "sink": result.sink,
        "slo": result.slo,
        "settings": {
            "base_url": result.base_url,
            "lead_s": _round(result.lead_s),
            "target_register_rate": result.target_register_rate,
            "calibrated_register_rate": _round(result.calibrated_register_rate, 1),
            "concurrency": result.concurrency,
            "max_concurrency": result.max_concurrency,
            "batch_size": result.batch_size,
        },
        "bench_cpu_s": {
            "client": _round(result.client_cpu_s),
            "client_register": _round(result.client_register_cpu_s),
            "sink": _round(result.sink["cpu_ms"] / 1000) if "cpu_ms" in result.sink else None,
        },
        "node_cpu_s": {"run": _round(result.node_cpu_s), "fire": _round(result.node_fire_cpu_s)},
        "node_cpu_us_per_fire": _round(node_us_per_fire(result), 1),
        "node_register_cpu_s": (
            [_round(s) for s in result.node_register_cpu_s] if result.node_register_cpu_s is not None else None
        ),
        "node_cpu_us_per_create": _round(node_us_per_create(result), 1),
        **_mariadb_json(result.mariadb, "create" if result.mode == "register" else "fire"),
        "warnings": result.warnings,
        "machine": dict(machine_info) if machine_info is not None else machine(),
    }


def _mariadb_json(cost: Mapping[str, Any] | None, per: str) -> dict[str, Any]:
    """The database's figures per ``per`` (fire, create): gross CPU and statements, and the whole cost
    (gross, quiet, net)."""
    gross, net = (cost["gross"], cost["net"] or {}) if cost is not None else ({}, {})
    return {
        f"mariadb_cpu_us_per_{per}": gross.get("mariadb_cpu_us"),
        f"mariadb_cpu_us_per_{per}_net": net.get("mariadb_cpu_us"),
        f"statements_per_{per}": gross.get("statements"),
        f"statements_per_{per}_net": net.get("statements"),
        f"mariadb_per_{per}": dict(cost) if cost is not None else None,
    }


# ---- rich rendering ------------------------------------------------------------------------------


def render_table(summary: Mapping[str, Any]) -> Table:
    """A two-column table of the figures in :func:`to_json`'s object."""
    from rich.table import Table

    table = Table(title=f"python -m benchmarks {summary['mode']}", show_header=True, header_style="bold")
    table.add_column("figure")
    table.add_column("value", justify="right")

    def row(name: str, value: Any, unit: str = "", bad: bool = False) -> None:
        if value is None:
            text = "—"
        elif isinstance(value, str):
            text = value
        else:
            text = f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"
        if value is not None and unit:
            text += f" {unit}"
        table.add_row(name, f"[red]{text}[/]" if bad else text)

    row("tasks", summary["tasks"])
    if summary["window_s"] is not None:
        row("window", summary["window_s"], "s")
    row("registered", summary["registered"])
    row("registrations/s", summary["registrations_per_s"])
    row("registration errors", summary["registration_errors"], bad=summary["registration_errors"] > 0)
    latency = summary["create_latency_ms"]
    row("create latency p50 / p99", _pair(latency["p50"], latency["p99"]), "ms")
    if summary["mode"] == "fire":
        row("late registrations", summary["late_registrations"], bad=summary["late_registrations"] > 0)
        row("fires/s (sustained)", summary["fires_per_s"])
        row("fires/s (in window)", summary["fires_in_window_per_s"])
        lateness = summary["lateness_ms"] or {}
        for key, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max")):
            row(f"lateness {label}", lateness.get(key), "ms")
        row("delivered", summary["delivered"])
        row("missing", summary["missing"], bad=bool(summary["missing"]))
        detail = summary["duplicates_detail"] or {}
        row("duplicates (same flow)", detail.get("same_flow"), bad=bool(detail.get("same_flow")))
        row("duplicates (extra flows)", detail.get("extra_flows"), bad=bool(detail.get("extra_flows")))
        row("retried callbacks", summary["retried_callbacks"])
        unexpected = summary["unexpected_callbacks"]
        row("unexpected callbacks", unexpected, bad=bool(unexpected))
        sink = summary["sink"]
        if sink.get("signatures_checked"):
            row("signatures checked / failed", _pair(sink["signatures_checked"], sink["signatures_failed"]))
    cpu = summary["bench_cpu_s"]
    row("bench CPU: client", cpu["client"], "s")
    if cpu.get("client_register") is not None:
        row("bench CPU: client, registration", cpu["client_register"], "s")
    if cpu["sink"] is not None:
        row("bench CPU: sink", cpu["sink"], "s")
    node_cpu = summary.get("node_cpu_s") or {}
    if node_cpu.get("run") is not None:
        row("node CPU: run / fire phase", _pair(node_cpu["run"], node_cpu["fire"]), "s")
    if summary.get("node_cpu_us_per_fire") is not None:
        row("node CPU per fire", summary["node_cpu_us_per_fire"], "µs")
    if summary.get("node_cpu_us_per_create") is not None:
        row("node CPU per create (registration)", summary["node_cpu_us_per_create"], "µs")
    for per in ("fire", "create"):
        mariadb = summary.get(f"mariadb_per_{per}")
        if mariadb is None:
            continue
        gross, net = mariadb["gross"], mariadb["net"] or {}
        cpu_us = _gross_net(gross["mariadb_cpu_us"], net.get("mariadb_cpu_us"))
        row(f"MariaDB CPU per {per}, gross / net of quiet", cpu_us)
        row(f"statements per {per}, gross / net", _gross_net(gross["statements"], net.get("statements")))
        for name, value in gross["counters"].items():
            row(f"  {name} per {per}, gross / net", _gross_net(value, net.get("counters", {}).get(name)))
        if mariadb["absent"]:
            row("MariaDB counters absent", ", ".join(mariadb["absent"]))
    return table


def _pair(first: float | None, second: float | None) -> str | None:
    if first is None or second is None:
        return None
    return f"{first:,.1f} / {second:,.1f}" if isinstance(first, float) else f"{first:,} / {second:,}"


def _gross_net(gross: float | None, net: float | None) -> str:
    return " / ".join("—" if value is None else f"{value:,.3f}".rstrip("0").rstrip(".") for value in (gross, net))


def emit(result: BenchResult, console: Console, *, as_json: bool, out: TextIO | None = None) -> dict[str, Any]:
    """Show a result: with ``as_json`` one JSON object on ``out`` (stdout), else the table on ``console``;
    warnings always go to ``console`` (meant to be stderr, so stdout stays parseable). Returns the object."""
    summary = to_json(result)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    if as_json:
        stream = out or sys.stdout
        stream.write(json.dumps(summary) + "\n")
        stream.flush()
    else:
        console.print(render_table(summary))
    return summary


@contextmanager
def rich_progress(console: Console) -> Iterator[ProgressFn]:
    """A progress callback for the bench functions, drawn as one rich bar per phase."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bars: dict[str, TaskID] = {}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as progress:

        def report(phase: str, done: int, total: int) -> None:
            if phase not in bars:
                bars[phase] = progress.add_task(phase, total=total)
            progress.update(bars[phase], completed=done, total=total)

        yield report
