"""``python -m benchmarks held_backlog``: what a backlog held behind a rate-limited app costs the store.

One node, one app of its own with ``rate_limit_per_s = --rate`` and ``max_concurrency = --concurrency``,
``--tasks`` one-shot tasks (batch creates) ALL due at one instant ``--lead-s`` ahead, delivered to the fire
bench's callback sink (:class:`testkit.sink.SinkProcess`). The backlog drains at the app's rate (20,000 at
100/s: ~200 s), so most flows wait past the compensator's ``grace_s`` (30 s) in the node's own queue: the
compensator leases each such held flow (no attempt counted) until about its turn (``held_lease_ms``), so it
should cost about ONE lease (one row write) a held flow, not one every lease + grace (46 s by default).

Figures: delivered, missing, duplicates and ``held_past_grace`` (received more than ``grace_s`` after the
due instant); the drain (first and last receipt after the due instant, the achieved rate);
``flows_leased`` (the change of the node's ``tjobs_flows_leased_total``; null on a tree without it) per held
flow, ``flows_redriven`` (0 on a healthy node), the peak of ``tjobs_compensator_backlog`` scraped every 5 s
(the series too); on MariaDB the change of ``SHOW GLOBAL STATUS`` ``Handler_update``, ``Com_update``,
``Com_insert`` and ``Questions`` over the run, each per delivered flow (the measure an older tree gives too:
every client of the server counts); the node's CPU over the drain, per flow; the load average. Run::

    python -m benchmarks held_backlog --storage mysql+asyncmy://root@127.0.0.1:3306 --json
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector
from prometheus_client.parser import text_string_to_metric_families

from benchmarks._db_cost import DbProbe, DbReader, DbReading, deltas
from benchmarks.bench_node import bench_target, console, target_options
from benchmarks.fire import (
    BenchError,
    _await_callbacks,
    _nodes_cpu_s,
    batch_sender,
    create_bench_app,
    register,
    run,
    task_bodies,
)
from benchmarks.report import Delivery, ProgressFn, account, machine, rich_progress
from benchmarks.shard_move import now_ms
from testkit.sink import CallbackRecords, SinkConfig, SinkProcess

LEASED, REDRIVEN, BACKLOG = "tjobs_flows_leased_total", "tjobs_flows_redriven_total", "tjobs_compensator_backlog"
DB_COUNTERS = ("Handler_update", "Com_update", "Com_insert", "Questions")
SCRAPE_EVERY_S = 5.0
Metrics = dict[str, float | None]
Reading = Mapping[str, float | None]


def metric_values(text: str) -> Metrics:
    """:data:`LEASED`, :data:`REDRIVEN` and :data:`BACKLOG` in a ``/metrics`` text, each summed over its
    series; None for one the node does not export (a tree older than the metric)."""
    values: Metrics = dict.fromkeys((LEASED, REDRIVEN, BACKLOG))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in values:
                values[sample.name] = (values[sample.name] or 0.0) + sample.value
    return values


def change(before: float | None, after: float | None) -> int | None:
    return None if before is None or after is None else round(after - before)


def ratio(value: float | None, per: int, digits: int = 3) -> float | None:
    """``value / per``, None without a value or with nothing to divide by."""
    return None if value is None or per <= 0 else round(value / per, digits)


def drain_figures(delivery: Delivery, grace_s: float) -> dict[str, Any]:
    """How the backlog drained, every task due at one instant: tasks received past the grace, the first and
    last receipt after the instant (s), the achieved rate (first receipts a second)."""
    lateness = delivery.lateness_ms  # sorted; a task's first receipt less its instant, the same for all
    held = len(lateness) - bisect.bisect_right(lateness, grace_s * 1000)
    rate = delivery.fires_per_s()
    return {
        "held_past_grace": held,
        "first_s": round(lateness[0] / 1000, 2) if lateness else None,
        "last_s": round(lateness[-1] / 1000, 2) if lateness else None,
        "rate_per_s": None if rate is None else round(rate, 1),
    }


def db_figures(before: DbReading | None, after: DbReading | None, delivered: int) -> dict[str, Any] | None:
    """The change of :data:`DB_COUNTERS` between two readings of MariaDB, each per delivered flow."""
    if before is None or after is None:
        return None
    delta, _ = deltas(before, after)
    return {name: {"total": delta.get(name), "per_flow": ratio(delta.get(name), delivered)} for name in DB_COUNTERS}


async def scrape(session: ClientSession, base_url: str, admin_key: str) -> Metrics:
    """The node's figures now (the admin key sent, for a node whose metrics take a scrape token)."""
    async with session.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {admin_key}"}) as response:
        text = await response.text()
        if response.status != 200:
            raise BenchError(f"GET /metrics answered {response.status}: {text[:200]}")
    return metric_values(text)


