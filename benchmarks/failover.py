"""Cluster benchmarks on one machine (real etcd, 2 MariaDB servers, Redis, node processes).

    python -m benchmarks.failover kills --count 20       kill -9 a primary, measure kill -> first fire
    python -m benchmarks.failover handoff --count 5      SIGTERM a primary, measure the firing gap
    python -m benchmarks.failover nearterm --hot redis   cross-node near-term lateness (redis | dbpoll),
                                                          with the hot-tier lag from the nodes' metrics
    python -m benchmarks.failover throughput --nodes 2   fires/s of one burst of due tasks (and node CPU
                                                          per fire, which a loaded machine distorts less)

Services come from ``scripts/cluster.sh infra`` in ``--state-dir`` (own etcd/Redis ports, so nothing
shared is touched). Fire times are read from the flow rows themselves (``created_at`` is the commit
instant of the fire transaction). Output: one JSON object per run on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pymysql
from aiohttp import web
from sqlalchemy.engine import make_url

from sharding import shard_of_task_id
from testkit.cluster_rig import ADMIN_KEY, Api, ClusterRig, Infra, now_ms, start_infra
from testkit.node_process import process_cpu_s
from testkit.ports import free_port
from tjobs.settings import StorageSettings
from tjobs.stores.sql_layout import Layout


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class Sink:
    """A callback receiver answering 204 to everything (callbacks are not what is measured here)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.count = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        async def handle(request: web.Request) -> web.Response:
            await request.read()
            self.count += 1
            return web.Response(status=204)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return f"http://127.0.0.1:{self.port}/hook"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class Flows:
    """Reads flow rows straight from the shards (fast accounting for thousands of tasks)."""

    def __init__(self, rig: ClusterRig) -> None:
        self.layout = Layout(
            StorageSettings(urls=rig.infra.storage_urls, topology=rig.topology, database_prefix=rig.db_prefix)
        )

    def rows(self, app_id: str) -> list[tuple[int, int, int]]:
        """(task_id, scheduled_at_ms, created_at_ms) of the app's flows."""
        by_server: dict[str, list[str]] = {}
        for shard in self.layout.shards:
            by_server.setdefault(shard.database.engine_url, []).append(shard.flows_sql)
        found: list[tuple[int, int, int]] = []
        for url, tables in by_server.items():
            parsed = make_url(url)
            connection = pymysql.connect(
                host=parsed.host,
                port=parsed.port or 3306,
                user=parsed.username or "root",
                password=parsed.password or "",
            )
            try:
                with connection.cursor() as cursor:
                    for table in tables:
                        cursor.execute(
                            f"SELECT task_id, scheduled_at, created_at FROM {table} WHERE app_id = %s",
                            (app_id,),
                        )
                        found.extend((int(a), int(b), int(c)) for a, b, c in cursor.fetchall())
            finally:
                connection.close()
        return found


class Bench:
    def __init__(self, state_dir: Path, nodes: int, hot_tier: str = "redis") -> None:
        self.infra: Infra = start_infra(state_dir, etcd_port=23797, redis_port=6397)
        self.work = Path(tempfile.mkdtemp(prefix="tjobs-failover-"))
        self.rig = ClusterRig(
            self.infra,
            self.work,
            f"b{secrets.token_hex(3)}",
            f"tjbf_{secrets.token_hex(3)}",
            hot_tier=hot_tier,
        )
        self.count = nodes
        self.api = Api(self.rig)
        self.sink = Sink()
        self.url = ""
        self.app_id = ""

    async def __aenter__(self) -> Bench:
        self.rig.migrate()
        self.url = await self.sink.start()
        for index in range(1, self.count + 1):
            self.rig.start(index)
        for node in self.rig.live():
            await self.api.wait_healthy(node)
        await self.api.wait_stable(self.count)
        node1 = self.rig.nodes[1]
        body = {"name": "bench", "rate_limit_per_s": 1_000_000, "max_concurrency": 2000}
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        reply = await self.api.http.post(f"{node1.base_url}/v1/apps", json=body, headers=headers)
        reply.raise_for_status()
        self.api.api_key = str(reply.json()["api_key"])
        self.app_id = str(reply.json()["id"])
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.rig.stop_all()
        await self.api.close()
        await self.sink.stop()
        self._drop()

    def _drop(self) -> None:
        for url in self.infra.storage_urls:
            parsed = make_url(url)
            connection = pymysql.connect(host=parsed.host, port=parsed.port or 3306, user="root", password="")
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SHOW DATABASES LIKE %s", (f"{self.rig.db_prefix}\\_%",))
                    for (name,) in cursor.fetchall():
                        cursor.execute(f"DROP DATABASE `{name}`")
            finally:
                connection.close()

    def flows_rows(self) -> list[tuple[int, int, int]]:
        return Flows(self.rig).rows(self.app_id)

    def flows_by_task(self) -> dict[int, int]:
        """Task id -> commit instant of its first flow."""
        rows: dict[int, int] = {}
        for task, _scheduled, created in self.flows_rows():
            rows[task] = min(rows.get(task, created), created)
        return rows

    async def feed(self, until_ms: int, every_ms: int, lead_ms: int, sink: dict[int, int]) -> None:
        """Register one task due ``lead_ms`` ahead every ``every_ms`` until ``until_ms``."""
        via = self.rig.nodes[1]
        while now_ms() < until_ms:
            at_ms = now_ms() + lead_ms
            with contextlib.suppress(Exception):
                sink[await self.api.create_at(via, at_ms, self.url)] = at_ms
            await asyncio.sleep(every_ms / 1000)


