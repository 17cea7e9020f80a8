"""``python -m benchmarks run_reports``: job runs at a target rate, what a run's reports cost the node and MariaDB.

Issue 30 asks the cost of run reports at 2,000 runs/s. The bench creates an app, starts a receiver in a
process of its own, and registers ``--tasks`` one-shot tasks (batch creates) due uniformly across
``--window-s`` (``tasks / window_s`` runs a second) whose callback is the receiver. The receiver is an
executor of the HTTP contract (docs/targets.md, "Runs"): it answers every fire ``202`` with
``tjobs-run: accepted`` and hands it to ``--reporters`` workers, which send ``POST
/v1/flows/{id}/report`` with the app's key: with ``--progress`` first a ``running`` report (progress 50),
then the final ``succeeded`` with a small ``result``. A report that fails (no answer, 5xx) is sent again
(at most 3 times: a repeat answers ``"repeated": true``).

Figures: ``reports_per_s`` (final reports answered 200, over the span from the first such answer to
the last; ``reports_per_s_in_window`` counts only those answered inside the window), node CPU per run
(fire, delivery, the run's start and its reports: the node's ``/proc`` CPU from half a second before
the window to the drain's end) and per report call, MariaDB's CPU and statements per run over the same
span (:mod:`benchmarks._db_cost`; other clients of the server count too), the report calls' latency
(sent → answered, retries included), ``accept_lateness_ms`` (instant → the receiver got the fire) and
``run_end_ms`` (instant → the final report answered). Exactly once: after the drain the app's flows are
read back over ``GET /v1/flows``; ``lost`` is registered tasks without a flow that ended ``delivered``
with its run ``succeeded``, ``double_ended`` counts flows whose final report was taken twice (two
answers 200 not ``repeated``), fires received twice and extra flows of one task. ``quiet`` is what the
node and MariaDB spent a second between the registration's end and the window (other clients of the
server included); ``net_of_quiet_per_run`` is the window's figures less that rate. Run::

    python -m benchmarks run_reports --storage mysql+asyncmy://root@127.0.0.1:3306 \\
        --tasks 60000 --window-s 30 --progress --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import time
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

import orjson
from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from benchmarks._db_cost import DbProbe, DbReading, db_cost
from benchmarks.bench_node import bench_target, console, target_options
from benchmarks.fire import (
    BenchError,
    _nodes_cpu_s,
    batch_sender,
    create_bench_app,
    register,
    run,
    spread_instants,
    task_bodies,
)
from benchmarks.report import Percentiles, ProgressFn, machine, rich_progress

REPORT_TRIES = 3
CPU_LEAD_S = 0.5  # node and MariaDB CPU are counted from this long before the window
RESULT = {"ok": True, "rows": 1234, "note": "bench"}  # a small result, as most runs would give


def now_us() -> int:
    return time.time_ns() // 1000


# ---- the receiver (its own process) --------------------------------------------------------------


@dataclass(frozen=True)
class ReceiverConfig:
    base_url: str  # the node the reports go to
    api_key: str
    reporters: int = 64  # reports in flight
    progress: bool = False  # a `running` report before the final one
    report_timeout_s: float = 30.0


@dataclass
class ReceiverState:
    """What the receiver saw and what its reports were answered, per flow and in total."""

    callbacks: Counter[str] = field(default_factory=Counter)  # flow id -> fires received
    retried_attempts: int = 0  # fires with tjobs-attempt > 1
    final_ok: Counter[str] = field(default_factory=Counter)  # flow id -> final reports taken (200, not repeated)
    final_repeated: int = 0
    answers: Counter[str] = field(default_factory=Counter)  # "final 200", "progress 409", "final error", ...
    error_samples: list[str] = field(default_factory=list)
    ended_us: array[int] = field(default_factory=lambda: array("q"))  # when each final report was answered
    final_ms: array[float] = field(default_factory=lambda: array("d"))  # final report latency
    progress_ms: array[float] = field(default_factory=lambda: array("d"))
    accept_lateness_ms: array[float] = field(default_factory=lambda: array("d"))  # instant -> fire received
    run_end_ms: array[float] = field(default_factory=lambda: array("d"))  # instant -> final answered
    in_flight: int = 0

    def light(self) -> dict[str, Any]:
        return {
            "callbacks": sum(self.callbacks.values()),
            "flows": len(self.callbacks),
            "ended": sum(self.final_ok.values()) + self.final_repeated,
            "in_flight": self.in_flight,
        }

    def full(self) -> dict[str, Any]:
        return {
            **self.light(),
            "fires_received_twice": sum(1 for count in self.callbacks.values() if count > 1),
            "retried_attempts": self.retried_attempts,
            "flows_ended": len(self.final_ok),
            "double_ended": sum(1 for count in self.final_ok.values() if count > 1),
            "final_repeated": self.final_repeated,
            "answers": dict(self.answers),
            "error_samples": self.error_samples,
            "ended_us": list(self.ended_us),
            "final_ms": list(self.final_ms),
            "progress_ms": list(self.progress_ms),
            "accept_lateness_ms": list(self.accept_lateness_ms),
            "run_end_ms": list(self.run_end_ms),
            "cpu_s": time.process_time(),
        }


class Receiver:
    """Answers fires 202 (a run) and reports each run's end to the node."""

    def __init__(self, config: ReceiverConfig) -> None:
        self.config = config
        self.state = ReceiverState()
        self.queue: asyncio.Queue[tuple[str, int, int]] = asyncio.Queue()
        self.url = config.base_url.rstrip("/") + "/v1/flows/{}/report"
        self.headers = {"Authorization": f"Bearer {config.api_key}", "Content-Type": "application/json"}

    async def fire(self, request: web.Request) -> web.Response:
        await request.read()
        flow = request.headers.get("webhook-id", "")
        attempt = int(request.headers.get("tjobs-attempt", "1"))
        scheduled_ms = int(request.headers.get("tjobs-scheduled-at", "0"))
        self.state.callbacks[flow] += 1
        if attempt > 1:
            self.state.retried_attempts += 1
        self.state.accept_lateness_ms.append(time.time_ns() / 1e6 - scheduled_ms)
        self.queue.put_nowait((flow, attempt, scheduled_ms))
        return web.Response(status=202, headers={"tjobs-run": "accepted"})

    async def stats(self, request: web.Request) -> web.Response:
        body = self.state.full() if request.query.get("full") else self.state.light()
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def reporter(self, session: ClientSession) -> None:
        while True:
            flow, attempt, scheduled_ms = await self.queue.get()
            self.state.in_flight += 1
            try:
                if self.config.progress:
                    await self.report(session, flow, {"status": "running", "attempt": attempt, "progress": 50}, False)
                final = {"status": "succeeded", "attempt": attempt, "result": RESULT}
                if await self.report(session, flow, final, True):
                    self.state.run_end_ms.append(time.time_ns() / 1e6 - scheduled_ms)
            finally:
                self.state.in_flight -= 1

    async def report(self, session: ClientSession, flow: str, body: Mapping[str, Any], final: bool) -> bool:
        """Send one report (again on no answer or a 5xx); whether it was answered 200."""
        kind, state = ("final" if final else "progress"), self.state
        started = time.perf_counter()
        payload = orjson.dumps(body)
        for _ in range(REPORT_TRIES):
            try:
                async with session.post(self.url.format(flow), data=payload, headers=self.headers) as response:
                    raw = await response.read()
                    status = response.status
            except (ClientError, TimeoutError) as error:
                state.answers[f"{kind} error"] += 1
                self._sample(f"{flow}: {type(error).__name__}: {error}")
                continue
            state.answers[f"{kind} {status}"] += 1
            if status >= 500:
                self._sample(f"{flow}: {status} {raw[:200].decode(errors='replace')}")
                continue
            spent_ms = (time.perf_counter() - started) * 1000
            (state.final_ms if final else state.progress_ms).append(spent_ms)
            if status != 200:
                self._sample(f"{flow}: {kind} answered {status} {raw[:200].decode(errors='replace')}")
                return False
            if final:
                if orjson.loads(raw).get("repeated"):
                    state.final_repeated += 1
                else:
                    state.final_ok[flow] += 1
                    state.ended_us.append(now_us())
            return True
        return False

    def _sample(self, line: str) -> None:
        if len(self.state.error_samples) < 5:
            self.state.error_samples.append(line)


