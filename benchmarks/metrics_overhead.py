"""What the metrics cost on the fire path: in isolation, on one node switching them on and off, and
on separate nodes with them on and off.

    python -m benchmarks.metrics_overhead [--fires 200000] [--apps 20] [--batch 100]
    python -m benchmarks.metrics_overhead --interleaved [--runs 3] [--tasks 20000] [--window-s 10]
                                           [--slice-s 1] [--storage URL --prefix NAME] [--topology 8x4x16]
    python -m benchmarks.metrics_overhead --node [--pairs 2] [--tasks 20000] [--window-s 10] [...]

**In isolation** (the default): the metric calls one fire makes, timed with ``process_time``:
``observe_fire`` (counter + lateness histogram), its share of the per-batch observations
(transaction duration and batch size, once per ``--batch`` fires), one callback attempt
(``observe_attempt``) and one flow outcome (``observe_flow_update``), as :class:`tjobs.node.Node`
feeds them. The figure is CPU microseconds per fire; the loss of fire throughput it implies is
``cost_us × fires_per_s_per_core / 1e6`` (e.g. 4 µs per fire costs 4 % at 10,000 fires/s on one
core, 0.4 % at 1,000).

**Interleaved** (``--interleaved``, the figure for the ≤ 5 % target): ``--runs`` runs of the fire
bench (:mod:`benchmarks.fire`: ``--tasks`` one-shot tasks due across ``--window-s``, called back
into the sink), each on a fresh node that switches its metrics on and off every ``--slice-s``
(:mod:`benchmarks.metrics_slices`). Offer more than the node can take (on this 2-core machine
with MariaDB, 150,000 tasks over 20 s): only the slices where it was behind count. Reports fires/s
(first callbacks the sink received) and node CPU per fire for the on- and off-slices, pooled over
the runs and per run, and the A/A spread of the method.

**Separate nodes** (``--node``): ``--pairs`` pairs of fire bench runs, each on a fresh node process,
one with ``metrics.enabled = true`` and one with ``false`` (:class:`tjobs.observability.metrics.NullMetrics`), in
alternating order. Each run reports the fires/s its callbacks arrived at and the node's CPU per
fire over the fire phase (``/proc/<pid>/stat``). Between two processes the machine's state moves
fires/s by ±8 % here, more than the metrics do: kept for comparison, not for the figure.

Embedded (SQLite) by default; ``--storage`` runs on MariaDB/MySQL under the database prefix
``--prefix`` (dropped before each run and afterwards).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

from tjobs.observability.metrics import Metrics


def per_fire_cost_us(fires: int, apps: int, batch: int) -> dict[str, float]:
    metrics = Metrics()
    names = [f"app-{i}" for i in range(apps)]
    costs: dict[str, float] = {}

    def timed(label: str, body: object) -> None:
        started = time.process_time()
        assert callable(body)
        body()
        costs[label] = (time.process_time() - started) / fires * 1e6

    def commit() -> None:
        for i in range(fires):
            metrics.observe_fire(names[i % apps], 0.012)
            if i % batch == 0:
                metrics.fire_tx_duration.observe(0.004)
                metrics.fire_tx_batch.observe(batch)

    def attempt() -> None:
        for i in range(fires):
            metrics.observe_attempt(names[i % apps], "delivered", 200, 0.003)

    def outcome() -> None:
        for i in range(fires):
            metrics.observe_flow_update(names[i % apps], "delivered", 0.02)

    def empty() -> None:
        for i in range(fires):
            names[i % apps]

    timed("loop", empty)
    timed("commit", commit)
    timed("attempt", attempt)
    timed("outcome", outcome)
    loop = costs.pop("loop")
    result = {k: v - loop for k, v in costs.items()}
    result["total"] = result["commit"] + result["attempt"] + result["outcome"]
    return result


# ---- a node with metrics on versus off -----------------------------------------------------------


def node_run(
    metrics_on: bool,
    *,
    tasks: int,
    window_s: float,
    storage: Sequence[str] | None,
    topology: str | None,
    prefix: str | None,
) -> dict[str, Any]:
    """One fire bench on a fresh node process with metrics on or off; its figures as JSON-able values."""
    from benchmarks.fire import run, run_fire_bench
    from benchmarks.report import node_us_per_fire, to_json
    from testkit.node_process import node_process

    settings: dict[str, Any] = {"metrics": {"enabled": metrics_on}}
    if prefix is not None:
        settings["storage"] = {"database_prefix": prefix}
    with node_process(storage_urls=storage, topology=topology, settings=settings) as node:
        result = run(
            run_fire_bench(node.base_url, node.admin_key, tasks=tasks, window_s=window_s, node_pids=(node.pid,))
        )
    summary = to_json(result, machine_info={})
    us_per_fire = node_us_per_fire(result)
    return {
        "metrics": "on" if metrics_on else "off",
        "fires_per_s": summary["fires_per_s"],
        "delivered": summary["delivered"],
        "missing": summary["missing"],
        "lateness_p99_ms": (summary["lateness_ms"] or {}).get("p99"),
        "node_fire_cpu_s": result.node_fire_cpu_s,
        "node_cpu_us_per_fire": None if us_per_fire is None else round(us_per_fire, 1),
    }


def compare(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians per mode, and the throughput a CPU-bound node loses to its metrics: ``1 - off / on``.

    A run that did not deliver every task (the drain timed out) is left out: its CPU went to fires
    that never reached the sink, so its CPU per delivered fire means nothing."""
    out: dict[str, Any] = {}
    for mode in ("on", "off"):
        mine = [r for r in runs if r["metrics"] == mode and not r["missing"]]
        cpu = [r["node_cpu_us_per_fire"] for r in mine if r["node_cpu_us_per_fire"] is not None]
        rate = [r["fires_per_s"] for r in mine if r["fires_per_s"] is not None]
        out[mode] = {
            "runs": len(mine),
            "node_cpu_us_per_fire": round(statistics.median(cpu), 1) if cpu else None,
            "node_cpu_us_per_fire_range": [min(cpu), max(cpu)] if cpu else None,
            "fires_per_s": round(statistics.median(rate), 1) if rate else None,
        }
    on, off = out["on"]["node_cpu_us_per_fire"], out["off"]["node_cpu_us_per_fire"]
    out["metric_cpu_us_per_fire"] = round(on - off, 1) if on and off else None
    out["throughput_loss_pct"] = round((1 - off / on) * 100, 2) if on and off else None
    return out


