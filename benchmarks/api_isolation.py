"""API isolation between apps: another app's latency and fire lateness while one app floods its heaviest read.

::

    python -m benchmarks.api_isolation --storage mysql+asyncmy://root@127.0.0.1:3306
    python -m benchmarks.api_isolation --storage mysql+asyncmy://root@127.0.0.1:3306 --no-limits  # control

A ``tjobs serve`` node runs in a child process (its own databases on the server, dropped afterwards;
``--no-limits`` runs it with ``rate_limits.enabled = false``). Two apps:

- the *victim* reads its own tasks by id (``GET /v1/tasks/{id}``) open-loop at ``--victim-rate`` and has
  ``--interval-tasks`` interval tasks firing every second into a callback sink (another child process);
- the *flooder* sends ``--flood-path`` (default ``/v1/stats``, the heaviest read) open-loop at
  ``--flood-rate`` (default 1,000/s) with the node's default limits, pipelined over
  ``--flood-connections`` keep-alive connections (:mod:`benchmarks.flooder`: pre-encoded requests,
  a parser that reads only status lines and lengths, so the offer is sent whatever the node answers
  and costs the machine little).

Two phases of ``--duration-s`` each: **idle** (victim only), then **flood** (victim + flooder). Each
phase reports the victim's p50/p99/max (latency counted from each request's due instant, so a slow
answer delays nobody's measurement) and its fire lateness from the node's
``tjobs_fire_lateness_seconds`` histogram over the phase (mean from sum/count, p99 as a bucket bound);
the flood phase also reports the flooder's :class:`benchmarks.flooder.FloodResult` (offered, sent,
answers by status, its answers' latency from their due instants). The flooder runs in a process of its own
(so its client does not delay the victim's), as does the sink; they share the machine's cores with the
node (``--node-cpu N`` pins the node to core N and the clients to the others; the database server
and anything else on the machine still run anywhere). ``node_cpu_s`` is the node process's CPU time
over the phase, ``node_runnable_wait_s`` the time its threads were ready to run but waited for a core
(and ``bench_runnable_wait_s`` the same for the victim's client), ``flood_client_cpu_us_per_request``
the flooder's own CPU per request it sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from aiohttp import ClientError, ClientSession, TCPConnector
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.api import _create_batches, _headers, _percentile, _session
from benchmarks.fire import create_bench_app
from benchmarks.flooder import FloodResult, flood
from testkit.children import checkout_env
from testkit.node_process import process_cpu_s
from testkit.sink import SinkProcess


@dataclass
class Phase:
    name: str
    victim_requests: int
    victim_errors: int
    victim_p50_ms: float
    victim_p99_ms: float
    victim_max_ms: float
    fires: int
    fire_lateness_mean_ms: float
    fire_lateness_p99_le_s: float
    node_cpu_s: float = 0.0
    node_runnable_wait_s: float = 0.0  # the node's threads ready to run but waiting for a core, over the phase
    bench_runnable_wait_s: float = 0.0  # the same for this process, the victim's client
    load_average_1m: float = 0.0
    flood: FloodResult | None = None
    flood_client_cpu_us_per_request: float = 0.0  # the flooder's own CPU per request sent


async def _lateness(session: ClientSession, base_url: str, app_id: str) -> tuple[float, float, dict[float, float]]:
    """(count, sum, cumulative buckets) of ``app_id``'s fire lateness histogram on the node."""
    async with (
        ClientSession(connector=TCPConnector(force_close=True)) as fresh,
        fresh.get(f"{base_url}/metrics") as response,
    ):  # a fresh connection: no idle keep-alive to lose
        text = await response.text()
    count = total = 0.0
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "tjobs_fire_lateness_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("app") != app_id:
                continue
            if sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_bucket"):
                buckets[float(sample.labels["le"])] = sample.value
    return count, total, buckets


def _p99_bound(before: dict[float, float], after: dict[float, float], fires: float) -> float:
    if fires <= 0:
        return float("nan")
    for bound in sorted(after):
        if after[bound] - before.get(bound, 0.0) >= 0.99 * fires:
            return bound
    return float("inf")


