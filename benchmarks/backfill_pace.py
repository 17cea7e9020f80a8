"""``python -m benchmarks backfill_pace``: a paced backfill of 10,000 instants while another app fires.

Issue 30 asks that a backfill of 10,000 instants, paced, does not move other apps' lateness. Two apps of
their own on one node, both delivering to the fire bench's callback sink (:class:`testkit.sink.SinkProcess`):

* app A registers ``--rate`` × window one-shot tasks (batch creates) due uniformly across the window: a
  steady fire load;
* app B registers one task firing every minute (cron ``* * * * *``) and, ``--before-s`` into A's window,
  asks ``POST /v1/tasks/{id}/backfill`` over the ``--instants`` whole minutes that ended two minutes ago,
  at ``--pace`` instants a second, then follows the job (``GET /v1/operator-jobs/{id}``) to its end.

The window is ``--before-s`` + the backfill's expected length (instants / pace) × 1.3 + ``--after-s``.
Figures: A's lateness (receipt at the sink − scheduled instant) p50/p99 of the fires due before the
backfill was asked (``before``), while B's backfilled flows arrived (``during``: first to last receipt)
and after; the backfill's duration (the job's created → finished, and first → last backfilled callback)
and pace (the job makes a second's instants at once, then waits out the second: a backfill of a few
seconds reads above its pace); the node's CPU (cores) in each phase. Exactly once: every instant of the
range reached the sink (``missing``), none twice (``duplicates``), none outside it, and the job says
``processed == total``, ``failed`` 0. Run::

    python -m benchmarks backfill_pace --storage mysql+asyncmy://root@127.0.0.1:3306 --rate 500 --json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from aiohttp import ClientSession, ClientTimeout, TCPConnector

from benchmarks.bench_node import bench_target, console, target_options
from benchmarks.fire import (
    BenchError,
    _await_callbacks,
    _nodes_cpu_s,
    batch_sender,
    create_bench_app,
    register,
    run,
    spread_instants,
    task_bodies,
)
from benchmarks.report import Percentiles, ProgressFn, account, machine, rich_progress
from benchmarks.shard_move import lateness_between, only_records_of
from testkit.sink import CallbackRecords, SinkConfig, SinkProcess

MINUTE_MS = 60_000
ENDED = ("done", "failed", "cancelled")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def backfill_range(now: int, instants: int) -> tuple[int, int]:
    """``[from, to)`` holding ``instants`` whole minutes, ending at the minute two minutes before ``now``."""
    to_ms = (now // MINUTE_MS - 2) * MINUTE_MS
    return to_ms - instants * MINUTE_MS, to_ms


def window_s(args: argparse.Namespace) -> float:
    return float(args.before_s + args.instants / args.pace * 1.3 + args.after_s)


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


async def _call(session: ClientSession, method: str, url: str, key: str, body: Any = None) -> dict[str, Any]:
    data = None if body is None else orjson.dumps(body)
    async with session.request(method, url, data=data, headers=_headers(key)) as response:
        raw = await response.read()
        if response.status not in (200, 201, 202):
            raise BenchError(f"{method} {url} answered {response.status}: {raw[:300].decode(errors='replace')}")
    answer: dict[str, Any] = orjson.loads(raw)
    return answer


def backfill_account(records: CallbackRecords, task_id: int, from_ms: int, to_ms: int) -> dict[str, Any]:
    """How the callbacks of B's task match the backfill's range: the minutes in ``[from_ms, to_ms)``
    received, missing, twice, and callbacks of instants outside it before ``to_ms`` (live fires come after)."""
    seen: Counter[int] = Counter()
    receipts: list[int] = []
    outside = 0
    for recv_us, task, scheduled_ms in zip(records.recv_us, records.task_id, records.scheduled_ms, strict=True):
        if task != task_id or scheduled_ms >= to_ms:
            continue
        if scheduled_ms < from_ms or scheduled_ms % MINUTE_MS:
            outside += 1
            continue
        seen[scheduled_ms] += 1
        receipts.append(recv_us)
    expected = (to_ms - from_ms) // MINUTE_MS
    receipts.sort()
    return {
        "expected": expected,
        "received": len(seen),
        "missing": expected - len(seen),
        "duplicates": sum(count - 1 for count in seen.values()),
        "outside_range": outside,
        "first_us": receipts[0] if receipts else None,
        "last_us": receipts[-1] if receipts else None,
    }


def _iso_ms(value: str | None) -> int | None:
    return None if value is None else round(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


async def _follow(
    session: ClientSession, url: str, key: str, timeout_s: float, progress: ProgressFn | None
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job = await _call(session, "GET", url, key)
        if progress:
            progress("backfill", int(job["processed"]), int(job["total"]))
        if job["state"] in ENDED or time.monotonic() > deadline:
            return job
        await asyncio.sleep(0.5)


async def bench(
    args: argparse.Namespace, target: tuple[str, str, Sequence[int]], progress: ProgressFn | None
) -> dict[str, Any]:
    """One run against ``target`` (base URL, admin key, node pids); the JSON summary."""
    base_url, admin_key, pids = target
    base_url = base_url.rstrip("/")
    warnings: list[str] = []
    load_before = os.getloadavg()
    span_s = window_s(args)
    tasks = max(1, round(args.rate * span_s))
    connector = TCPConnector(limit=args.concurrency + 8)
    async with ClientSession(connector=connector, timeout=ClientTimeout(total=120)) as session:
        key_a, _ = await create_bench_app(session, base_url, admin_key, name="bench-steady")
        key_b, _ = await create_bench_app(session, base_url, admin_key, name="bench-backfill")
        async with SinkProcess(SinkConfig()) as sink:
            callback = {"url": sink.callback_url, "method": "POST", "timeout_ms": 3000}
            schedule = {"kind": "cron", "expr": "* * * * *"}
            body = {"callback": callback, "schedule": schedule, "name": "backfilled"}
            task_b = int((await _call(session, "POST", f"{base_url}/v1/tasks", key_b, body))["id"])
            lead_s = args.lead_s if args.lead_s is not None else tasks / 3000 + 5
            start_ms = now_ms() + round(lead_s * 1000)
            end_ms = start_ms + round(span_s * 1000)
            instants = spread_instants(start_ms, span_s, tasks)
            body_of = task_bodies(callback, "steady", instants.__getitem__)
            sender = batch_sender(base_url, key_a, body_of)
            outcome = await register(
                session, sender, tasks, rate=None, concurrency=args.concurrency, unit=args.batch_size,
                progress=progress,
            )  # fmt: skip
            registered = {
                task_id: instants[index] for task_id, index in zip(outcome.task_ids, outcome.indices, strict=True)
            }
            if outcome.errors:
                warnings.append(f"{outcome.errors} creates failed: {outcome.error_samples}")
            if now_ms() > start_ms:
                warnings.append(f"registration ({outcome.elapsed_s:.1f} s) ran past the lead ({lead_s:.1f} s)")
            await asyncio.sleep(max(0.0, (start_ms - now_ms()) / 1000))
            cpu = [(now_ms(), _nodes_cpu_s(pids))]
            await asyncio.sleep(max(0.0, (start_ms + args.before_s * 1000 - now_ms()) / 1000))
            from_ms, to_ms = backfill_range(now_ms(), args.instants)
            asked_ms = now_ms()
            cpu.append((asked_ms, _nodes_cpu_s(pids)))
            asked = {"from": from_ms, "to": to_ms, "pace_per_s": args.pace}
            job = await _call(session, "POST", f"{base_url}/v1/tasks/{task_b}/backfill", key_b, asked)
            job_url = f"{base_url}/v1/operator-jobs/{job['id']}"
            job = await _follow(session, job_url, key_b, max(60.0, span_s * 2), progress)
            cpu.append((now_ms(), _nodes_cpu_s(pids)))
            if now_ms() > end_ms:
                warnings.append("the backfill outlasted A's window: 'during' lacks its last part")
            drained = await _await_callbacks(sink, len(registered) + 1, end_ms, args.drain_timeout_s, 1.0, 0.25, None)
            cpu.append((now_ms(), _nodes_cpu_s(pids)))
            records = await sink.records()
    return summarise(
        args, registered, records, task_b, (from_ms, to_ms), job, (start_ms, asked_ms, end_ms), cpu, drained,
        warnings, load=(load_before, os.getloadavg()), register_s=outcome.elapsed_s,
    )  # fmt: skip


def _lateness(values: Percentiles) -> dict[str, Any]:
    return {"fires": values.count, "p50": _round(values.p50), "p99": _round(values.p99), "max": _round(values.max)}


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _cores(cpu: Sequence[tuple[int, float | None]]) -> list[float | None]:
    """Node CPU (cores) between consecutive readings."""
    cores: list[float | None] = []
    for (t0, c0), (t1, c1) in itertools.pairwise(cpu):
        cores.append(None if c0 is None or c1 is None or t1 <= t0 else round((c1 - c0) / ((t1 - t0) / 1000), 2))
    return cores


def summarise(
    args: argparse.Namespace,
    registered: Mapping[int, int],
    records: CallbackRecords,
    task_b: int,
    backfilled: tuple[int, int],
    job: Mapping[str, Any],
    window: tuple[int, int, int],
    cpu: Sequence[tuple[int, float | None]],
    drained: bool,
    warnings: list[str],
    *,
    load: tuple[Sequence[float], Sequence[float]],
    register_s: float,
) -> dict[str, Any]:
    """The JSON figures: A's lateness per phase, the backfill's pace and its exactly-once account."""
    start_ms, asked_ms, end_ms = window
    steady = account(registered, only_records_of(records, lambda task_id: task_id in registered))
    fill = backfill_account(records, task_b, *backfilled)
    first_ms = asked_ms if fill["first_us"] is None else fill["first_us"] // 1000
    last_ms = asked_ms if fill["last_us"] is None else fill["last_us"] // 1000
    created_ms, finished_ms = _iso_ms(job.get("created_at")), _iso_ms(job.get("finished_at"))
    job_s = None if created_ms is None or finished_ms is None else (finished_ms - created_ms) / 1000
    callbacks_s = (last_ms - first_ms) / 1000
    if not drained:
        warnings.append("A's drain timed out: some of its fires had no callback")
    cores = _cores(cpu)
    return {
        "bench": "backfill_pace",
        "steady_rate": args.rate,
        "window_s": round(window_s(args), 1),
        "register_s": round(register_s, 2),
        "steady": {
            "registered": len(registered),
            "delivered": steady.delivered,
            "missing": steady.missing,
            "duplicates": steady.duplicates,
            "lateness_ms": {
                "before": _lateness(lateness_between(steady, start_ms, asked_ms)),
                "during": _lateness(lateness_between(steady, first_ms, last_ms + 1)),
                "after": _lateness(lateness_between(steady, last_ms + 1, end_ms)),
            },
        },
        "backfill": {
            "instants": args.instants,
            "pace_asked": args.pace,
            "state": job.get("state"),
            "total": job.get("total"),
            "processed": job.get("processed"),
            "failed": job.get("failed"),
            "job_s": job_s,
            "callbacks_s": round(callbacks_s, 2),
            "pace_achieved": round(fill["received"] / callbacks_s, 1) if callbacks_s > 0 else None,
            "asked_to_first_callback_s": round((first_ms - asked_ms) / 1000, 2),
            **{key: fill[key] for key in ("expected", "received", "missing", "duplicates", "outside_range")},
        },
        "exactly_once": bool(
            fill["missing"] == 0
            and fill["duplicates"] == 0
            and fill["outside_range"] == 0
            and job.get("processed") == job.get("total") == args.instants
            and job.get("failed") == 0
        ),
        "node_cores": {"before": cores[0], "backfill": cores[1], "after": cores[2]} if len(cores) == 3 else None,
        "drained": drained,
        "warnings": warnings,
        "load": {"before": [round(v, 2) for v in load[0]], "after": [round(v, 2) for v in load[1]]},
        "machine": machine(),
    }


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m benchmarks backfill_pace", description=(__doc__ or "").splitlines()[0]
    )
    top.add_argument("--rate", type=float, default=500.0, help="app A's fires a second")
    top.add_argument("--instants", type=int, default=10_000, help="minutes app B backfills")
    top.add_argument("--pace", type=int, default=250, help="the backfill's pace_per_s (1..1000)")
    top.add_argument("--before-s", type=float, default=20.0, help="A's window before the backfill is asked")
    top.add_argument("--after-s", type=float, default=10.0, help="A's window past the backfill's expected end")
    top.add_argument("--lead-s", type=float, help="A's first instant this far ahead (default: tasks / 3000 + 5 s)")
    top.add_argument("--batch-size", type=int, default=1000, help="A's tasks per batch create")
    top.add_argument("--concurrency", type=int, default=4, help="batch creates in flight")
    top.add_argument("--drain-timeout-s", type=float, default=30.0)
    target_options(top)
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.rate <= 0 or args.instants < 1 or not 1 <= args.pace <= 1000:
        raise SystemExit("--rate must be > 0, --instants >= 1, --pace within 1..1000")
    with bench_target(args) as target, rich_progress(console) as progress:
        summary = run(bench(args, target, progress))
    for warning in summary["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}")
    if args.json_out:
        print(json.dumps(summary))
    else:
        console.print_json(data={key: value for key, value in summary.items() if key != "machine"})


if __name__ == "__main__":
    main()