def _drop_prefix(args: argparse.Namespace) -> None:
    """Drop the ``--prefix`` databases of ``--storage`` (nothing for the embedded default)."""
    from testkit.databases import drop_databases
    from tjobs.settings import StorageSettings

    if args.storage:
        drop_databases(StorageSettings(urls=args.storage, database_prefix=args.prefix))


def _node_main(args: argparse.Namespace) -> None:
    import json

    runs: list[dict[str, Any]] = []
    try:
        for pair in range(args.pairs):
            for metrics_on in (True, False) if pair % 2 == 0 else (False, True):
                _drop_prefix(args)  # each run starts from empty shards
                run_ = node_run(
                    metrics_on,
                    tasks=args.tasks,
                    window_s=args.window_s,
                    storage=args.storage,
                    topology=args.topology,
                    prefix=args.prefix,
                )
                runs.append(run_)
                print(json.dumps(run_), flush=True)
    finally:
        _drop_prefix(args)
    print(json.dumps({"tasks": args.tasks, "window_s": args.window_s, "summary": compare(runs)}))


# ---- one node, metrics on and off in alternating slices -------------------------------------------


def interleaved_run(
    *,
    tasks: int,
    window_s: float,
    slice_s: float,
    storage: Sequence[str] | None,
    topology: str | None,
    prefix: str | None,
    steady: bool = False,
    control: bool = False,
) -> dict[str, Any]:
    """One fire bench on a node that switches its metrics on and off every ``slice_s``
    (:mod:`benchmarks.metrics_slices`); the comparison over the slices where it was saturated."""
    import tempfile
    from pathlib import Path

    from benchmarks.fire import run, run_fire_bench
    from benchmarks.metrics_slices import compare as compare_slices
    from benchmarks.metrics_slices import in_window_with_deliveries, read_slices, saturated_with_deliveries
    from testkit.node_process import node_process

    settings: dict[str, Any] = {"metrics": {"enabled": True}}
    if prefix is not None:
        settings["storage"] = {"database_prefix": prefix}
    with tempfile.TemporaryDirectory(prefix="tjobs-metrics-slices-") as directory:
        slices_path = Path(directory) / "slices.jsonl"
        command: tuple[str, ...] = (
            "-m",
            "benchmarks.metrics_slices",
            "--slices",
            str(slices_path),
            "--slice-s",
            str(slice_s),
        )
        if control:
            command += ("--control",)
        with node_process(storage_urls=storage, topology=topology, settings=settings, serve_command=command) as node:
            result = run(
                run_fire_bench(node.base_url, node.admin_key, tasks=tasks, window_s=window_s, node_pids=(node.pid,))
            )
        slices = read_slices(slices_path)
    delivery = result.delivery
    if result.start_ms is None or delivery is None:
        raise RuntimeError("the fire bench reported no window or delivery")
    if steady:
        busy = in_window_with_deliveries(
            slices, delivery.first_receipts_us, start_ms=result.start_ms, window_s=window_s
        )
    else:
        busy = saturated_with_deliveries(
            slices, delivery.first_receipts_us, tasks=tasks, start_ms=result.start_ms, window_s=window_s
        )
    return {
        "delivered": delivery.delivered,
        "missing": delivery.missing,
        "duplicates": delivery.duplicates,
        "counted_s": round(sum(s.end_ms - s.start_ms for s in busy) / 1000, 1),
        **compare_slices(busy),
        "_slices": busy,
    }


