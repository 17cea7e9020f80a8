"""``python -m benchmarks <name> [options]`` from the repository root: every benchmark, one CLI style.

``fire``, ``register``, ``wheel`` and ``load`` are defined here; every other name is the module
``benchmarks.<name>`` run with the remaining arguments (``python -m benchmarks api_isolation --help``
is ``python -m benchmarks.api_isolation --help``). ``python -m benchmarks`` alone lists them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

import benchmarks
from benchmarks.bench_node import bench_target, target_options

console = Console(stderr=True)
OWN = ("fire", "register", "wheel", "load")
NOT_BENCHMARKS = {"report", "flooder", "cycle_load", "bench_node", "tests"}  # helpers and what `load` runs


def modules() -> list[str]:
    """The benchmark modules runnable by name (each has a ``main``)."""
    names = []
    for info in pkgutil.iter_modules(benchmarks.__path__):
        if info.name.startswith("_") or info.name in NOT_BENCHMARKS or info.name in OWN:
            continue
        names.append(info.name)
    return sorted(names)


def fire(args: argparse.Namespace) -> None:
    """Register N tasks due across a window over HTTP, sink their callbacks, report rate and lateness (and
    MariaDB's CPU, statements and status counters per fire, on a mysql --storage)."""
    from benchmarks._db_cost import DbProbe
    from benchmarks.fire import run, run_fire_bench
    from benchmarks.report import emit, rich_progress

    mysql = next((url for url in args.storage or () if url.startswith("mysql")), None)
    with (
        bench_target(args) as (base_url, key, pids),
        contextlib.closing(DbProbe(mysql)) if mysql else contextlib.nullcontext() as probe,
        rich_progress(console) as progress,
    ):
        result = run(
            run_fire_bench(
                base_url,
                key,
                tasks=args.tasks,
                window_s=args.window_s,
                lead_s=args.lead_s,
                register_rate=args.register_rate,
                concurrency=args.concurrency,
                progress=progress,
                drain_timeout_s=args.drain_timeout_s,
                verify_every=args.verify_every,
                node_pids=pids,
                compare_slo=args.slo,
                db_probe=probe,
            )
        )
    emit(result, console, as_json=args.json_out)
    if result.slo is not None:
        console.print(f"SLO vs sink: {result.slo}")


def register(args: argparse.Namespace) -> None:
    """Single (or batch) creates per second over HTTP (and MariaDB's CPU and statements per create, on a
    mysql --storage); the tasks are deleted afterwards unless the run's own databases are dropped."""
    from benchmarks._db_cost import DbProbe
    from benchmarks.fire import run, run_register_bench
    from benchmarks.report import emit, rich_progress

    mysql = next((url for url in args.storage or () if url.startswith("mysql")), None)
    dropped_after = bool(args.storage) and not args.url and not os.environ.get("TJOBS_STORAGE__DATABASE_PREFIX")
    with (
        bench_target(args) as (base_url, key, pids),
        contextlib.closing(DbProbe(mysql)) if mysql else contextlib.nullcontext() as probe,
        rich_progress(console) as progress,
    ):
        result = run(
            run_register_bench(
                base_url,
                key,
                tasks=args.tasks,
                register_rate=args.register_rate,
                concurrency=args.concurrency,
                batch_size=args.batch_size,
                keep_tasks=dropped_after,
                progress=progress,
                node_pids=pids,
                db_probe=probe,
            )
        )
    emit(result, console, as_json=args.json_out)


def wheel(args: argparse.Namespace) -> None:
    """Wheel memory (bytes per loaded task) and the cost of add, cancel and advance."""
    from benchmarks.wheel_memory import measure

    print(json.dumps(measure(entries=args.entries, span_ms=args.span_s * 1000, tick_ms=args.tick_ms)))


def load(args: argparse.Namespace) -> None:
    """Cycle load time with the due slice fixed while stored tasks grow (100k → 5M by default)."""
    from benchmarks.cycle_load import measure
    from testkit.databases import drop_databases
    from tjobs.clock import SystemClock
    from tjobs.settings import StorageSettings
    from tjobs.stores import create_store
    from tjobs.stores.migrate import migrate as migrate_storage

    settings = StorageSettings(urls=[args.storage], topology=args.topology, database_prefix=args.prefix)

    async def main() -> list[dict[str, Any]]:
        await migrate_storage(settings)
        store = create_store(settings)
        await store.start()
        try:
            return await measure(
                store,
                [int(s) for s in args.sizes.split(",")],
                args.due,
                SystemClock().now_ms(),
                progress=lambda line: console.print(line),
            )
        finally:
            await store.close()
            if not args.keep:
                drop_databases(settings)

    print(json.dumps(asyncio.run(main())))


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m benchmarks", description=(__doc__ or "").splitlines()[0])
    commands = top.add_subparsers(dest="command", metavar="<name>")

    p = commands.add_parser("fire", help=fire.__doc__)
    p.add_argument("--tasks", type=int, default=20_000, help="one-shot tasks to register")
    p.add_argument("--window-s", type=float, default=10.0, help="their instants spread over this window")
    p.add_argument("--lead-s", type=float, help="first instant this far ahead")
    p.add_argument("--register-rate", type=float, help="creates/s (default: max)")
    p.add_argument("--concurrency", type=int, default=64, help="creates in flight")
    p.add_argument("--drain-timeout-s", type=float, default=30.0)
    p.add_argument("--verify-every", type=int, default=0, help="check every n-th signature")
    p.add_argument(
        "--slo", action="store_true", help="compare the node's SLO p99 with the sink's (set TJOBS_SLO__FLUSH_S=2)"
    )
    target_options(p)
    p.set_defaults(run=fire)

    p = commands.add_parser("register", help=register.__doc__)
    p.add_argument("--tasks", type=int, default=20_000, help="tasks to create")
    p.add_argument("--register-rate", type=float, help="creates/s (default: max)")
    p.add_argument("--concurrency", type=int, default=64, help="creates in flight")
    p.add_argument("--batch-size", type=int, help="use batch create, N per request")
    target_options(p)
    p.set_defaults(run=register)

    p = commands.add_parser("wheel", help=wheel.__doc__)
    p.add_argument("--entries", type=int, default=1_000_000, help="tasks loaded into the wheel")
    p.add_argument("--span-s", type=int, default=300, help="their instants spread over this span")
    p.add_argument("--tick-ms", type=int, default=10)
    p.set_defaults(run=wheel)

    p = commands.add_parser("load", help=load.__doc__)
    p.add_argument("--storage", required=True, help="storage URL (a fresh database prefix is used)")
    p.add_argument("--sizes", default="100000,1000000,5000000", help="stored-row totals to grow through")
    p.add_argument("--due", type=int, default=10_000, help="tasks due within the next cycle (fixed)")
    p.add_argument("--topology", default="8x4x16")
    p.add_argument("--prefix", default="tjbench", help="database prefix for the run")
    p.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    p.set_defaults(run=load)
    return top


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in OWN and not argv[0].startswith("-"):
        name, rest = argv[0], argv[1:]
        if name not in modules():
            raise SystemExit(f"no benchmark named {name!r}; known: {', '.join(OWN + tuple(modules()))}")
        module = importlib.import_module(f"benchmarks.{name}")
        sys.argv = [f"python -m benchmarks {name}", *rest]
        status = module.main()
        if isinstance(status, int):
            raise SystemExit(status)
        return
    args = parser().parse_args(argv)
    if args.command is None:
        print("benchmarks:", ", ".join(OWN + tuple(modules())))
        print("python -m benchmarks <name> --help")
        return
    args.run(args)


if __name__ == "__main__":
    main()