async def _flood_in_child(url: str, key: str, rate: float, duration_s: float, connections: int) -> FloodResult:
    """Run the flooder in its own process, so its client's CPU does not delay the victim's client."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.api_isolation",
        "--flood-child",
        url,
        "--flood-key",
        key,
        "--flood-rate",
        str(rate),
        "--flood-connections",
        str(connections),
        "--duration-s",
        str(duration_s),
        stdout=asyncio.subprocess.PIPE,
        env=checkout_env(),  # benchmarks is not installed: the child finds it from any working directory
    )
    out, _ = await process.communicate()
    result = json.loads(out)
    return FloodResult(**result)


async def _flood_child(url: str, key: str, rate: float, duration_s: float, connections: int) -> None:
    result = await flood(url, _headers(key), rate, duration_s, connections=connections)
    print(json.dumps(asdict(result)))


async def run(
    base_url: str,
    admin_key: str,
    node_pid: int,
    *,
    victim_rate: float,
    flood_rate: float,
    flood_path: str,
    duration_s: float,
    interval_tasks: int,
    flood_connections: int,
    profile_path: str | None = None,
) -> list[Phase]:
    async with _session(512) as session, SinkProcess() as sink:
        victim_key, _ = await create_bench_app(session, base_url, admin_key, name="victim")
        ids, _ = await _create_batches(session, base_url, victim_key, 2000, 1000, 2)
        flooder = await _create_default_app(session, base_url, admin_key)
        victim_id = await _app_id(session, base_url, victim_key)
        await _register_interval_tasks(session, base_url, victim_key, sink.callback_url, interval_tasks)
        await asyncio.sleep(3.0)  # the interval tasks are in the wheel and firing
        victim_url = f"{base_url}/v1/tasks/{{i}}"
        phases = []
        for name in ("idle", "flood"):
            statuses: Counter[str] = Counter()
            latencies: list[float] = []
            count0, sum0, buckets0 = await _lateness(session, base_url, victim_id)
            victim_task = asyncio.ensure_future(
                _victim(session, victim_url, ids, victim_key, victim_rate, duration_s, statuses, latencies)
            )
            cpu0 = process_cpu_s(node_pid) or 0.0
            node_wait0, bench_wait0 = runnable_wait_s(node_pid), runnable_wait_s(os.getpid())
            flooded = None
            if name == "flood":
                profiler = await _start_profile(node_pid, profile_path, duration_s) if profile_path else None
                flooded = await _flood_in_child(
                    f"{base_url}{flood_path}", flooder, flood_rate, duration_s, flood_connections
                )
                if profiler is not None:
                    await profiler.wait()
            await victim_task
            node_cpu_s = (process_cpu_s(node_pid) or 0.0) - cpu0
            node_wait_s = runnable_wait_s(node_pid) - node_wait0
            bench_wait_s = runnable_wait_s(os.getpid()) - bench_wait0
            count1, sum1, buckets1 = await _lateness(session, base_url, victim_id)
            fires = count1 - count0
            ordered = sorted(latencies)
            phases.append(
                Phase(
                    name,
                    len(latencies),
                    sum(v for k, v in statuses.items() if k != "200"),
                    _percentile(ordered, 0.5),
                    _percentile(ordered, 0.99),
                    round(ordered[-1], 2) if ordered else 0.0,
                    int(fires),
                    round((sum1 - sum0) / fires * 1000, 2) if fires else float("nan"),
                    _p99_bound(buckets0, buckets1, fires),
                    round(node_cpu_s, 2),
                    round(node_wait_s, 2),
                    round(bench_wait_s, 2),
                    os.getloadavg()[0],
                    flooded,
                    round(flooded.client_cpu_s / flooded.sent * 1e6, 1) if flooded and flooded.sent else 0.0,
                )
            )
        return phases


def runnable_wait_s(pid: int) -> float:
    """Seconds the threads of ``pid`` have spent runnable but waiting for a core (the second field of
    ``/proc/PID/task/TID/schedstat``); 0.0 where that cannot be read. On a shared machine this tells a
    node short of a core from a node short of work."""
    total_ns = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/schedstat", "rb") as stat:
                total_ns += int(stat.read().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total_ns / 1e9


async def _start_profile(node_pid: int, path: str, duration_s: float) -> asyncio.subprocess.Process:
    """``py-spy record`` of the node over the flood phase, in py-spy's raw (collapsed stacks) format."""
    py_spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or "py-spy"  # the venv's, else PATH's
    return await asyncio.create_subprocess_exec(
        py_spy,
        "record",
        "--pid",
        str(node_pid),
        "--duration",
        str(max(1, int(duration_s) - 2)),
        "-f",
        "raw",
        "-o",
        path,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def _victim(
    session: ClientSession,
    url: str,
    ids: list[str],
    key: str,
    rate: float,
    duration_s: float,
    statuses: Counter[str],
    latencies: list[float],
) -> None:
    loop = asyncio.get_running_loop()
    headers = _headers(key)
    start = loop.time() + 0.05

    async def one(index: int) -> None:
        due = start + index / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            async with session.get(url.format(i=ids[index % len(ids)]), headers=headers) as response:
                await response.read()
                statuses[str(response.status)] += 1
        except (ClientError, TimeoutError) as error:  # counted as an error, and its latency kept
            statuses[type(error).__name__] += 1
        latencies.append((loop.time() - due) * 1000)

    await asyncio.gather(*(one(i) for i in range(int(rate * duration_s))))


async def _create_default_app(session: ClientSession, base_url: str, admin_key: str) -> str:
    """An app with the node's default API limits (the bench apps lift theirs)."""
    body = {"name": "flooder"}
    async with session.post(f"{base_url}/v1/apps", data=orjson.dumps(body), headers=_headers(admin_key)) as response:
        created = orjson.loads(await response.read())
        if response.status != 201:
            raise RuntimeError(f"POST /v1/apps answered {response.status}: {created}")
    return str(created["api_key"])


async def _app_id(session: ClientSession, base_url: str, key: str) -> str:
    async with session.get(f"{base_url}/v1/app", headers=_headers(key)) as response:
        return str(orjson.loads(await response.read())["id"])


async def _register_interval_tasks(session: ClientSession, base_url: str, key: str, url: str, count: int) -> None:
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2))
    for first in range(0, count, 1000):
        tasks = [
            {
                "name": f"tick-{i}",
                "schedule": {"kind": "interval", "every_ms": 1000, "start_at": start},
                "callback": {"url": url},
            }
            for i in range(first, min(count, first + 1000))
        ]
        async with session.post(
            f"{base_url}/v1/tasks/batch", data=orjson.dumps({"tasks": tasks}), headers=_headers(key)
        ) as response:
            result = orjson.loads(await response.read())
            if response.status != 200 or result["failed"]:
                raise RuntimeError(f"registering interval tasks: {response.status} {str(result)[:300]}")


