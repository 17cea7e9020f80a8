"""``python -m benchmarks pool_fire --route one|one_per_zone|all``: the fire bench routed to an executor pool.

The ``fire`` bench (:func:`benchmarks.fire.run_fire_bench`: one-shot tasks registered over HTTP, due
uniformly across the window; the node's CPU) with every task's callback naming a pool of the bench's
app instead of a URL. Before the tasks are registered the bench registers ``--executors`` executors
into the pool, ``e0``, ``e1``, …, each at its own address on the one callback sink
(``<sink>/cb/e<i>``; zones ``z0``.. ``z<zones-1>`` in turn), and heartbeats every one of them every
third of its TTL until the run ends (a heartbeat answered ``404`` re-registers the executor and is
counted as lapsed). The sink records each callback's ``tjobs-executor-id``.

Accounting: each fire must reach one executor (``one``), one executor in each zone (``one_per_zone``)
or each of the executors (``all``). The unit counted is the (fire, destination) pair — the fire for
``one``, (fire, zone) for ``one_per_zone``, (fire, executor) for ``all`` — so ``delivered``,
``missing`` and ``duplicates`` (same flow: a repeat to that destination; extra flows: another flow of
the task reaching it) count pairs, and ``lateness_ms`` is each pair's first receipt minus the
scheduled instant (for ``one`` exactly the fire bench's figures). ``fires_per_s`` and
``node_cpu_us_per_fire`` stay per fire (a fire is delivered when any destination got it).
``pool.pairs_expected`` is tasks registered × destinations; ``pool.per_executor`` is how many
callbacks each executor got and ``pool.spread`` their min / max / mean. A callback without an
executor id, or from an executor or task the bench did not register, counts as unexpected.

``--plain-url`` runs the same tasks against the sink's one URL (the fire bench), for the baseline the
``one`` figure is compared with; run the two alternately on one node setup::

    python -m benchmarks pool_fire --storage mysql+asyncmy://root@127.0.0.1:3306 --plain-url \\
        --tasks 120000 --window-s 60 --json
    python -m benchmarks pool_fire --storage mysql+asyncmy://root@127.0.0.1:3306 --route one \\
        --executors 10 --tasks 120000 --window-s 60 --json
    python -m benchmarks pool_fire --storage mysql+asyncmy://root@127.0.0.1:3306 --route all \\
        --executors 50 --tasks 6000 --window-s 60 --json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from aiohttp import ClientError, ClientSession, ClientTimeout

from benchmarks.bench_node import bench_target, console, target_options
from benchmarks.fire import BenchError, run, run_fire_bench
from benchmarks.report import BenchResult, Delivery, ProgressFn, account, render_table, rich_progress, to_json
from testkit.sink import NO_EXECUTOR, CallbackRecords, SinkProcess

POOL = "bench-pool"
ROUTES = ("one", "one_per_zone", "all")
STRATEGIES = ("round_robin", "consistent_hash", "least_in_flight")
HEARTBEATS_PER_TTL = 3  # as the SDK's executor helper does (tjobs.executor)


# ---- accounting ----------------------------------------------------------------------------------


def destinations_of(route: str, executor_zones: Mapping[str, str]) -> dict[str, str]:
    """Executor id → the destination it delivers a fire to under ``route``: the one destination ``""``
    (``one``), its zone (``one_per_zone``), itself (``all``)."""
    if route == "one":
        return dict.fromkeys(executor_zones, "")
    if route == "one_per_zone":
        return dict(executor_zones)
    if route == "all":
        return {executor_id: executor_id for executor_id in executor_zones}
    raise ValueError(f"unknown route {route!r}")


@dataclass(frozen=True)
class PoolDelivery:
    """How the callbacks of a pool bench match its fires, per (fire, destination) and per fire."""

    pairs: Delivery  # the unit is (fire, destination): see the module docstring
    fires: Delivery  # the fire bench's accounting per task: delivered when any destination got it
    destinations: int  # destinations per fire
    per_executor: dict[str, int]  # callbacks each registered executor got (0 for one that got none)


def account_pool(
    instants: Mapping[int, int], records: CallbackRecords, destination_of: Mapping[str, str]
) -> PoolDelivery:
    """Match ``records`` against ``instants`` (task id → its instant, epoch ms) when each fire must
    reach every destination of ``destination_of`` (executor id → destination) once.

    Each (task, destination) pair is given a key of its own and each (flow, destination) a flow of its
    own, and :func:`benchmarks.report.account` counts them as it counts tasks and flows."""
    destinations = sorted(set(destination_of.values()))
    width = len(destinations)
    index_of_destination = {destination: index for index, destination in enumerate(destinations)}
    destination_of_index = [
        index_of_destination[destination_of[executor_id]] if executor_id in destination_of else None
        for executor_id in records.executor_ids
    ]
    position = {task_id: index for index, task_id in enumerate(instants)}
    pair_instants = {
        position[task_id] * width + offset: instant for task_id, instant in instants.items() for offset in range(width)
    }
    pairs = CallbackRecords(executor_ids=records.executor_ids)
    strays = 0  # callbacks the pair accounting cannot place: unknown task, no or unknown executor
    received: Counter[str] = Counter()
    for recv_us, task_id, scheduled_ms, flow, attempt, executor in zip(
        records.recv_us,
        records.task_id,
        records.scheduled_ms,
        records.flow,
        records.attempt,
        records.executor,
        strict=True,
    ):
        task = position.get(task_id)
        offset = destination_of_index[executor] if executor != NO_EXECUTOR else None
        if task is None or offset is None:
            strays += 1
            continue
        received[records.executor_ids[executor]] += 1
        pairs.append(recv_us, task * width + offset, scheduled_ms, flow * width + offset, attempt, executor)
    pair_delivery = account(pair_instants, pairs)
    return PoolDelivery(
        pairs=replace(pair_delivery, unexpected=pair_delivery.unexpected + strays),
        fires=account(instants, records),
        destinations=width,
        per_executor={executor_id: received[executor_id] for executor_id in destination_of},
    )


def spread(per_executor: Mapping[str, int]) -> dict[str, float | int | None]:
    """Min, max and mean callbacks per executor, and max / mean (1.0 is an even spread)."""
    counts = list(per_executor.values())
    if not counts:
        return {"min": None, "max": None, "mean": None, "max_over_mean": None}
    mean = sum(counts) / len(counts)
    return {
        "min": min(counts),
        "max": max(counts),
        "mean": round(mean, 1),
        "max_over_mean": round(max(counts) / mean, 3) if mean else None,
    }


# ---- the pool: executors at the sink, kept alive -------------------------------------------------


@dataclass
class PoolDestination:
    """A :class:`benchmarks.fire.Destination`: a pool of ``executors`` executors at the sink's address,
    heartbeated until :meth:`close`; the tasks' callback names it with ``route`` (and ``strategy``)."""

    route: str
    executors: int
    zones: int = 2
    strategy: str = "round_robin"
    ttl_s: int = 15
    callback_timeout_ms: int = 3000
    consume: Mapping[str, Any] | None = None  # the sink takes the callbacks over HTTP
    heartbeats: int = 0
    lapsed: int = 0  # heartbeats answered 404: the executor was out of the pool, registered again
    heartbeat_max_ms: float = 0.0  # the slowest heartbeat's answer (with its re-registration)
    heartbeat_errors: list[str] = field(default_factory=list)
    _bodies: dict[str, bytes] = field(default_factory=dict)
    _keeper: asyncio.Task[None] | None = None
    _session: ClientSession | None = None
    _base_url: str = ""
    _headers: dict[str, str] = field(default_factory=dict)

    @property
    def executor_zones(self) -> dict[str, str]:
        return {f"e{index}": f"z{index % self.zones}" for index in range(self.executors)}

    async def callback(
        self, session: ClientSession, base_url: str, api_key: str, sink: SinkProcess
    ) -> Mapping[str, object]:
        self._base_url = base_url
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._session = ClientSession(timeout=ClientTimeout(total=10))
        for executor_id, zone in self.executor_zones.items():
            address = f"{sink.callback_url}/{executor_id}"
            body = {"id": executor_id, "address": address, "zone": zone, "ttl_s": self.ttl_s}
            self._bodies[executor_id] = orjson.dumps(body)
            status, text = await self._register(executor_id)
            if status not in (200, 201):
                raise BenchError(f"POST /v1/pools/{POOL}/executors answered {status}: {text}")
        self._keeper = asyncio.create_task(self._keep_alive())
        pool: dict[str, object] = {"name": POOL, "mode": self.route}
        if self.route != "all":
            pool["strategy"] = self.strategy
        return {"pool": pool, "method": "POST", "timeout_ms": self.callback_timeout_ms}

    async def _register(self, executor_id: str) -> tuple[int, str]:
        assert self._session is not None
        url = f"{self._base_url}/v1/pools/{POOL}/executors"
        async with self._session.post(url, data=self._bodies[executor_id], headers=self._headers) as response:
            return response.status, (await response.read())[:300].decode(errors="replace")

    async def _keep_alive(self) -> None:
        """Every executor's heartbeat every ``ttl_s / HEARTBEATS_PER_TTL``, spread over the period, each
        sent at its own instant whatever the ones before it still wait for (a loaded node answers
        slowly, and a heartbeat that waited for the previous one would let the leases run out)."""
        loop = asyncio.get_running_loop()
        executor_ids = list(self._bodies)
        gap_s = self.ttl_s / HEARTBEATS_PER_TTL / len(executor_ids)
        started = loop.time()
        in_flight: set[asyncio.Task[None]] = set()
        try:
            for sent in itertools.count(1):
                delay = started + sent * gap_s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(self._heartbeat(executor_ids[sent % len(executor_ids)]))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
        finally:
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)

    async def _heartbeat(self, executor_id: str) -> None:
        assert self._session is not None
        url = f"{self._base_url}/v1/pools/{POOL}/executors/{executor_id}/heartbeat"
        sent = time.perf_counter()
        try:
            async with self._session.put(url, headers=self._headers) as response:
                status = response.status
            if status == 404:
                self.lapsed += 1
                status, _ = await self._register(executor_id)
            if status not in (200, 201):
                self._heartbeat_error(f"{executor_id}: HTTP {status}")
        except (ClientError, TimeoutError) as error:
            self._heartbeat_error(f"{executor_id}: {type(error).__name__}: {error}")
        self.heartbeats += 1
        self.heartbeat_max_ms = max(self.heartbeat_max_ms, (time.perf_counter() - sent) * 1000)

    def _heartbeat_error(self, message: str) -> None:
        if len(self.heartbeat_errors) < 5:
            self.heartbeat_errors.append(message)

    async def close(self) -> None:
        """Stop heartbeating and deregister the executors (a node kept running gets its pool back empty)."""
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
            self._keeper = None
        if self._session is not None:
            for executor_id in self._bodies:
                url = f"{self._base_url}/v1/pools/{POOL}/executors/{executor_id}"
                try:
                    async with self._session.delete(url, headers=self._headers):
                        pass
                except (ClientError, TimeoutError):
                    pass  # the node may be gone already; its leases then simply run out
            await self._session.close()
            self._session = None


