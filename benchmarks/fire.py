"""``python -m benchmarks fire`` and ``python -m benchmarks register``: drive a running node over its HTTP API.

The fire bench creates an app, starts the callback sink in its own process, registers ``tasks``
one-shot ``at`` tasks whose instants are spread uniformly over ``[start, start + window_s)`` (start =
now + ``lead_s``, long enough for the registration to finish first: without a lead or a target rate,
a short probe of creates due in 30 days measures the node's create rate to size it), waits for the
window and a drain, then matches the sink's records against what it registered
(:func:`benchmarks.report.account`).

The register bench only measures creates/s, with tasks due far in the future (deleted afterwards
unless asked to keep them).

The load generator is aiohttp with orjson bodies and a fixed number of in-flight requests, paced to a
target rate when one is given: on a 2-core box it shares the CPU with the node and the database, so it
must stay cheap.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from array import array
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson
from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector

from benchmarks._db_cost import DbReader, DbReading, Span, per_op_net_of_quiet
from benchmarks.report import BenchResult, Percentiles, ProgressFn, Registration, account
from benchmarks.slo_compare import compare, node_slo
from testkit.node_process import process_cpu_s
from testkit.sink import SinkConfig, SinkProcess
from tjobs.errors import TjobsError

ASSUMED_REGISTER_RATE = 1500.0  # creates/s assumed when neither a target rate nor a probe gives one
LEAD_MARGIN = 1.25  # lead = expected registration time × this + LEAD_EXTRA_S
LEAD_EXTRA_S = 5.0
REGISTER_DUE_IN_S = 30 * 86_400  # register-bench tasks are due this far ahead: they never load or fire
DISCARD_CALLBACK_URL = "http://127.0.0.1:9/cb"
MAX_ERROR_SAMPLES = 5
PROBE_MIN, PROBE_MAX = 200, 2000  # creates in the probe that sizes the lead time
FIRE_CPU_LEAD_S = 0.5  # the node's (and MariaDB's) fire-phase CPU is counted from this long before the window
QUIET_MIN_S = 1.0  # MariaDB's quiet rate needs at least this long between the registration and the window

T = TypeVar("T")


class Destination(Protocol):
    """Where a fire bench's tasks deliver when not to the sink's one URL: a named target, whose messages
    the sink reads with the consumer ``consume`` describes, or an executor pool whose executors' addresses
    are the sink's (:mod:`benchmarks.pool_fire`)."""

    @property
    def consume(self) -> Mapping[str, Any] | None:
        """The sink's consumer spec (:func:`testkit.consumers.consumer_from_spec`); None when the
        sink takes the callbacks over HTTP."""

    async def callback(
        self, session: ClientSession, base_url: str, api_key: str, sink: SinkProcess
    ) -> Mapping[str, object]:
        """Create the destination for the bench's app (``api_key``) and return the tasks' callback naming it."""


class BenchError(TjobsError):
    """The bench could not run: the node refused the app, the sink did not start, an endpoint is missing."""


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a bench coroutine on uvloop when it is installed (about 15% less client CPU per request)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.run(main)
    return uvloop.run(main)


def default_lead_s(tasks: int, register_rate: float | None) -> float:
    """How far ahead the window must start for ``tasks`` creates to finish before it."""
    rate = register_rate or ASSUMED_REGISTER_RATE
    return tasks / rate * LEAD_MARGIN + LEAD_EXTRA_S


def spread_instants(start_ms: int, window_s: float, tasks: int) -> array[int]:
    """``tasks`` instants (epoch ms) spread uniformly over ``[start_ms, start_ms + window_s)``."""
    window_ms = window_s * 1000
    return array("q", (start_ms + math.floor(index * window_ms / tasks) for index in range(tasks)))