@contextlib.contextmanager
def _node(storage: str, limits: bool) -> Iterator[tuple[str, str, int]]:
    from testkit.databases import drop_databases
    from testkit.node_process import node_process
    from tjobs.settings import StorageSettings

    prefix = f"tjbenchiso_{secrets.token_hex(3)}"
    settings: dict[str, Any] = {"storage": {"database_prefix": prefix}}
    if not limits:
        settings["rate_limits"] = {"enabled": False}
    try:
        with node_process(storage_urls=[storage], settings=settings) as node:
            yield node.base_url, node.admin_key, node.pid
    finally:
        drop_databases(StorageSettings(urls=[storage], database_prefix=prefix))


def _pin(node_pid: int, node_cpu: int) -> None:
    """The node on ``node_cpu`` alone, this process and the children it starts from now on elsewhere."""
    others = os.sched_getaffinity(0) - {node_cpu}
    if not others:
        raise SystemExit(f"--node-cpu {node_cpu}: no other core left for the clients")
    os.sched_setaffinity(node_pid, {node_cpu})
    os.sched_setaffinity(0, others)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api_isolation", description=__doc__.split("\n")[0])
    parser.add_argument("--storage", default="mysql+asyncmy://root@127.0.0.1:3306")
    parser.add_argument("--no-limits", action="store_true", help="run the node with rate_limits.enabled = false")
    parser.add_argument("--victim-rate", type=float, default=100.0)
    parser.add_argument("--flood-rate", type=float, default=1000.0)
    parser.add_argument("--flood-path", default="/v1/stats")
    parser.add_argument(
        "--flood-connections", type=int, default=4, help="keep-alive connections the flooder pipelines over"
    )
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--interval-tasks", type=int, default=200)
    parser.add_argument(
        "--node-cpu",
        type=int,
        help="pin the node to this core and the clients (victim, flooder, "
        "sink) to the others, so the flooder's client does not take the node's core",
    )
    parser.add_argument(
        "--py-spy", metavar="FILE", help="py-spy record the node during the flood phase into FILE (raw)"
    )
    parser.add_argument("--flood-child", help=argparse.SUPPRESS)  # internal: be the flooder, for this URL
    parser.add_argument("--flood-key", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flood_child:
        asyncio.run(
            _flood_child(args.flood_child, args.flood_key, args.flood_rate, args.duration_s, args.flood_connections)
        )
        return
    with _node(args.storage, not args.no_limits) as (base_url, admin_key, node_pid):
        if args.node_cpu is not None:
            _pin(node_pid, args.node_cpu)
        phases = asyncio.run(
            run(
                base_url,
                admin_key,
                node_pid,
                victim_rate=args.victim_rate,
                flood_rate=args.flood_rate,
                flood_path=args.flood_path,
                duration_s=args.duration_s,
                interval_tasks=args.interval_tasks,
                flood_connections=args.flood_connections,
                profile_path=args.py_spy,
            )
        )
    idle, flood = phases
    print(
        json.dumps(
            {
                "limits": not args.no_limits,
                "flood_path": args.flood_path,
                "flood_rate": args.flood_rate,
                "flood_connections": args.flood_connections,
                "victim_rate": args.victim_rate,
                "phases": [asdict(p) for p in phases],
                "victim_p99_ratio": round(flood.victim_p99_ms / idle.victim_p99_ms, 2) if idle.victim_p99_ms else None,
            }
        )
    )


if __name__ == "__main__":
    main()