async def watch(
    session: ClientSession, base_url: str, admin_key: str, t0_ms: int, series: list[dict[str, Any]]
) -> None:
    """Scrape ``/metrics`` every :data:`SCRAPE_EVERY_S` into ``series`` (seconds after ``t0_ms``), until cancelled."""
    while True:
        with contextlib.suppress(ClientError, TimeoutError, BenchError):
            values = await scrape(session, base_url, admin_key)
            series.append({"t_s": round((now_ms() - t0_ms) / 1000, 1), **values})
        await asyncio.sleep(SCRAPE_EVERY_S)


async def bench(
    args: argparse.Namespace,
    target: tuple[str, str, Sequence[int]],
    probe: DbReader | None,
    progress: ProgressFn | None,
) -> dict[str, Any]:
    """One run against ``target`` (base URL, admin key, node pids), MariaDB read through ``probe``."""
    base_url, admin_key, pids = target
    base_url = base_url.rstrip("/")
    warnings: list[str] = []
    load_start = os.getloadavg()
    async with ClientSession(
        connector=TCPConnector(limit=args.register_concurrency + 4), timeout=ClientTimeout(total=120)
    ) as session:
        key, _ = await create_bench_app(
            session, base_url, admin_key, name="bench-held", rate_limit_per_s=args.rate,
            max_concurrency=args.concurrency,
        )  # fmt: skip
        async with SinkProcess(SinkConfig()) as sink:
            callback = {"url": sink.callback_url, "method": "POST", "timeout_ms": 3000}
            due_ms = now_ms() + round(args.lead_s * 1000)
            body_of = task_bodies(callback, "held", lambda _: due_ms)
            outcome = await register(
                session, batch_sender(base_url, key, body_of), args.tasks, rate=None,
                concurrency=args.register_concurrency, unit=args.batch_size, progress=progress,
            )  # fmt: skip
            registered = dict.fromkeys(outcome.task_ids, due_ms)
            if outcome.errors:
                warnings.append(f"{outcome.errors} creates failed: {outcome.error_samples}")
            if now_ms() > due_ms:
                warnings.append(f"registration ({outcome.elapsed_s:.1f} s) ran past the lead ({args.lead_s:.1f} s)")
            await asyncio.sleep(max(0.0, (due_ms - now_ms()) / 1000 - 1))
            metrics = [await scrape(session, base_url, admin_key)]
            db = [probe.read() if probe else None]
            cpu = [_nodes_cpu_s(pids)]
            series: list[dict[str, Any]] = []
            watcher = asyncio.create_task(watch(session, base_url, admin_key, due_ms, series))
            timeout_s = args.drain_timeout_s or args.tasks / args.rate * 1.5 + 60
            drained = await _await_callbacks(sink, len(registered), due_ms, timeout_s, args.settle_s, 1.0, progress)
            cpu.append(_nodes_cpu_s(pids))
            db.append(probe.read() if probe else None)
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            metrics.append(await scrape(session, base_url, admin_key))
            records = await sink.records()
    return summarise(
        args, registered, records, metrics, series, db, cpu, drained, warnings,
        load=(load_start, os.getloadavg()), register_s=outcome.elapsed_s,
    )  # fmt: skip