def task_bodies(
    callback: Mapping[str, object], name_prefix: str, instant_of: Callable[[int], int]
) -> Callable[[int], bytes]:
    """Create-task bodies for one-shot ``at`` tasks: body ``i`` is due at ``instant_of(i)`` (epoch ms),
    named ``<name_prefix>-<i>`` with payload ``{"i": i}``; formatted, not serialised, to keep it cheap."""
    head = b'{"callback":' + orjson.dumps(dict(callback)) + b',"schedule":{"kind":"at","at_ms":'
    tail = b'},"name":"' + name_prefix.encode() + b'-%d","payload":{"i":%d}}'

    def body_of(index: int) -> bytes:
        return head + b"%d" % instant_of(index) + tail % (index, index)

    return body_of


# ---- HTTP ----------------------------------------------------------------------------------------


def _session(concurrency: int, request_timeout_s: float) -> ClientSession:
    return ClientSession(
        connector=TCPConnector(limit=concurrency + 4, force_close=False, enable_cleanup_closed=False),
        timeout=ClientTimeout(total=request_timeout_s),
        json_serialize=lambda value: orjson.dumps(value).decode(),
    )


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


async def create_bench_app(
    session: ClientSession,
    base_url: str,
    admin_key: str,
    *,
    name: str = "bench",
    callback_hosts: Sequence[str] = ("127.0.0.1",),
    rate_limit_per_s: float = 100_000,
    max_concurrency: int = 100,
) -> tuple[str, list[str]]:
    """Create an app for the bench; return its API key and signing secrets.

    ``max_concurrency`` is the product's default (100). A larger cap only makes the deliverer open
    more connections to the one sink: at 1000, 40,000 fires over 20 s arrived at p99 1.7 s (commit p99
    0.4 s) against p99 67 ms at 100, same node CPU per fire. Its API and create rates are lifted to
    the maximum: the benches measure the node, not the per-app API limits."""
    body = {
        "name": name,
        "rate_limit_per_s": rate_limit_per_s,
        "max_concurrency": max_concurrency,
        "allowed_callback_hosts": list(callback_hosts),
        "api_rate_limit_per_s": 1_000_000,
        "create_rate_limit_per_s": 1_000_000,
    }
    url = f"{base_url}/v1/apps"
    async with session.post(url, data=orjson.dumps(body), headers=_headers(admin_key)) as response:
        raw = await response.read()
        if response.status != 201:
            text = raw[:300].decode(errors="replace")
            raise BenchError(f"POST /v1/apps answered {response.status}: {text}")
    created = orjson.loads(raw)
    return str(created["api_key"]), [str(secret) for secret in created.get("secrets", [])]


@dataclass
class _Outcome:
    """What a registration run produced, index-aligned with the bodies it sent."""

    task_ids: array[int] = field(default_factory=lambda: array("q"))
    indices: array[int] = field(default_factory=lambda: array("q"))  # body index of each task id
    latencies_ms: array[float] = field(default_factory=lambda: array("d"))  # one per request
    done_ms: array[int] = field(default_factory=lambda: array("q"))  # answer time, per task id
    attempted: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def error(self, count: int, message: str) -> None:
        self.errors += count
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(message)


Sender = Callable[[ClientSession, Sequence[int]], Awaitable[list[int]]]
"""Creates the tasks of the given body indices; returns their ids in order; raises _Refused or ClientError."""


class _Refused(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:200].decode(errors='replace')}")
        self.status = status


def single_sender(base_url: str, api_key: str, body_of: Callable[[int], bytes]) -> Sender:
    url, headers = f"{base_url}/v1/tasks", _headers(api_key)

    async def send(session: ClientSession, indices: Sequence[int]) -> list[int]:
        (index,) = indices
        async with session.post(url, data=body_of(index), headers=headers) as response:
            raw = await response.read()
            if response.status not in (200, 201):
                raise _Refused(response.status, raw)
        return [int(orjson.loads(raw)["id"])]

    return send