async def _serve(config: ReceiverConfig, pipe: Connection) -> None:
    receiver = Receiver(config)
    app = web.Application()
    app.router.add_post("/cb", receiver.fire)
    app.router.add_get("/_stats", receiver.stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]
    timeout = ClientTimeout(total=config.report_timeout_s)
    connector = TCPConnector(limit=config.reporters + 4)
    async with ClientSession(connector=connector, timeout=timeout) as session:
        workers = [asyncio.create_task(receiver.reporter(session)) for _ in range(config.reporters)]
        pipe.send(port)
        await asyncio.Event().wait()  # until the parent terminates this process
        for worker in workers:  # pragma: no cover - never reached
            worker.cancel()


def _receiver_main(config: ReceiverConfig, pipe: Connection) -> None:
    run(_serve(config, pipe))


class ReceiverProcess:
    """The receiver in a child process (spawned), stopped by its own pid."""

    def __init__(self, config: ReceiverConfig, start_timeout_s: float = 20.0) -> None:
        context = multiprocessing.get_context("spawn")
        self._ours, theirs = context.Pipe()
        self._process = context.Process(target=_receiver_main, args=(config, theirs), daemon=True)
        self._start_timeout_s = start_timeout_s
        self.base_url = ""
        self._session: ClientSession | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def callback_url(self) -> str:
        return self.base_url + "/cb"

    async def __aenter__(self) -> ReceiverProcess:
        self._process.start()
        ready = await asyncio.to_thread(self._ours.poll, self._start_timeout_s)
        if not ready:
            self._process.terminate()
            raise BenchError("the run receiver did not start")
        self.base_url = f"http://127.0.0.1:{self._ours.recv()}"
        self._session = ClientSession(timeout=ClientTimeout(total=60))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()
        self._process.terminate()
        await asyncio.to_thread(self._process.join, 10)

    async def stats(self, full: bool = False) -> dict[str, Any]:
        assert self._session is not None
        async with self._session.get(self.base_url + "/_stats" + ("?full=1" if full else "")) as response:
            response.raise_for_status()
            answer: dict[str, Any] = orjson.loads(await response.read())
            return answer