async def kills(args: argparse.Namespace) -> dict[str, Any]:
    gaps: list[int] = []
    async with Bench(args.state_dir, 3) as bench:
        tasks: dict[int, int] = {}
        for round_index in range(args.count):
            victim_index = 2 + round_index % 2
            victim = bench.rig.nodes[victim_index]
            jobs = set((await bench.api.view(victim))["jobs"])
            feeder = asyncio.create_task(bench.feed(now_ms() + 12_000, 20, 1000, tasks))
            await asyncio.sleep(2)
            if args.graceful:
                started = now_ms()
                bench.rig.stop(victim_index)
                killed_ms = started
            else:
                bench.rig.kill(victim_index)
                killed_ms = now_ms()
            await feeder
            await asyncio.sleep(3)
            rows = bench.flows_by_task()
            orphans = {t: at for t, at in tasks.items() if at >= killed_ms and shard_of_task_id(t) in jobs}
            fired = [rows[t] for t in orphans if t in rows]
            if args.graceful:
                gap = max((rows[t] - at for t, at in orphans.items() if t in rows), default=-1)
            else:
                gap = (min(fired) - killed_ms) if fired else -1
            gaps.append(gap)
            print(
                json.dumps(
                    {
                        "round": round_index,
                        "victim": victim.node_id,
                        "gap_ms": gap,
                        "orphans": len(orphans),
                        "fired": len(fired),
                    }
                ),
                file=sys.stderr,
            )
            bench.rig.start(victim_index)
            await bench.api.wait_healthy(victim)
            await bench.api.wait_stable(3)
        rows = bench.flows_by_task()
        lost = [t for t in tasks if t not in rows]
    kind = "handoff" if args.graceful else "kill"
    return {
        "bench": f"failover_{kind}",
        "rounds": len(gaps),
        "gap_ms_p50": percentile(gaps, 50),
        "gap_ms_p99": percentile(gaps, 99),
        "gap_ms_max": max(gaps),
        "tasks": len(tasks),
        "lost": len(lost),
    }


async def hot_tier_lag(bench: Bench, tier: str) -> dict[str, Any]:
    """``tjobs_hot_tier_lag_seconds{tier}`` summed over the live nodes: count and p50/p99 as the upper
    bound (ms) of the histogram bucket holding that rank."""
    buckets: dict[float, float] = {}
    for node in bench.rig.live():
        for bound, count in (await bench.api.histogram(node, "tjobs_hot_tier_lag_seconds", tier=tier)).items():
            buckets[bound] = buckets.get(bound, 0.0) + count
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0

    def rank(q: float) -> float:
        for bound in bounds:
            if total and buckets[bound] >= q / 100 * total:
                return bound * 1000
        return float("nan")

    return {"hot_lag_count": int(total), "hot_lag_ms_p50_le": rank(50), "hot_lag_ms_p99_le": rank(99)}