def batch_sender(base_url: str, api_key: str, body_of: Callable[[int], bytes]) -> Sender:
    """The hook for ``POST /v1/tasks:batch`` (not served yet). Assumed contract, kept in this one place:
    request ``{"tasks": [<create body>, ...]}`` → 200/201 ``{"items": [{"id": ...}, ...]}`` in order."""
    url, headers = f"{base_url}/v1/tasks:batch", _headers(api_key)

    async def send(session: ClientSession, indices: Sequence[int]) -> list[int]:
        payload = b'{"tasks":[' + b",".join(body_of(index) for index in indices) + b"]}"
        async with session.post(url, data=payload, headers=headers) as response:
            raw = await response.read()
            if response.status in (404, 405):
                raise BenchError(f"the node does not serve POST /v1/tasks:batch (HTTP {response.status})")
            if response.status not in (200, 201):
                raise _Refused(response.status, raw)
        return [int(item["id"]) for item in orjson.loads(raw)["items"]]

    return send


async def register(
    session: ClientSession,
    send: Sender,
    count: int,
    *,
    rate: float | None,
    concurrency: int,
    unit: int = 1,
    progress: ProgressFn | None = None,
    phase: str = "register",
) -> _Outcome:
    """Create ``count`` tasks, ``unit`` per request, ``concurrency`` requests in flight, paced so that
    task ``i`` is not sent before ``t0 + i / rate`` (as fast as possible when ``rate`` is None)."""
    outcome = _Outcome()
    loop = asyncio.get_running_loop()
    next_index = itertools.count(0, unit)
    step = max(unit, count // 200)
    t0 = loop.time()
    reported = 0
    if progress:
        progress(phase, 0, count)

    async def worker() -> None:
        nonlocal reported
        while (first := next(next_index)) < count:
            indices = range(first, min(first + unit, count))
            if rate:
                delay = t0 + first / rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            outcome.attempted += len(indices)
            sent = time.perf_counter()
            try:
                ids = await send(session, indices)
            except (ClientError, TimeoutError, _Refused, ValueError, KeyError) as error:
                outcome.error(len(indices), f"{type(error).__name__}: {error}")
                ids = []
            else:
                if len(ids) != len(indices):  # a batch answer that does not line up: keep what does
                    message = f"{len(indices)} creates answered {len(ids)} ids"
                    outcome.error(max(0, len(indices) - len(ids)), message)
                    ids = ids[: len(indices)]
                now_ms = time.time_ns() // 1_000_000
                outcome.task_ids.extend(ids)
                outcome.indices.extend(indices[: len(ids)])
                outcome.done_ms.extend(itertools.repeat(now_ms, len(ids)))
            outcome.latencies_ms.append((time.perf_counter() - sent) * 1000)
            if progress and outcome.attempted - reported >= step:
                reported = outcome.attempted
                progress(phase, reported, count)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, math.ceil(count / unit))))))
    outcome.elapsed_s = loop.time() - t0
    if progress:
        progress(phase, outcome.attempted, count)
    return outcome


def _registration(outcome: _Outcome, late: int = 0) -> Registration:
    return Registration(
        attempted=outcome.attempted,
        succeeded=len(outcome.task_ids),
        errors=outcome.errors,
        elapsed_s=outcome.elapsed_s,
        create_latency_ms=Percentiles.of(outcome.latencies_ms),
        error_samples=outcome.error_samples,
        late=late,
    )


# ---- the benches ---------------------------------------------------------------------------------


def _nodes_cpu_s(pids: Sequence[int]) -> float | None:
    """The CPU time (user + system) the node processes ``pids`` have used, summed; ``None`` without any,
    or when one cannot be read."""
    spent = [process_cpu_s(pid) for pid in pids]
    return None if not spent or None in spent else sum(s for s in spent if s is not None)