def _interleaved_main(args: argparse.Namespace) -> None:
    import json

    from benchmarks.metrics_slices import compare as compare_slices

    pooled = []
    losses = []
    try:
        for _ in range(args.runs):
            _drop_prefix(args)  # each run starts from empty shards
            result = interleaved_run(
                tasks=args.tasks,
                window_s=args.window_s,
                slice_s=args.slice_s,
                storage=args.storage,
                topology=args.topology,
                prefix=args.prefix,
                steady=args.steady,
                control=args.control,
            )
            busy = result.pop("_slices")
            pooled.extend(busy)
            losses.append(result["fitted_capacity_loss_pct"])
            result["slices"] = [  # [position, on?, ms, delivered, committed, node CPU ms]
                [s.position, int(s.metrics_on), s.end_ms - s.start_ms, s.delivered, s.committed, round(s.cpu_s * 1000)]
                for s in busy
            ]
            print(json.dumps(result), flush=True)
    finally:
        _drop_prefix(args)
    summary = compare_slices(pooled)
    summary["fitted_capacity_loss_pct_per_run"] = losses
    known = [loss for loss in losses if loss is not None]
    if len(known) > 1:
        summary["fitted_capacity_loss_pct_mean_of_runs"] = round(statistics.fmean(known), 2)
        summary["fitted_capacity_loss_pct_stderr_of_runs"] = round(statistics.stdev(known) / len(known) ** 0.5, 2)
    print(
        json.dumps(
            {
                "tasks": args.tasks,
                "window_s": args.window_s,
                "slice_s": args.slice_s,
                "runs": args.runs,
                "pooled": summary,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fires", type=int, default=200_000)
    parser.add_argument("--apps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--node", action="store_true", help="fire bench on a node, metrics on vs off")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=2, help="runs per mode (alternating order)")
    parser.add_argument("--storage", action="append", help="storage URL (else embedded SQLite)")
    parser.add_argument("--topology", default=None)
    parser.add_argument("--prefix", default=None, help="database prefix with --storage (dropped after)")
    parser.add_argument(
        "--interleaved", action="store_true", help="one saturated node per run, metrics switched on/off every --slice-s"
    )
    parser.add_argument("--runs", type=int, default=3, help="with --interleaved: fire bench runs")
    parser.add_argument("--slice-s", type=float, default=1.0)
    parser.add_argument(
        "--steady",
        action="store_true",
        help="with --interleaved: a rate the node keeps up with; every slice of the window counts",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="with --interleaved: both arms without metrics (A/A), the method's own spread",
    )
    args = parser.parse_args()
    if (args.node or args.interleaved) and args.storage and not args.prefix:
        parser.error("--storage needs --prefix (a database prefix of your own, dropped afterwards)")
    if args.interleaved:
        _interleaved_main(args)
        return
    if args.node:
        _node_main(args)
        return
    result = per_fire_cost_us(args.fires, args.apps, args.batch)
    for key, value in result.items():
        print(f"{key:16s} {value:6.2f} µs/fire")
    for rate in (1_000, 5_000, 10_000):
        print(f"throughput loss at {rate:>6,} fires/s per core: {result['total'] * rate / 1e4:5.2f} %")


if __name__ == "__main__":
    main()