async def nearterm(args: argparse.Namespace) -> dict[str, Any]:
    """Tasks registered on node 1 ``--lead-ms`` ahead; the lateness of those whose shard another node
    runs (they reach it through the hot tier) against those node 1 runs itself (the baseline)."""
    async with Bench(args.state_dir, 3, hot_tier=args.hot) as bench:
        jobs = set((await bench.api.view(bench.rig.nodes[1]))["jobs"])
        tasks: dict[int, int] = {}
        await bench.feed(now_ms() + args.seconds * 1000, args.every_ms, args.lead_ms, tasks)
        await asyncio.sleep(3)
        rows = bench.flows_by_task()
        remote = [rows[t] - at for t, at in tasks.items() if shard_of_task_id(t) not in jobs and t in rows]
        local = [rows[t] - at for t, at in tasks.items() if shard_of_task_id(t) in jobs and t in rows]
        lost = [t for t in tasks if t not in rows]
        lag = await hot_tier_lag(bench, args.hot)
    return {
        "bench": f"nearterm_{args.hot}",
        "lead_ms": args.lead_ms,
        "tasks": len(tasks),
        "remote": len(remote),
        "lateness_ms_p50": percentile(remote, 50),
        "lateness_ms_p99": percentile(remote, 99),
        "lateness_ms_max": max(remote, default=0),
        "local_lateness_ms_p99": percentile(local, 99),
        **lag,
        "lost": len(lost),
    }


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    async with Bench(args.state_dir, args.nodes) as bench:
        due_ms = now_ms() + args.lead_s * 1000
        slots = asyncio.Semaphore(32)
        via = bench.rig.live()

        async def one(i: int) -> None:
            async with slots:
                if now_ms() > due_ms - 2000:
                    raise RuntimeError(f"{i} of {args.tasks} tasks registered by the due instant; raise --lead-s")
                await bench.api.create_at(via[i % len(via)], due_ms, bench.url)

        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(args.tasks)))
        registered_s = time.monotonic() - started
        if now_ms() > due_ms - 2000:
            raise RuntimeError(f"registration took {registered_s:.1f} s; raise --lead-s")
        await asyncio.sleep((due_ms - now_ms()) / 1000 - 1)
        pids = [node.pid for node in bench.rig.live()]
        cpu_before = [process_cpu_s(pid) or 0.0 for pid in pids]
        await asyncio.sleep(1 + args.tasks / 2000 + 5)
        cpu_fire_s = sum((process_cpu_s(pid) or 0.0) - before for pid, before in zip(pids, cpu_before, strict=True))
        rows = bench.flows_rows()
        created = sorted(c for _, _, c in rows)
    done = len(created)
    span_s = max((created[-1] - due_ms) / 1000, 0.001) if created else float("nan")
    return {
        "bench": "cluster_throughput",
        "nodes": args.nodes,
        "tasks": args.tasks,
        "fired": done,
        "duplicates": done - len({task for task, _, _ in rows}),  # one-shot tasks: one flow each
        "fires_per_s": round(done / span_s),
        "last_fire_after_s": span_s,
        "registrations_per_s": round(args.tasks / registered_s),
        # CPU of all node processes from 1 s before the due instant to the end of the wait (callbacks
        # included): a per-fire cost that a loaded machine distorts far less than fires/s.
        "nodes_cpu_s_fire_phase": round(cpu_fire_s, 2),
        "nodes_cpu_ms_per_fire": round(cpu_fire_s * 1000 / done, 3) if done else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.failover",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--state-dir", type=Path, default=Path("/tmp/tjobs-bench-cluster"))
    sub = parser.add_subparsers(dest="command", required=True)
    k = sub.add_parser("kills")
    k.add_argument("--count", type=int, default=20)
    k.add_argument("--graceful", action="store_true", help="SIGTERM instead of kill -9 (hand-off gap)")
    h = sub.add_parser("handoff")
    h.add_argument("--count", type=int, default=5)
    n = sub.add_parser("nearterm")
    n.add_argument("--hot", choices=["redis", "dbpoll"], default="redis")
    n.add_argument("--seconds", type=int, default=20)
    n.add_argument("--every-ms", type=int, default=25, help="one registration every this many ms")
    n.add_argument("--lead-ms", type=int, default=800, help="registered this far ahead of the instant")
    t = sub.add_parser("throughput")
    t.add_argument("--nodes", type=int, default=1)
    t.add_argument("--tasks", type=int, default=20_000)
    t.add_argument(
        "--lead-s",
        type=int,
        default=240,
        help="the burst is due this long after registration starts (all of it must fit)",
    )
    args = parser.parse_args(argv)
    if args.command == "handoff":
        args.graceful = True
    runner = {"kills": kills, "handoff": kills, "nearterm": nearterm, "throughput": throughput}[args.command]
    print(json.dumps(asyncio.run(runner(args))))


if __name__ == "__main__":
    main()