# ---- the run -------------------------------------------------------------------------------------


async def bench(
    args: argparse.Namespace, node: tuple[str, str, tuple[int, ...]], progress: ProgressFn
) -> tuple[BenchResult, PoolDestination | None]:
    base_url, admin_key, pids = node
    destination = None
    if not args.plain_url:
        destination = PoolDestination(args.route, args.executors, zones=args.zones, strategy=args.strategy)
    try:
        result = await run_fire_bench(
            base_url,
            admin_key,
            tasks=args.tasks,
            window_s=args.window_s,
            lead_s=args.lead_s,
            register_rate=args.register_rate,
            concurrency=args.concurrency,
            progress=progress,
            drain_timeout_s=args.drain_timeout_s,
            verify_every=args.verify_every,
            node_pids=pids,
            destination=destination,
        )
    finally:
        if destination is not None:
            await destination.close()
    return result, destination


def summarise(result: BenchResult, destination: PoolDestination | None) -> dict[str, Any]:
    """The fire bench's JSON, with the delivery counted per (fire, destination) and a ``pool`` section
    (``pool`` is None for ``--plain-url``)."""
    if destination is None:
        return {**to_json(result), "pool": None}
    if result.records is None:
        raise BenchError("the fire bench returned no records to account")
    destination_of = destinations_of(destination.route, destination.executor_zones)
    delivery = account_pool(result.instants, result.records, destination_of)
    summary = to_json(replace(result, delivery=delivery.pairs))
    fire_figures = to_json(replace(result, delivery=delivery.fires))
    for key in ("fires_per_s", "fires_in_window_per_s", "node_cpu_us_per_fire"):
        summary[key] = fire_figures[key]
    summary["pool"] = {
        "route": destination.route,
        "strategy": destination.strategy if destination.route != "all" else None,
        "executors": destination.executors,
        "zones": destination.zones,
        "destinations_per_fire": delivery.destinations,
        "pairs_expected": delivery.pairs.registered,
        "fires_delivered": delivery.fires.delivered,
        "fires_missing": delivery.fires.missing,
        "per_executor": delivery.per_executor,
        "spread": spread(delivery.per_executor),
        "heartbeats": destination.heartbeats,
        "heartbeats_lapsed": destination.lapsed,
        "heartbeat_max_ms": round(destination.heartbeat_max_ms, 1),
        "heartbeat_errors": destination.heartbeat_errors,
    }
    return summary


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks pool_fire", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--route", choices=ROUTES, default="one", help="the pool route's mode")
    p.add_argument("--strategy", choices=STRATEGIES, default="round_robin", help="for one and one_per_zone")
    p.add_argument("--executors", type=int, default=10, help="executors registered into the pool")
    p.add_argument("--zones", type=int, default=2, help="zones the executors are spread over, in turn")
    p.add_argument("--plain-url", action="store_true", help="the baseline: the same tasks to the sink's one URL")
    p.add_argument("--tasks", type=int, default=20_000, help="one-shot tasks to register")
    p.add_argument("--window-s", type=float, default=10.0, help="their instants spread over this window")
    p.add_argument("--lead-s", type=float, help="first instant this far ahead")
    p.add_argument("--register-rate", type=float, help="creates/s (default: max)")
    p.add_argument("--concurrency", type=int, default=64, help="creates in flight")
    p.add_argument("--drain-timeout-s", type=float, default=30.0)
    p.add_argument("--verify-every", type=int, default=0, help="check every n-th signature")
    target_options(p)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.executors < 1 or args.zones < 1:
        raise SystemExit("--executors and --zones must be >= 1")
    with bench_target(args) as node, rich_progress(console) as progress:
        result, destination = run(bench(args, node, progress))
    summary = summarise(result, destination)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    if args.json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        console.print(render_table(summary))
        console.print(json.dumps({"pool": summary["pool"]}, indent=1))


if __name__ == "__main__":
    main()