# ---- reading the flows back ----------------------------------------------------------------------


async def store_check(
    session: ClientSession, base_url: str, api_key: str, task_ids: Sequence[int], page: int = 1000
) -> dict[str, Any]:
    """Every flow of the app, read back over ``GET /v1/flows``: how many ended ``delivered`` with their run
    ``succeeded``, what the others are, and the tasks with no such flow or with more than one flow."""
    headers = {"Authorization": f"Bearer {api_key}"}
    states: Counter[str] = Counter()
    flows_of: Counter[int] = Counter()
    succeeded: set[int] = set()
    cursor: str | None = None
    while True:
        params = {"limit": str(page), **({"cursor": cursor} if cursor else {})}
        async with session.get(f"{base_url}/v1/flows", params=params, headers=headers) as response:
            raw = await response.read()
            if response.status != 200:
                raise BenchError(f"GET /v1/flows answered {response.status}: {raw[:300].decode(errors='replace')}")
        body = orjson.loads(raw)
        for flow in body["items"]:
            run_status = (flow.get("run") or {}).get("status", "none")
            states[f"{flow['status']}/{run_status}"] += 1
            task_id = int(flow["task_id"])
            flows_of[task_id] += 1
            if flow["status"] == "delivered" and run_status == "succeeded":
                succeeded.add(task_id)
        cursor = body.get("next_cursor")
        if not cursor:
            break
    registered = set(task_ids)
    return {
        "flows": sum(states.values()),
        "by_status": dict(states),
        "tasks_succeeded": len(succeeded & registered),
        "tasks_without_success": len(registered - succeeded),
        "tasks_with_extra_flows": sum(1 for count in flows_of.values() if count > 1),
    }


