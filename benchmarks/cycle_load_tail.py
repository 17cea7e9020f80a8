"""What a cycle load does to the fire path's tail (issue 29 item 3: a load of 120,000 tasks raises its
minute's p99 by at most 1.5x).

::

    python -m benchmarks cycle_load_tail --storage mysql+asyncmy://root@127.0.0.1:3306 --rate 2000

One node (``tjobs serve --json-logs``, topology ``--topology``, ``scheduler.cycle_s`` = ``--cycle-s``,
``load_lead_s`` = ``--load-lead-s``, more ``scheduler`` settings with ``--scheduler KEY=VALUE``) on the
given server, and the callback sink. ``--rate`` one-shot tasks a second due across ``--cycles`` cycles
are written straight into the shard tables (as :mod:`benchmarks.shard_move` does), so only cycle loads
bring them into the wheel: each cycle's load, ``load_lead_s`` before the cycle starts, reads
``rate x cycle_s`` tasks (120,000 at 2,000/s and 60 s) while the node fires the current cycle's at
``rate``. The window starts at the first cycle boundary whose load begins after the seeding.

The loads are read off the node's log (``cycle_loaded``: when it ended, how long it took, how many it
loaded). Fires are grouped by scheduled instant into ``--slice-s`` slices; a slice *holds a load* when
it overlaps a load of at least ``--min-load`` tasks (its span, plus 1 s for the backlog it leaves). It
prints each slice's p99, the median and max of the slices' p99 with and without a load, their ratio,
and the pooled p99 of each group's fires; the node's and mariadbd's CPU over the window, and
``mariadb_per_fire``: the server's CPU, statements and ``SHOW GLOBAL STATUS`` counters per delivered fire
over the window (:mod:`benchmarks._db_cost`; the server found by its ``@@pid_file``; every client of a
shared server counts), and the load average. ``--profile FILE`` records the node
with py-spy (raw collapsed stacks) over the window. 0 missing and 0 duplicates expected.

A stored set (issue 29: the fire rate's p99 with 10 M stored tasks and 10 M flows), written before the
window is placed, straight into the shard tables (:mod:`benchmarks._stored_set`, ``--load-workers``
connections): ``--stored-tasks`` parked one-shot tasks of the bench's app due 30 days ahead (far beyond
the window, its drain and any cycle load's range: checked) and ``--stored-flows`` delivered flows (one
attempt, its history and kept answer) with instants spread over the 25 days before the run to the day
before (inside ``retention.days``' 30: the sweeper leaves them). ``stored`` in the output: the counts,
each load's seconds (and per million), the server's ``innodb_buffer_pool_size`` and the task and flow
tables' data and index bytes, read after the drain (``ANALYZE TABLE`` then ``information_schema``; the
window's due tasks and their flows included), so the window meets the tables as a bulk load leaves them.

Creates during cycle loads (``--creates-per-s N``, 0 = off): the node's cycle loads and the API's creates
share one asyncmy connection pool per server, so a load may slow registration. Over the window (the span
the CPU sampler covers) a client in the bench's process posts single one-shot creates
(``POST /v1/tasks`` with the app's API key, bodies as :func:`benchmarks.fire.task_bodies` makes them)
open-loop at N a second: the k-th is sent at ``window start + k / N`` whatever became of the others, at
most ``CREATES_IN_FLIGHT`` (256) unanswered (a send due beyond that is skipped and counted). Each is due a
day after the parked tasks (``PARKED_DUE_IN_MS`` + 1 day after the seeding: beyond every cycle load of
the run, checked as the parked tasks are), so none is loaded or fires. A create's latency runs from its
scheduled send to its full answer (so a client late to send counts it; ``send_lag_ms`` says how late it
was). ``creates`` in the output (null when off): how many were sent, answered 201, skipped, each status
or error's count; the 201s' latency percentiles, and ``by_load``: n, p50, p99 and max of the 201s sent in
a slice that holds a load (the fires' very classification, :class:`LoadSlices`) and of the others, and
their ``p99_ratio``. The creates' own cost is in the window's CPU and ``mariadb_per_fire`` figures (every
client of the server counts), so take those from a run without them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import random
import secrets
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import ClientError, ClientSession
from sqlalchemy.engine import make_url

from benchmarks._db_cost import DbProbe, per_op_net_of_quiet
from benchmarks._stored_set import DAY_MS, load_flows, load_parked, stored_sizes
from benchmarks.fire import _headers, _session, task_bodies
from benchmarks.report import Delivery, Percentiles, account, machine
from benchmarks.shard_move import (
    NODE_SETTINGS,
    PARKED_DUE_IN_MS,
    _round,
    _values,
    create_app,
    drain,
    load_average,
    mint_ids,
    now_ms,
    one_shot,
    say,
    seed,
)
from testkit.databases import drop_databases
from testkit.node_process import node_process, process_cpu_s
from testkit.sink import SinkConfig, SinkProcess
from tjobs.settings import StorageSettings
from tjobs.specs import CallbackSpec
from tjobs.stores.sql_layout import Layout

BACKLOG_MS = 1000  # a slice this close after a load's end still holds it (the fires it held back)
CREATES_IN_FLIGHT = 256  # the paced creates' cap on unanswered requests
CREATE_TIMEOUT_S = 30.0  # a create unanswered this long counts as failed (TimeoutError)
FLOWS_DAYS_AGO = (25, 1)  # the stored flows' instants: from 25 days before the run to 1 day before


def loads_from_log(lines: Sequence[str]) -> list[dict[str, Any]]:
    """The node's ``cycle_loaded`` JSON log lines as ``{"start_ms", "end_ms", "tasks"}``."""
    loads = []
    for line in lines:
        if '"cycle_loaded"' not in line:
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        end_ms = round(float(entry["ts"]) * 1000)
        took_ms = int(str(entry["message"]).rsplit(" in ", 1)[1].split()[0])
        tasks = int(str(entry["message"]).split()[1])
        loads.append({"start_ms": end_ms - took_ms, "end_ms": end_ms, "tasks": tasks})
    return loads