async def run_fire_bench(
    base_url: str,
    admin_key: str,
    *,
    tasks: int,
    window_s: float,
    lead_s: float | None = None,
    register_rate: float | None = None,
    concurrency: int = 64,
    progress: ProgressFn | None = None,
    drain_timeout_s: float = 30.0,
    settle_s: float = 1.0,
    verify_every: int = 0,
    callback_timeout_ms: int = 3000,
    request_timeout_s: float = 30.0,
    poll_interval_s: float = 0.25,
    node_pids: Sequence[int] = (),
    destination: Destination | None = None,
    max_concurrency: int = 100,
    compare_slo: bool = False,
    slo_timeout_s: float = 90.0,
    db_probe: DbReader | None = None,
) -> BenchResult:
    """Register ``tasks`` one-shot tasks due across ``window_s`` and measure how their callbacks arrive.

    Waits until the window's end, then until every registered task has a callback or
    ``drain_timeout_s`` passes, then ``settle_s`` more to catch late duplicates. ``verify_every`` > 0
    makes the sink check the signature of every n-th callback with the app's secrets. With the nodes'
    ``node_pids`` (nodes on this machine), their CPU time (summed) is reported for the whole run and for
    the fire phase alone (from ``FIRE_CPU_LEAD_S`` before the window to the end of the drain).
    With a ``destination`` the tasks name its target instead of calling the sink over HTTP, and the
    sink consumes what the target receives (:mod:`benchmarks.protocol_fire`). ``max_concurrency`` is
    the bench app's cap on deliveries in flight (:func:`create_bench_app`). ``compare_slo`` asks the
    node's SLO after the drain and sets ``result.slo`` (:mod:`benchmarks.slo_compare`).

    With a ``db_probe`` (MariaDB, :class:`benchmarks._db_cost.DbProbe`) the database's cost per delivered
    task over the same fire phase is ``result.mariadb`` (:func:`benchmarks._db_cost.per_op_net_of_quiet`):
    gross, and net of the rate a quiet reading measured from the registration's end to the fire phase
    (at least ``QUIET_MIN_S`` of it, else no net figure).
    """
    if tasks < 1 or window_s <= 0:
        raise ValueError("tasks must be >= 1 and window_s > 0")
    base_url = base_url.rstrip("/")
    warnings: list[str] = []
    cpu_start_s = time.process_time()
    node_cpu_start_s = _nodes_cpu_s(node_pids)
    probe_ids: Sequence[int] = ()
    calibrated_rate: float | None = None
    async with _session(concurrency, request_timeout_s) as session:
        api_key, secrets = await create_bench_app(session, base_url, admin_key, max_concurrency=max_concurrency)
        if lead_s is None and register_rate is None:
            probe = await _probe_register_rate(session, base_url, api_key, tasks, concurrency)
            calibrated_rate, probe_ids = probe
        if lead_s is None:
            lead_s = default_lead_s(tasks, register_rate or calibrated_rate)
        consume = destination.consume if destination is not None else None
        checking = tuple(secrets) if verify_every else ()
        sink_config = SinkConfig(secrets=checking, verify_every=verify_every, consume=consume)
        async with SinkProcess(sink_config) as sink:
            start_ms = time.time_ns() // 1_000_000 + round(lead_s * 1000)
            end_ms = start_ms + round(window_s * 1000)
            instants = spread_instants(start_ms, window_s, tasks)
            callback: Mapping[str, object] = {
                "url": sink.callback_url,
                "method": "POST",
                "timeout_ms": callback_timeout_ms,
            }
            if destination is not None:
                callback = await destination.callback(session, base_url, api_key, sink)
            body_of = task_bodies(callback, "bench", instants.__getitem__)
            register_cpu_start = [process_cpu_s(pid) for pid in node_pids]
            outcome = await register(
                session,
                single_sender(base_url, api_key, body_of),
                tasks,
                rate=register_rate,
                concurrency=concurrency,
                progress=progress,
            )
            register_cpu = _each_spent(register_cpu_start, [process_cpu_s(pid) for pid in node_pids])
            pairs = zip(outcome.task_ids, outcome.indices, strict=True)
            registered = {task_id: instants[index] for task_id, index in pairs}
            answered = zip(outcome.indices, outcome.done_ms, strict=True)
            late = sum(1 for index, done_ms in answered if done_ms > instants[index])
            if late:
                warnings.append(
                    f"{late} creates were answered after their instant (lead {lead_s:.1f} s was too short "
                    f"for the registration rate): their lateness includes registration time"
                )
            quiet = _db_read(db_probe)
            if node_pids or db_probe is not None:
                wait_s = (start_ms - time.time_ns() // 1_000_000) / 1000 - FIRE_CPU_LEAD_S
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
            fire_cpu_start_s = _nodes_cpu_s(node_pids)
            fire_start = _db_read(db_probe)
            drained = await _await_callbacks(
                sink, len(registered), end_ms, drain_timeout_s, settle_s, poll_interval_s, progress
            )
            node_cpu_end_s = _nodes_cpu_s(node_pids)
            fire_end = _db_read(db_probe)
            records = await sink.records()
            stats = await sink.stats()
        if probe_ids and await _delete_tasks(session, base_url, api_key, probe_ids, concurrency, progress):
            warnings.append("some of the probe tasks (due in 30 days) could not be deleted")
        delivery = account(registered, records)
        retried_flows = await _retried_flows(session, base_url, api_key, delivery.retried_flows, warnings)
        mariadb = _mariadb_per_fire(quiet, fire_start, fire_end, delivery.delivered, warnings)
        slo = None
        if compare_slo:
            report = await node_slo(session, base_url, api_key, delivery.delivered, slo_timeout_s)
            sink_p99 = Percentiles.of(delivery.lateness_ms, presorted=True).p99 if delivery.lateness_ms else None
            slo = compare(report, sink_p99)
    if stats.signatures_failed:
        checked, failed = stats.signatures_checked, stats.signatures_failed
        warnings.append(f"{failed} of {checked} checked signatures did not verify")
    return BenchResult(
        mode="fire",
        base_url=base_url,
        tasks=tasks,
        registration=_registration(outcome, late),
        window_s=window_s,
        lead_s=lead_s,
        start_ms=start_ms,
        target_register_rate=register_rate,
        calibrated_register_rate=calibrated_rate,
        concurrency=concurrency,
        max_concurrency=max_concurrency,
        delivery=delivery,
        drained=drained,
        sink=dict(stats.__dict__),
        warnings=warnings,
        client_cpu_s=time.process_time() - cpu_start_s,
        node_cpu_s=_spent(node_cpu_start_s, node_cpu_end_s),
        node_fire_cpu_s=_spent(fire_cpu_start_s, node_cpu_end_s),
        node_register_cpu_s=register_cpu,
        instants=registered,
        records=records,
        slo=slo,
        mariadb=mariadb,
        retried_flows=retried_flows,
    )


TimedReading = tuple[float, DbReading] | None  # (monotonic s, reading); None without a probe


def _db_read(probe: DbReader | None) -> TimedReading:
    return None if probe is None else (time.monotonic(), probe.read())


def _mariadb_per_fire(
    quiet: TimedReading, start: TimedReading, end: TimedReading, fires: int, warnings: list[str]
) -> dict[str, Any] | None:
    """The database's cost per fire over the fire phase (``start`` to ``end``), gross and net of the rate
    from ``quiet`` to ``start`` when that span is at least ``QUIET_MIN_S``."""
    if quiet is None or start is None or end is None:
        return None
    quiet_s = start[0] - quiet[0]
    quiet_span: Span | None = (quiet[1], start[1], quiet_s) if quiet_s >= QUIET_MIN_S else None
    if quiet_span is None:
        warnings.append(
            f"only {quiet_s:.1f} s between the registration and the window: no quiet reading of MariaDB, "
            f"no figure net of it (give a longer --lead-s)"
        )
    cost = per_op_net_of_quiet((start[1], end[1], end[0] - start[0]), fires, quiet_span)
    if cost is not None and cost["absent"]:
        warnings.append(f"MariaDB has no status counter {', '.join(cost['absent'])}: not reported")
    return cost


def _spent(start_s: float | None, end_s: float | None) -> float | None:
    return None if start_s is None or end_s is None else end_s - start_s


def _each_spent(start: Sequence[float | None], end: Sequence[float | None]) -> list[float] | None:
    """Per node, the CPU between two readings; ``None`` without nodes or when one could not be read."""
    spent = [_spent(a, b) for a, b in zip(start, end, strict=True)]
    return None if not spent or None in spent else [s for s in spent if s is not None]


async def _probe_register_rate(
    session: ClientSession, base_url: str, api_key: str, tasks: int, concurrency: int
) -> tuple[float | None, Sequence[int]]:
    """Measure creates/s on a probe of 2% of ``tasks`` (200..2000) due in 30 days, to size the lead time
    when neither it nor a target rate is given; returns the rate (None if nothing succeeded) and the
    probe tasks' ids, to delete after the run."""
    due_ms = time.time_ns() // 1_000_000 + REGISTER_DUE_IN_S * 1000
    callback = {"url": DISCARD_CALLBACK_URL, "method": "POST"}
    body_of = task_bodies(callback, "bench-probe", lambda index: due_ms + index)
    count = min(PROBE_MAX, max(PROBE_MIN, tasks // 50))
    outcome = await register(
        session, single_sender(base_url, api_key, body_of), count, rate=None, concurrency=concurrency
    )
    if not outcome.task_ids or outcome.elapsed_s <= 0:
        return None, outcome.task_ids
    return len(outcome.task_ids) / outcome.elapsed_s, outcome.task_ids


async def _await_callbacks(
    sink: SinkProcess,
    expected: int,
    end_ms: int,
    drain_timeout_s: float,
    settle_s: float,
    poll_interval_s: float,
    progress: ProgressFn | None,
) -> bool:
    """Wait for the window to pass and callbacks of ``expected`` distinct tasks to arrive (or the drain
    timeout)."""
    deadline_ms = end_ms + round(drain_timeout_s * 1000)
    while True:
        stats = await sink.stats()
        if progress:
            progress("fire", min(stats.tasks, expected), expected)
        now_ms = time.time_ns() // 1_000_000
        if stats.tasks >= expected and now_ms >= end_ms:
            await asyncio.sleep(settle_s)
            return True
        if now_ms >= deadline_ms:
            return False
        await asyncio.sleep(poll_interval_s)


async def run_register_bench(
    base_url: str,
    admin_key: str,
    *,
    tasks: int,
    register_rate: float | None = None,
    concurrency: int = 64,
    batch_size: int | None = None,
    keep_tasks: bool = False,
    progress: ProgressFn | None = None,
    request_timeout_s: float = 30.0,
    node_pids: Sequence[int] = (),
    db_probe: DbReader | None = None,
) -> BenchResult:
    """Measure creates/s: ``tasks`` tasks due ~30 days ahead (never loaded or fired during the run),
    one per request, or ``batch_size`` per ``POST /v1/tasks:batch`` when given. Deletes them afterwards
    unless ``keep_tasks`` (a node whose databases are dropped after the run needs no cleanup). With
    ``node_pids``, the nodes' CPU during the creates (not the cleanup) too; with a ``db_probe``, the
    database's CPU, statements and counters per create over the registration, gross and net of a quiet
    span of ``QUIET_MIN_S`` just before it (every client of the server counts)."""
    if tasks < 1:
        raise ValueError("tasks must be >= 1")
    base_url = base_url.rstrip("/")
    warnings: list[str] = []
    cpu_start_s = time.process_time()
    async with _session(concurrency, request_timeout_s) as session:
        api_key, _ = await create_bench_app(session, base_url, admin_key, name="bench-register")
        due_ms = time.time_ns() // 1_000_000 + REGISTER_DUE_IN_S * 1000
        callback = {"url": DISCARD_CALLBACK_URL, "method": "POST"}
        body_of = task_bodies(callback, "bench-register", lambda index: due_ms + index)
        sender = batch_sender if batch_size else single_sender
        quiet = _db_read(db_probe)
        if quiet is not None:
            await asyncio.sleep(QUIET_MIN_S)
        db_start = _db_read(db_probe)
        register_cpu_start = [process_cpu_s(pid) for pid in node_pids]
        client_start_s = time.process_time()
        outcome = await register(
            session,
            sender(base_url, api_key, body_of),
            tasks,
            rate=register_rate,
            concurrency=concurrency,
            unit=batch_size or 1,
            progress=progress,
        )
        client_register_cpu_s = time.process_time() - client_start_s
        register_cpu = _each_spent(register_cpu_start, [process_cpu_s(pid) for pid in node_pids])
        db_end = _db_read(db_probe)
        mariadb = None
        if quiet is not None and db_start is not None and db_end is not None:
            window = (db_start[1], db_end[1], db_end[0] - db_start[0])
            quiet_span = (quiet[1], db_start[1], db_start[0] - quiet[0])
            mariadb = per_op_net_of_quiet(window, len(outcome.task_ids), quiet_span)
        if not keep_tasks and outcome.task_ids:
            failed = await _delete_tasks(session, base_url, api_key, outcome.task_ids, concurrency, progress)
            if failed:
                warnings.append(f"{failed} of the registered tasks could not be deleted")
    return BenchResult(
        mode="register",
        base_url=base_url,
        tasks=tasks,
        registration=_registration(outcome),
        target_register_rate=register_rate,
        concurrency=concurrency,
        batch_size=batch_size,
        warnings=warnings,
        client_cpu_s=time.process_time() - cpu_start_s,
        client_register_cpu_s=client_register_cpu_s,
        node_register_cpu_s=register_cpu,
        mariadb=mariadb,
    )


RETRIED_FLOWS_SHOWN = 10  # retried flows whose stored history a fire bench reads back


async def _retried_flows(
    session: ClientSession, base_url: str, api_key: str, flow_ids: Sequence[str], warnings: list[str]
) -> list[dict[str, Any]] | None:
    """The first :data:`RETRIED_FLOWS_SHOWN` of ``flow_ids`` as the node stored them (``GET /v1/flows/{id}``:
    status, attempts, each attempt's record), so a run's re-deliveries say why an attempt was retried; None
    when no flow was retried. A read that fails is a warning, not the bench's failure."""
    if not flow_ids:
        return None
    shown: list[dict[str, Any]] = []
    for flow_id in flow_ids[:RETRIED_FLOWS_SHOWN]:
        try:
            async with session.get(f"{base_url}/v1/flows/{flow_id}", headers=_headers(api_key)) as response:
                raw = await response.read()
                if response.status != 200:
                    warnings.append(f"GET /v1/flows/{flow_id} answered {response.status}: {raw[:200]!r}")
                    continue
        except (ClientError, TimeoutError) as error:
            warnings.append(f"GET /v1/flows/{flow_id} failed: {type(error).__name__}")
            continue
        flow = orjson.loads(raw)
        keys = ("status", "attempts", "last_status_code", "last_error", "attempt_history")
        shown.append({"flow_id": flow_id, **{key: flow.get(key) for key in keys}})
    return shown


async def _delete_tasks(
    session: ClientSession,
    base_url: str,
    api_key: str,
    task_ids: Sequence[int],
    concurrency: int,
    progress: ProgressFn | None,
) -> int:
    headers = {"Authorization": f"Bearer {api_key}"}

    async def delete(session: ClientSession, indices: Sequence[int]) -> list[int]:
        (index,) = indices
        async with session.delete(f"{base_url}/v1/tasks/{task_ids[index]}", headers=headers) as response:
            raw = await response.read()
            if response.status not in (200, 204, 404):
                raise _Refused(response.status, raw)
        return [task_ids[index]]

    outcome = await register(
        session, delete, len(task_ids), rate=None, concurrency=concurrency, progress=progress, phase="cleanup"
    )
    return outcome.errors