def relative_series(start: Reading, series: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The scraped ``series``: each point's backlog, and the flows leased and re-driven since ``start``."""
    return [
        {
            "t_s": point["t_s"],
            "backlog": point[BACKLOG],
            "leased": change(start[LEASED], point[LEASED]),
            "redriven": change(start[REDRIVEN], point[REDRIVEN]),
        }
        for point in series
    ]


def summarise(
    args: argparse.Namespace,
    registered: Mapping[int, int],
    records: CallbackRecords,
    metrics: Sequence[Reading],
    series: Sequence[Mapping[str, Any]],
    db: Sequence[DbReading | None],
    cpu: Sequence[float | None],
    drained: bool,
    warnings: list[str],
    *,
    load: tuple[Sequence[float], Sequence[float]],
    register_s: float,
) -> dict[str, Any]:
    """The JSON figures of one run from what it read before the due instant and after the drain
    (``metrics``, ``db``, ``cpu``: two readings each) and the ``/metrics`` ``series`` in between."""
    delivery = account(registered, records)
    drain = drain_figures(delivery, args.grace_s)
    held = int(drain.pop("held_past_grace"))
    leased = change(metrics[0][LEASED], metrics[-1][LEASED])
    redriven = change(metrics[0][REDRIVEN], metrics[-1][REDRIVEN])
    backlogs = [point[BACKLOG] for point in [*metrics, *series] if point.get(BACKLOG) is not None]
    node_cpu_s = None if cpu[0] is None or cpu[-1] is None else cpu[-1] - cpu[0]
    if leased is None:
        warnings.append(f"the node exports no {LEASED} (an older tree): flows_leased is null")
    if redriven:
        warnings.append(f"{redriven} flows re-driven on a healthy node")
    if not drained:
        warnings.append("the drain timed out: some tasks had no callback")
    return {
        "bench": "held_backlog",
        "tasks": args.tasks,
        "rate": args.rate,
        "concurrency": args.concurrency,
        "grace_s": args.grace_s,
        "lead_s": args.lead_s,
        "register_s": round(register_s, 2),
        "registered": len(registered),
        "delivered": delivery.delivered,
        "missing": delivery.missing,
        "duplicates": delivery.duplicates,
        "held_past_grace": held,
        "drain": drain,
        "flows_leased": leased,
        "flows_leased_per_held_flow": ratio(leased, held),
        "flows_redriven": redriven,
        "compensator_backlog_peak": max(backlogs) if backlogs else None,
        "mariadb": db_figures(db[0], db[-1], delivery.delivered),
        "node_cpu_s": None if node_cpu_s is None else round(node_cpu_s, 2),
        "node_cpu_us_per_flow": ratio(None if node_cpu_s is None else node_cpu_s * 1e6, delivery.delivered, 1),
        "drained": drained,
        "warnings": warnings,
        "compensator_series": relative_series(metrics[0], series),
        "load": {"start": [round(v, 2) for v in load[0]], "end": [round(v, 2) for v in load[1]]},
        "machine": machine(),
    }


def readable(summary: Mapping[str, Any]) -> list[str]:
    """The summary's figures as a few lines for a person (the series and the machine only in the JSON)."""
    drain, mariadb = summary["drain"], summary["mariadb"] or {}
    lines = [
        f"{summary['delivered']} of {summary['tasks']} delivered at {summary['rate']}/s, {summary['concurrency']} "
        f"in flight: {summary['missing']} missing, {summary['duplicates']} duplicates, "
        f"{summary['held_past_grace']} past the {summary['grace_s']} s grace",
        f"drain: first {drain['first_s']} s, last {drain['last_s']} s after the instant, {drain['rate_per_s']}/s",
        f"flows leased {summary['flows_leased']} ({summary['flows_leased_per_held_flow']} a held flow), re-driven "
        f"{summary['flows_redriven']}, compensator backlog peak {summary['compensator_backlog_peak']}",
        *(f"MariaDB {name}: {value['total']} ({value['per_flow']} a flow)" for name, value in mariadb.items()),
        f"node CPU {summary['node_cpu_s']} s ({summary['node_cpu_us_per_flow']} us a flow); load "
        f"{summary['load']['start']} -> {summary['load']['end']}",
    ]
    return lines + [f"[yellow]warning:[/] {warning}" for warning in summary["warnings"]]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m benchmarks held_backlog", description=(__doc__ or "").splitlines()[0])
    top.add_argument("--tasks", type=int, default=20_000, help="one-shot tasks, all due at one instant")
    top.add_argument("--rate", type=float, default=100.0, help="the app's rate_limit_per_s")
    top.add_argument("--concurrency", type=int, default=10, help="the app's max_concurrency")
    top.add_argument("--lead-s", type=float, default=30.0, help="the instant this far ahead (time to register)")
    top.add_argument("--grace-s", type=float, default=30.0, help="compensator.grace_s (a started node gets it)")
    top.add_argument("--batch-size", type=int, default=1000, help="tasks per batch create")
    top.add_argument("--register-concurrency", type=int, default=4, help="batch creates in flight")
    top.add_argument("--drain-timeout-s", type=float, help="after the instant (default: tasks / rate × 1.5 + 60 s)")
    top.add_argument("--settle-s", type=float, default=2.0, help="wait this long after the last task for duplicates")
    target_options(top)
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.tasks < 1 or args.rate <= 0 or args.concurrency < 1 or args.lead_s <= 0:
        raise SystemExit("--tasks and --concurrency must be >= 1, --rate and --lead-s > 0")
    mysql = next((url for url in args.storage or () if url.startswith("mysql")), None)
    settings = {"compensator": {"grace_s": args.grace_s}}
    with (
        bench_target(args, settings) as target,
        contextlib.closing(DbProbe(mysql)) if mysql else contextlib.nullcontext() as probe,
        rich_progress(console) as progress,
    ):
        summary = run(bench(args, target, probe, progress))
    if args.json_out:
        print(json.dumps(summary))
    for line in readable(summary):
        console.print(line)


if __name__ == "__main__":
    main()