def overlaps_load(from_ms: float, until_ms: float, loads: Sequence[dict[str, Any]]) -> bool:
    """Whether ``[from_ms, until_ms)`` overlaps one of ``loads``: its span plus ``BACKLOG_MS``."""
    return any(load["start_ms"] < until_ms and load["end_ms"] + BACKLOG_MS > from_ms for load in loads)


@dataclass(frozen=True)
class LoadSlices:
    """The window's ``slice_s`` slices from ``start_ms`` over ``span_s`` and which of them hold one of
    ``loads``: the one classification of the fires (by scheduled instant) and the creates (by send)."""

    start_ms: int
    span_s: float
    slice_s: float
    loads: Sequence[dict[str, Any]]

    def index(self, at_ms: float) -> int | None:
        """The slice holding ``at_ms`` (epoch ms); None outside the window."""
        index = int((at_ms - self.start_ms) // (self.slice_s * 1000))
        return index if 0 <= index * self.slice_s < self.span_s else None

    def holds_load(self, index: int) -> bool:
        lo = self.start_ms + index * self.slice_s * 1000
        return overlaps_load(lo, self.start_ms + (index + 1) * self.slice_s * 1000, self.loads)


def slice_figures(
    delivery: Delivery, start_ms: int, span_s: float, slice_s: float, loads: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Each slice's p99 with whether it holds a load; the groups' medians, maxima and pooled p99s."""
    window = LoadSlices(start_ms, span_s, slice_s, loads)
    by_slice: dict[int, list[float]] = {}
    for scheduled_ms, late_ms in delivery.lateness_by_instant:
        if (index := window.index(scheduled_ms)) is not None:
            by_slice.setdefault(index, []).append(late_ms)
    slices = []
    pooled: dict[bool, list[float]] = {True: [], False: []}
    for index in sorted(by_slice):
        values = sorted(by_slice[index])
        held = window.holds_load(index)
        slices.append(
            {"from_s": index * slice_s, "n": len(values), "p99_ms": Percentiles.of(values, presorted=True).p99,
             "max_ms": round(values[-1], 1), "load": held}
        )  # fmt: skip
        pooled[held].extend(values)

    def group(held: bool) -> dict[str, Any]:
        p99s = [s["p99_ms"] for s in slices if s["load"] is held and s["p99_ms"] is not None]
        return {
            "slices": len(p99s),
            "median_p99_ms": round(statistics.median(p99s), 1) if p99s else None,
            "max_p99_ms": round(max(p99s), 1) if p99s else None,
            "pooled": Percentiles.of(sorted(pooled[held]), presorted=True).to_json() if pooled[held] else None,
        }

    with_load, without = group(True), group(False)
    ratio = None
    if with_load["median_p99_ms"] and without["median_p99_ms"]:
        ratio = round(with_load["median_p99_ms"] / without["median_p99_ms"], 2)
    pooled_ratio = None
    if with_load["pooled"] and without["pooled"] and without["pooled"]["p99"]:
        pooled_ratio = round(with_load["pooled"]["p99"] / without["pooled"]["p99"], 2)
    return {
        "with_load": with_load,
        "without_load": without,
        "median_p99_ratio": ratio,
        "pooled_p99_ratio": pooled_ratio,
        "slices": [{**s, "p99_ms": None if s["p99_ms"] is None else round(s["p99_ms"], 1)} for s in slices],
    }


async def sample_cpu(pids: dict[str, int], until_ms: int) -> list[tuple[int, dict[str, float | None]]]:
    """Each process's CPU seconds so far, once a second until ``until_ms``: (epoch ms, by name)."""
    samples: list[tuple[int, dict[str, float | None]]] = []
    while (at := now_ms()) < until_ms:
        samples.append((at, {name: process_cpu_s(pid) for name, pid in pids.items()}))
        await asyncio.sleep(min(1.0, max(0.0, (until_ms - at) / 1000)))
    return samples


def cpu_by_load(
    samples: Sequence[tuple[int, dict[str, float | None]]], loads: Sequence[dict[str, Any]]
) -> dict[str, dict[str, float | None]]:
    """Each process's CPU share (cores) over the sampled seconds that overlap a load (its span plus
    ``BACKLOG_MS``) and over the others."""
    spent: dict[str, dict[bool, float]] = {}
    spans: dict[bool, float] = {True: 0.0, False: 0.0}
    for (at, before), (until, after) in itertools.pairwise(samples):
        held = overlaps_load(at, until, loads)
        spans[held] += (until - at) / 1000
        for name, value in after.items():
            if value is not None and (first := before.get(name)) is not None:
                spent.setdefault(name, {True: 0.0, False: 0.0})[held] += value - first
    return {
        name: {
            "during_loads": round(by[True] / spans[True], 3) if spans[True] else None,
            "outside_loads": round(by[False] / spans[False], 3) if spans[False] else None,
        }
        for name, by in spent.items()
    }


@dataclass(frozen=True)
class Create:
    """One paced create: when it was due to be sent (epoch ms), its latency from then to the full answer
    and how late the client sent it (ms), its HTTP status (0: no answer, ``failure`` names the error)."""

    scheduled_ms: int
    latency_ms: float
    lag_ms: float
    status: int
    failure: str = ""


@dataclass
class CreateRun:
    creates: list[Create] = field(default_factory=list)
    skipped: int = 0  # sends due while ``CREATES_IN_FLIGHT`` creates were unanswered: not sent


async def paced_creates(
    base_url: str, api_key: str, body_of: Callable[[int], bytes], per_s: float, start_ms: int, end_ms: int
) -> CreateRun:
    """``POST /v1/tasks`` with body ``body_of(k)`` due at ``start_ms + k / per_s`` for each such instant
    before ``end_ms``, open-loop: no send waits for an answer; one due while ``CREATES_IN_FLIGHT`` are
    unanswered is skipped (counted). Returns once every sent create is answered or has failed."""
    loop = asyncio.get_running_loop()
    offset_s = loop.time() - time.time()  # the loop's clock ahead of the epoch
    run = CreateRun()
    url, headers = f"{base_url}/v1/tasks", _headers(api_key)
    in_flight: set[asyncio.Task[None]] = set()

    async def one(session: ClientSession, index: int, scheduled_ms: float, due: float) -> None:
        sent = loop.time()
        status, failure = 0, ""
        try:
            async with session.post(url, data=body_of(index), headers=headers) as response:
                await response.read()
                status = response.status
        except (ClientError, TimeoutError) as error:
            failure = type(error).__name__
        latency_ms, lag_ms = (loop.time() - due) * 1000, (sent - due) * 1000
        run.creates.append(Create(round(scheduled_ms), latency_ms, lag_ms, status, failure))

    async with _session(CREATES_IN_FLIGHT, CREATE_TIMEOUT_S) as session:
        for index in itertools.count():
            scheduled_ms = start_ms + index * 1000 / per_s
            if scheduled_ms >= end_ms:
                break
            due = scheduled_ms / 1000 + offset_s
            await asyncio.sleep(max(0.0, due - loop.time()))
            if len(in_flight) >= CREATES_IN_FLIGHT:
                run.skipped += 1
                continue
            task = asyncio.create_task(one(session, index, scheduled_ms, due))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        await asyncio.gather(*in_flight)
    run.creates.sort(key=lambda create: create.scheduled_ms)
    return run


def create_figures(run: CreateRun, per_s: float, window: LoadSlices) -> dict[str, Any]:
    """The paced creates' counts by status and their 201s' latency, overall and by whether the slice
    they were sent in holds a load (as :func:`slice_figures` classifies the fires)."""
    created = [create for create in run.creates if create.status == 201]
    by_status = Counter(str(create.status) if create.status else create.failure for create in run.creates)
    held: dict[int, bool] = {}
    by_load: dict[bool, list[float]] = {True: [], False: []}
    for create in created:
        if (index := window.index(create.scheduled_ms)) is not None:
            if index not in held:
                held[index] = window.holds_load(index)
            by_load[held[index]].append(create.latency_ms)

    def group(values: list[float]) -> dict[str, Any]:
        figures = Percentiles.of(sorted(values), presorted=True)
        return {"n": figures.count, "p50": _round(figures.p50), "p99": _round(figures.p99), "max": _round(figures.max)}

    with_load, without = group(by_load[True]), group(by_load[False])
    ratio = round(with_load["p99"] / without["p99"], 2) if with_load["p99"] and without["p99"] else None
    lags = Percentiles.of(sorted(create.lag_ms for create in run.creates), presorted=True)
    return {
        "per_s": per_s,
        "sent": len(run.creates),
        "answered_201": len(created),
        "by_status": dict(sorted(by_status.items())),
        "skipped_in_flight_cap": run.skipped,
        "latency": Percentiles.of(sorted(create.latency_ms for create in created), presorted=True).to_json(),
        # how late the client sent them (its own delay, inside the latencies)
        "send_lag_ms": {"p99": _round(lags.p99), "max": _round(lags.max)},
        "by_load": {"with_load": with_load, "without_load": without, "p99_ratio": ratio},
    }


def parked_clear_of_loads(far_ms: int, window_end_ms: int, cycle_s: int, lead_s: int, drain_s: float) -> bool:
    """Whether parked tasks due from ``far_ms`` lie beyond every cycle load of the run: the window, its
    drain, and the cycle a load reads ``lead_s`` ahead of it."""
    return far_ms > window_end_ms + round(drain_s * 1000) + (cycle_s + lead_s) * 1000


def stored_figures(tasks: int, flows: int, tasks_s: float, flows_s: float) -> dict[str, Any]:
    """The stored set's counts and load seconds, total and per million rows."""

    def per_million(seconds: float, rows: int) -> float | None:
        return round(seconds / (rows / 1e6), 1) if rows else None

    return {
        "tasks": tasks,
        "flows": flows,
        "load_s": {"tasks": round(tasks_s, 1), "flows": round(flows_s, 1)},
        "s_per_million": {"tasks": per_million(tasks_s, tasks), "flows": per_million(flows_s, flows)},
        "parked_due_in_days": PARKED_DUE_IN_MS // DAY_MS,
        "flows_days_ago": list(FLOWS_DAYS_AGO),
    }


async def load_stored(
    args: argparse.Namespace, layout: Layout, app_id: str, callback: CallbackSpec, started: int
) -> dict[str, Any]:
    """Write the stored set (``--stored-tasks`` parked tasks, ``--stored-flows`` delivered flows)."""
    tasks_s = flows_s = 0.0
    if args.stored_tasks:
        far_ms = started + PARKED_DUE_IN_MS
        template = _values(one_shot(0, app_id, far_ms, callback, started))
        say(f"storing {args.stored_tasks:,} parked tasks ({args.load_workers} connections)")
        clock = time.perf_counter()
        await asyncio.to_thread(load_parked, layout, template, args.stored_tasks, far_ms, args.load_workers)
        tasks_s = time.perf_counter() - clock
        say(f"stored in {tasks_s:.1f} s")
    if args.stored_flows:
        task = one_shot(0, app_id, started, callback, started)
        since, until = (started - days * DAY_MS for days in FLOWS_DAYS_AGO)
        say(f"storing {args.stored_flows:,} delivered flows ({args.load_workers} connections)")
        clock = time.perf_counter()
        await asyncio.to_thread(load_flows, layout, task, args.stored_flows, since, until, args.load_workers)
        flows_s = time.perf_counter() - clock
        say(f"stored in {flows_s:.1f} s")
    return stored_figures(args.stored_tasks, args.stored_flows, tasks_s, flows_s)


def _db_probe(url: str) -> DbProbe | None:
    """A probe of the bench's MariaDB server (found by its ``@@pid_file``, not by ``pidof``: a box may
    run several), or None on another backend."""
    return DbProbe(url) if make_url(url).get_backend_name() == "mysql" else None


def _scheduler(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"cycle_s": args.cycle_s, "load_lead_s": args.load_lead_s}
    for pair in args.scheduler:
        key, _, value = pair.partition("=")
        settings[key] = json.loads(value)
    return settings


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"tjbench_{secrets.token_hex(3)}"
    storage = StorageSettings(urls=[args.storage], topology=args.topology, database_prefix=prefix)
    layout = Layout(storage)
    loads_avg = {"start": load_average()}
    cycle_ms = args.cycle_s * 1000
    scheduler = _scheduler(args)
    settings = {**NODE_SETTINGS, "scheduler": scheduler, "storage": {"database_prefix": prefix}}
    node_dir = Path(args.node_dir) if args.node_dir else None
    serve = ("-m", "tjobs.cli.main", "serve", "--json-logs")
    try:
        with node_process(
            storage_urls=[args.storage],
            topology=args.topology,
            settings=settings,
            work_dir=node_dir,
            serve_command=serve,
        ) as node:
            say(f"node {node.pid} on {node.base_url} (log {node.log_path}); databases {prefix}_*")
            async with ClientSession() as session:
                app_id, api_key = await create_app(session, node.base_url, node.admin_key)
            async with SinkProcess(SinkConfig()) as sink:
                callback = CallbackSpec((sink.callback_url,), timeout_ms=3000)
                stored_at = now_ms()
                stored = await load_stored(args, layout, app_id, callback, stored_at)
                due_count = round(args.rate * args.cycle_s * args.cycles)
                # the window: the first cycle boundary whose load starts after the seeding (~15,000 rows/s)
                ready_ms = now_ms() + round(due_count / 15_000 * 1000) + 5_000
                window_start = (ready_ms + args.load_lead_s * 1000) // cycle_ms * cycle_ms + cycle_ms
                window_end = window_start + args.cycles * cycle_ms
                if args.stored_tasks and not parked_clear_of_loads(
                    stored_at + PARKED_DUE_IN_MS, window_end, args.cycle_s, args.load_lead_s, args.drain_timeout_s
                ):
                    raise SystemExit("the parked tasks would come due within the run: fewer cycles")
                creates_due_ms = stored_at + PARKED_DUE_IN_MS + DAY_MS  # after the parked tasks
                if args.creates_per_s and not parked_clear_of_loads(
                    creates_due_ms, window_end, args.cycle_s, args.load_lead_s, args.drain_timeout_s
                ):
                    raise SystemExit("the paced creates would come due within the run: fewer cycles")
                rng = random.Random(7)
                shards = list(layout.topology.shards())
                started = now_ms()
                ids = mint_ids([rng.choice(shards) for _ in range(due_count)], started - 2 * 86_400_000)
                registered = {task_id: window_start + math.floor(n * 1000 / args.rate) for n, task_id in enumerate(ids)}
                due = [one_shot(task_id, app_id, at, callback, started) for task_id, at in registered.items()]
                say(f"seeding {due_count:,} due tasks ({args.rate:g}/s over {args.cycles} cycles of {args.cycle_s} s)")
                clock = time.perf_counter()
                await asyncio.to_thread(seed, layout, due)
                seed_s = time.perf_counter() - clock
                del due, ids
                warnings = []
                if now_ms() > window_start - args.load_lead_s * 1000:
                    warnings.append("seeded after the window's first load began: its early fires are late")
                say(f"seeded in {seed_s:.1f} s; the window starts in {(window_start - now_ms()) / 1000:.0f} s")
                await asyncio.sleep(max(0.0, (window_start - now_ms()) / 1000))
                probe = _db_probe(args.storage)
                try:
                    server = probe.pid if probe is not None else None
                    pids = {"node": node.pid, **({"mariadbd": server} if server else {})}
                    cpu_before = {name: process_cpu_s(pid) for name, pid in pids.items()}
                    db_before = (probe.read(), time.monotonic()) if probe is not None else None
                    spy: asyncio.subprocess.Process | None = None
                    if args.profile:
                        spy = await asyncio.create_subprocess_exec(
                            str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "-r", "100",
                            "-p", str(node.pid), "-o", args.profile, "-d", str(args.cycles * args.cycle_s),
                            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                        )  # fmt: skip
                    loads_avg["window_start"] = load_average()
                    creating = None
                    if args.creates_per_s:
                        callback_body = {"url": sink.callback_url, "method": "POST", "timeout_ms": 3000}
                        body_of = task_bodies(callback_body, "paced-create", lambda _: creates_due_ms)
                        creating = asyncio.ensure_future(
                            paced_creates(node.base_url, api_key, body_of, args.creates_per_s, window_start, window_end)
                        )
                    samples = await sample_cpu(pids, window_end)
                    cpu_after = {name: process_cpu_s(pid) for name, pid in pids.items()}
                    db_after = (probe.read(), time.monotonic()) if probe is not None else None
                finally:  # its connection is to the bench's own server: never left open on a failed window
                    if probe is not None:
                        probe.close()
                creates = await creating if creating is not None else None
                loads_avg["window_end"] = load_average()
                records = await drain(sink, len(registered), window_end, args.drain_timeout_s, loads_avg)
                if spy is not None:
                    await asyncio.wait_for(spy.wait(), 60)
                log_lines = node.log_path.read_text(errors="replace").splitlines()
                if args.stored_tasks or args.stored_flows:
                    say("reading the tables' sizes (ANALYZE TABLE on each)")
                    stored |= await asyncio.to_thread(stored_sizes, layout)
    finally:
        if not args.keep:
            drop_databases(storage)

    delivery = account(registered, records)
    loads = [
        load for load in loads_from_log(log_lines) if load["end_ms"] > window_start and load["start_ms"] < window_end
    ]
    big = [load for load in loads if load["tasks"] >= args.min_load]
    span_s = args.cycles * args.cycle_s
    creates_json = None
    if creates is not None:
        creates_json = create_figures(creates, args.creates_per_s, LoadSlices(window_start, span_s, args.slice_s, big))
        if creates_json["answered_201"] < creates_json["sent"] or creates.skipped:
            warnings.append(
                f"paced creates not all answered 201: {creates_json['by_status']}, {creates.skipped} skipped"
            )
    cpu = {
        name: round(after - before, 1)
        for name, after in cpu_after.items()
        if after is not None and (before := cpu_before[name]) is not None
    }
    fires = delivery.delivered or 1
    mariadb = None
    if db_before is not None and db_after is not None:
        window = (db_before[0], db_after[0], db_after[1] - db_before[1])
        mariadb = per_op_net_of_quiet(window, fires, None)
    return {
        "bench": "cycle_load_tail",
        "rate_per_s": args.rate,
        "cycles": args.cycles,
        "topology": args.topology,
        "scheduler": scheduler,
        "seed_s": round(seed_s, 1),
        "stored": stored,
        "loads": [
            {
                "at_s": round((load["start_ms"] - window_start) / 1000, 1),
                "took_s": round((load["end_ms"] - load["start_ms"]) / 1000, 2),
                "tasks": load["tasks"],
            }
            for load in loads
        ],
        "fires": {
            "registered": delivery.registered,
            "delivered": delivery.delivered,
            "missing": delivery.missing,
            "duplicates": delivery.duplicates,
            # same_flow: one flow's callback again (a re-delivery); extra_flows: a second flow of one task
            "duplicates_detail": {"same_flow": delivery.same_flow, "extra_flows": delivery.extra_flows},
            "retried_callbacks": delivery.retried,
            "lateness": Percentiles.of(delivery.lateness_ms, presorted=True).to_json(),
        },
        "slices": slice_figures(delivery, window_start, span_s, args.slice_s, big),
        "creates": creates_json,
        "cpu_s_window": cpu,
        "cpu_cores_by_load": cpu_by_load(samples, big),
        "us_per_fire_window": {name: round(seconds * 1e6 / fires, 1) for name, seconds in cpu.items()},
        # the server's CPU, statements and counters over the window per delivered fire (gross: every client)
        "mariadb_per_fire": mariadb,
        "load_average": loads_avg,
        "warnings": warnings,
        "machine": machine(),
    }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks cycle_load_tail", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--storage", default="mysql+asyncmy://root@127.0.0.1:3306")
    parser.add_argument("--topology", default="8x4x16")
    parser.add_argument("--rate", type=float, default=2000.0, help="fires per second due")
    parser.add_argument("--cycle-s", type=int, default=60)
    parser.add_argument("--load-lead-s", type=int, default=30)
    parser.add_argument("--cycles", type=int, default=3, help="cycles of due tasks (the window)")
    parser.add_argument("--slice-s", type=float, default=10.0)
    parser.add_argument("--min-load", type=int, default=1000, help="a load of fewer tasks is not a load here")
    parser.add_argument("--scheduler", action="append", default=[], help="KEY=JSON: another scheduler setting")
    parser.add_argument("--drain-timeout-s", type=float, default=60.0)
    parser.add_argument("--profile", help="py-spy raw collapsed stacks of the node over the window, to this file")
    parser.add_argument("--node-dir", help="the node's work directory, kept afterwards (its log, node.log)")
    parser.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    parser.add_argument("--stored-tasks", type=_count, default=0, help="parked tasks stored before the window")
    parser.add_argument("--stored-flows", type=_count, default=0, help="delivered flows stored before the window")
    parser.add_argument("--load-workers", type=int, default=2, help="connections writing the stored set")
    parser.add_argument(
        "--creates-per-s", type=float, default=0.0, help="single creates over HTTP a second in the window (0: none)"
    )
    return parser


def _count(text: str) -> int:
    value = int(text.replace("_", "").replace(",", ""))
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: not a count")
    return value


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    print(json.dumps(asyncio.run(bench(args)), indent=1))


if __name__ == "__main__":
    main()
