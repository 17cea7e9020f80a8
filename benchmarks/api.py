"""API benchmarks beyond single creates (``python -m benchmarks register``): batch create and get-by-id latency.

::

    python -m benchmarks.api batch --tasks 100000 --batch-size 1000 --concurrency 4   # embedded node
    python -m benchmarks.api get --rate 500 --duration-s 20                            # p50/p99/max
    python -m benchmarks.api batch --url http://127.0.0.1:8080 --admin-key KEY        # a running node

Without ``--url`` each run starts its own embedded node in a child process (SQLite shards in a temp
directory, removed afterwards), so the client and the node do not share a core's event loop. Get
latency is measured open-loop: request *i* is due at ``start + i / rate`` and its latency counts from
that instant, so a slow answer delays nobody's measurement (no coordinated omission).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from aiohttp import ClientSession, ClientTimeout, TCPConnector

from benchmarks.fire import create_bench_app

DISCARD_URL = "http://127.0.0.1:9/cb"
DUE_IN_MS = 30 * 86_400_000  # far ahead: never loaded or fired during the run


@dataclass
class BatchResult:
    tasks: int
    batch_size: int
    concurrency: int
    elapsed_s: float
    tasks_per_s: float
    failed_items: int
    client_cpu_s: float


@dataclass
class GetResult:
    rate: float
    requests: int
    elapsed_s: float
    achieved_rate: float
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def _session(concurrency: int) -> ClientSession:
    return ClientSession(connector=TCPConnector(limit=concurrency + 4), timeout=ClientTimeout(total=60))


def _body(index: int, due_ms: int) -> bytes:
    return orjson.dumps(
        {
            "name": f"bench-{index}",
            "schedule": {"kind": "at", "at_ms": due_ms + index},
            "callback": {"url": DISCARD_URL},
            "payload": {"i": index},
        }
    )


async def _create_batches(
    session: ClientSession, base_url: str, key: str, tasks: int, batch_size: int, concurrency: int
) -> tuple[list[str], int]:
    due_ms = time.time_ns() // 1_000_000 + DUE_IN_MS
    starts = iter(range(0, tasks, batch_size))
    ids: list[str] = []
    failed = 0

    async def worker() -> None:
        nonlocal failed
        for start in starts:
            count = min(batch_size, tasks - start)
            payload = b'{"tasks":[' + b",".join(_body(start + i, due_ms) for i in range(count)) + b"]}"
            async with session.post(f"{base_url}/v1/tasks/batch", data=payload, headers=_headers(key)) as response:
                raw = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"batch create answered {response.status}: {raw[:300]!r}")
            result = orjson.loads(raw)
            failed += result["failed"]
            ids.extend(item["task"]["id"] for item in result["items"] if item.get("task"))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ids, failed


async def run_batch_bench(
    base_url: str, admin_key: str, *, tasks: int = 100_000, batch_size: int = 1000, concurrency: int = 4
) -> BatchResult:
    cpu = time.process_time()
    async with _session(concurrency) as session:
        key, _ = await create_bench_app(session, base_url, admin_key, name="bench-batch")
        await _create_batches(session, base_url, key, min(batch_size, tasks), batch_size, 1)  # warm-up
        started = time.perf_counter()
        ids, failed = await _create_batches(session, base_url, key, tasks, batch_size, concurrency)
        elapsed = time.perf_counter() - started
    return BatchResult(
        len(ids),
        batch_size,
        concurrency,
        round(elapsed, 3),
        round(len(ids) / elapsed, 1),
        failed,
        round(time.process_time() - cpu, 2),
    )


def _percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    index = min(len(sorted_ms) - 1, max(0, math.ceil(q * len(sorted_ms)) - 1))  # nearest rank
    return round(sorted_ms[index], 2)


async def run_get_bench(
    base_url: str,
    admin_key: str,
    *,
    rate: float = 500.0,
    duration_s: float = 20.0,
    tasks: int = 5000,
    concurrency: int = 256,
) -> GetResult:
    async with _session(concurrency) as session:
        key, _ = await create_bench_app(session, base_url, admin_key, name="bench-get")
        ids, _ = await _create_batches(session, base_url, key, tasks, 1000, 2)
        headers = _headers(key)
        total = int(rate * duration_s)
        latencies: list[float] = []
        errors = 0
        loop = asyncio.get_running_loop()

        async def one(index: int, due: float) -> None:
            nonlocal errors
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            async with session.get(f"{base_url}/v1/tasks/{ids[index % len(ids)]}", headers=headers) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
            latencies.append((loop.time() - due) * 1000)

        for warm in range(200):
            await one(warm, loop.time())
        latencies.clear()
        start = loop.time() + 0.05
        started = time.perf_counter()
        await asyncio.gather(*(one(i, start + i / rate) for i in range(total)))
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return GetResult(
        rate,
        total,
        round(elapsed, 2),
        round(total / elapsed, 1),
        errors,
        _percentile(ordered, 0.5),
        _percentile(ordered, 0.9),
        _percentile(ordered, 0.99),
        round(ordered[-1], 2),
    )


@contextlib.contextmanager
def _target(url: str | None, admin_key: str | None, storage: str | None) -> Iterator[tuple[str, str]]:
    if url:
        if not admin_key:
            raise SystemExit("--admin-key is needed with --url")
        yield url.rstrip("/"), admin_key
        return
    import secrets

    from testkit.databases import drop_databases
    from testkit.node_process import node_process
    from tjobs.settings import StorageSettings

    if storage is None or storage.startswith(("memory:", "sqlite")):
        with node_process(storage_urls=[storage] if storage else None) as node:
            yield node.base_url, node.admin_key
        return
    prefix = f"tjbenchapi_{secrets.token_hex(3)}"  # its own databases on a shared server, dropped after
    try:
        with node_process(storage_urls=[storage], settings={"storage": {"database_prefix": prefix}}) as node:
            yield node.base_url, node.admin_key
    finally:
        drop_databases(StorageSettings(urls=[storage], database_prefix=prefix))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api", description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["batch", "get"])
    parser.add_argument("--url")
    parser.add_argument("--admin-key")
    parser.add_argument("--storage", help="storage URL for the spawned node (default: embedded SQLite)")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--duration-s", type=float, default=20.0)
    args = parser.parse_args(argv)
    with _target(args.url, args.admin_key, args.storage) as (base_url, key):
        result: Any
        if args.mode == "batch":
            result = asyncio.run(
                run_batch_bench(
                    base_url, key, tasks=args.tasks, batch_size=args.batch_size, concurrency=args.concurrency
                )
            )
        else:
            result = asyncio.run(run_get_bench(base_url, key, rate=args.rate, duration_s=args.duration_s))
    print(json.dumps({"mode": args.mode, **asdict(result)}))


if __name__ == "__main__":
    main()