# ---- the bench -----------------------------------------------------------------------------------


def _pct(values: Sequence[float]) -> dict[str, float | None]:
    return Percentiles.of(values).to_json()


async def _drain(
    receiver: ReceiverProcess, expected: int, end_ms: int, timeout_s: float, progress: ProgressFn | None
) -> bool:
    deadline_ms = end_ms + round(timeout_s * 1000)
    while True:
        light = await receiver.stats()
        if progress:
            progress("runs ended", min(light["ended"], expected), expected)
        now_ms = time.time_ns() // 1_000_000
        if now_ms >= end_ms and light["ended"] >= expected and light["in_flight"] == 0:
            return True
        if now_ms >= deadline_ms:
            return False
        await asyncio.sleep(0.25)


async def bench(
    args: argparse.Namespace,
    target: tuple[str, str, Sequence[int]],
    progress: ProgressFn | None,
    storage_url: str | None = None,
) -> dict[str, Any]:
    """One run of the bench against ``target`` (base URL, admin key, node pids); the JSON summary."""
    base_url, admin_key, pids = target
    base_url = base_url.rstrip("/")
    warnings: list[str] = []
    probe = DbProbe(storage_url) if storage_url and storage_url.startswith("mysql") else None
    load_before = os.getloadavg()
    connector = TCPConnector(limit=args.concurrency + 4)
    async with ClientSession(connector=connector, timeout=ClientTimeout(total=120)) as session:
        api_key, _ = await create_bench_app(
            session, base_url, admin_key, name="bench-runs", max_concurrency=args.max_concurrency
        )
        config = ReceiverConfig(base_url, api_key, reporters=args.reporters, progress=args.progress)
        async with ReceiverProcess(config) as receiver:
            lead_s = args.lead_s if args.lead_s is not None else args.tasks / 3000 + 5
            start_ms = time.time_ns() // 1_000_000 + round(lead_s * 1000)
            end_ms = start_ms + round(args.window_s * 1000)
            instants = spread_instants(start_ms, args.window_s, args.tasks)
            callback = {"url": receiver.callback_url, "method": "POST", "timeout_ms": 3000}
            body_of = task_bodies(callback, "run", instants.__getitem__)
            sender = batch_sender(base_url, api_key, body_of)
            outcome = await register(
                session, sender, args.tasks, rate=None, concurrency=args.concurrency, unit=args.batch_size,
                progress=progress,
            )  # fmt: skip
            if outcome.errors:
                warnings.append(f"{outcome.errors} creates failed: {outcome.error_samples}")
            if time.time_ns() // 1_000_000 > start_ms:
                warnings.append(f"registration ({outcome.elapsed_s:.1f} s) ran past the lead ({lead_s:.1f} s)")
            quiet = (time.monotonic(), _nodes_cpu_s(pids), _db_read(probe))
            await asyncio.sleep(max(0.0, (start_ms - time.time_ns() // 1_000_000) / 1000 - CPU_LEAD_S))
            busy = (time.monotonic(), _nodes_cpu_s(pids), _db_read(probe))
            drained = await _drain(receiver, len(outcome.task_ids), end_ms, args.drain_timeout_s, progress)
            done = (time.monotonic(), _nodes_cpu_s(pids), _db_read(probe))
            seen = await receiver.stats(full=True)
        store = await store_check(session, base_url, api_key, outcome.task_ids)
    if probe is not None:
        probe.close()
    return summarise(
        args, seen, store, len(outcome.task_ids), (start_ms, end_ms), drained,
        (quiet, busy, done), warnings,
        register_s=outcome.elapsed_s, load=(load_before, os.getloadavg()),
    )  # fmt: skip


Reading = tuple[float, float | None, DbReading | None]  # monotonic time, node CPU, MariaDB's reading


def _background(readings: tuple[Reading, Reading, Reading]) -> dict[str, Any]:
    """What the node and MariaDB spent a second between the registration's end and the window (the
    node loading the due tasks, its passes; other clients of the server): to subtract from the window's."""
    (t0, node0, db0), (t1, node1, db1), _ = readings
    seconds = t1 - t0
    node = _spent(node0, node1)
    quiet: dict[str, Any] = {"seconds": round(seconds, 2), "node_cores": None if node is None else node / seconds}
    if db0 is not None and db1 is not None:
        cost = db_cost(db0, db1, 1)
        cpu = cost["cpu_us_per_op"]
        quiet["mariadb_cores"] = None if cpu is None else cpu / 1e6 / seconds
        quiet["mariadb_statements_per_s"] = cost["statements_per_op"] / seconds
    return {key: round(value, 3) if isinstance(value, float) else value for key, value in quiet.items()}


def _net(
    quiet: Mapping[str, Any] | None,
    node_cpu_s: float | None,
    db_before: DbReading | None,
    db_after: DbReading | None,
    seconds: float,
    runs: int,
) -> dict[str, float | None] | None:
    """Per run, the window's node CPU, MariaDB CPU and statements less the quiet rate over its length."""
    if quiet is None or not runs:
        return None

    def less(total: float | None, rate: float | None) -> float | None:
        return None if total is None or rate is None else round((total - rate * seconds) / runs, 3)

    net: dict[str, float | None] = {
        "node_cpu_us": less(
            None if node_cpu_s is None else node_cpu_s * 1e6,
            None if quiet["node_cores"] is None else quiet["node_cores"] * 1e6,
        )
    }
    if db_before is not None and db_after is not None and "mariadb_cores" in quiet:
        gross = db_cost(db_before, db_after, 1)
        cpu = gross["cpu_us_per_op"]
        cores = quiet["mariadb_cores"]
        net["mariadb_cpu_us"] = less(cpu, None if cores is None else cores * 1e6)
        net["mariadb_statements"] = less(gross["statements_per_op"], quiet["mariadb_statements_per_s"])
    return net


def _db_read(probe: DbProbe | None) -> DbReading | None:
    return probe.read() if probe is not None else None


def _spent(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def summarise(
    args: argparse.Namespace,
    seen: Mapping[str, Any],
    store: Mapping[str, Any],
    registered: int,
    window: tuple[int, int],
    drained: bool,
    readings: tuple[Reading, Reading, Reading],
    warnings: list[str],
    *,
    register_s: float,
    load: tuple[Sequence[float], Sequence[float]],
) -> dict[str, Any]:
    """The bench's JSON figures from what the receiver saw and what the store holds."""
    start_ms, end_ms = window
    ended = int(seen["flows_ended"])
    ended_us = sorted(seen["ended_us"])
    span_s = (ended_us[-1] - ended_us[0]) / 1e6 if len(ended_us) > 1 else 0.0
    in_window = sum(1 for at_us in ended_us if start_ms * 1000 <= at_us < end_ms * 1000)
    answers: Mapping[str, int] = seen["answers"]
    report_calls = sum(count for key, count in answers.items() if not key.endswith("error"))
    lost = int(store["tasks_without_success"])
    double_ended = int(seen["double_ended"]) + int(seen["fires_received_twice"]) + int(store["tasks_with_extra_flows"])
    if not drained:
        warnings.append("the drain timed out: not every run ended before --drain-timeout-s")
    (quiet_t, _, _), (busy_t, node_before, db_before), (done_t, node_after, db_after) = readings
    node_cpu_s = _spent(node_before, node_after)
    quiet_s, busy_s = busy_t - quiet_t, done_t - busy_t
    background = _background(readings) if quiet_s >= 1.0 else None
    return {
        "bench": "run_reports",
        "tasks": args.tasks,
        "window_s": args.window_s,
        "target_runs_per_s": round(args.tasks / args.window_s, 1),
        "progress_reports": bool(args.progress),
        "registered": registered,
        "register_s": round(register_s, 2),
        "drained": drained,
        "runs": {
            "accepted": seen["flows"],
            "ended": ended,
            "lost": lost,
            "double_ended": double_ended,
            "retried_attempts": seen["retried_attempts"],
            "final_repeated": seen["final_repeated"],
        },
        "reports_per_s": round((len(ended_us) - 1) / span_s, 1) if span_s else None,
        "reports_per_s_in_window": round(in_window / args.window_s, 1),
        "reports_span_s": round(span_s, 2),
        "report_calls": report_calls,
        "answers": answers,
        "node_cpu_us_per_run": None if node_cpu_s is None or not ended else round(node_cpu_s * 1e6 / ended, 1),
        "node_cpu_us_per_report_call": (
            None if node_cpu_s is None or not report_calls else round(node_cpu_s * 1e6 / report_calls, 1)
        ),
        "mariadb_per_run": db_cost(db_before, db_after, ended) if db_before and db_after else None,
        "quiet": background,
        "net_of_quiet_per_run": _net(background, node_cpu_s, db_before, db_after, busy_s, ended),
        "report_latency_ms": _pct(seen["final_ms"]),
        "progress_latency_ms": _pct(seen["progress_ms"]) if seen["progress_ms"] else None,
        "accept_lateness_ms": _pct(seen["accept_lateness_ms"]),
        "run_end_ms": _pct(seen["run_end_ms"]),
        "store": store,
        "receiver_cpu_s": round(float(seen["cpu_s"]), 2),
        "error_samples": seen["error_samples"],
        "warnings": warnings,
        "load": {"before": [round(v, 2) for v in load[0]], "after": [round(v, 2) for v in load[1]]},
        "machine": machine(),
    }


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m benchmarks run_reports", description=(__doc__ or "").splitlines()[0])
    top.add_argument("--tasks", type=int, default=60_000, help="one-shot tasks, one run each")
    top.add_argument("--window-s", type=float, default=30.0, help="their instants spread over this window")
    top.add_argument("--lead-s", type=float, help="first instant this far ahead (default: tasks / 3000 + 5 s)")
    top.add_argument("--batch-size", type=int, default=1000, help="tasks per batch create")
    top.add_argument("--concurrency", type=int, default=4, help="batch creates in flight")
    top.add_argument("--reporters", type=int, default=64, help="reports in flight at the receiver")
    top.add_argument("--progress", action="store_true", help="one `running` report (progress 50) before the final")
    top.add_argument("--max-concurrency", type=int, default=100, help="the bench app's deliveries in flight")
    top.add_argument("--drain-timeout-s", type=float, default=60.0)
    target_options(top)
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.tasks < 1 or args.window_s <= 0:
        raise SystemExit("--tasks must be >= 1 and --window-s > 0")
    storage = args.storage[0] if args.storage else None
    with bench_target(args) as target, rich_progress(console) as progress:
        summary = run(bench(args, target, progress, storage))
    for warning in summary["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}")
    if args.json_out:
        print(json.dumps(summary))
    else:
        light = {key: value for key, value in summary.items() if key not in ("machine", "answers")}
        console.print_json(data=light)


if __name__ == "__main__":
    main()
