"""The ``tjobs`` command: ``dev``, ``serve``, ``migrate`` and ``bench``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tjobs.cli.api_commands import app_app, dlq_app, import_tasks, task_app
from tjobs.clock import SystemClock
from tjobs.observability.logs import configure_logging
from tjobs.settings import Settings, load_settings, metrics_exposure_problem, weak_admin_key_reason

app = typer.Typer(help="tjobs: massive task triggering.", no_args_is_help=True, add_completion=False)
bench_app = typer.Typer(help="Benchmarks: fire path, registration, wheel memory, cycle load.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
app.add_typer(task_app, name="task")
app.add_typer(app_app, name="app")
app.add_typer(dlq_app, name="dlq")
app.command("import")(import_tasks)
console = Console(stderr=True)

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="TOML settings file", exists=True)]
PortOption = Annotated[int | None, typer.Option("--port", help="API port (overrides settings)")]
JsonLogs = Annotated[bool, typer.Option("--json-logs", help="JSON log lines instead of text")]


def _settings(config: Path | None, port: int | None, **overrides: Any) -> Settings:
    if port is not None:
        overrides.setdefault("api", {})["port"] = port
    return load_settings(config, **overrides)


def _migrate_with_progress(settings: Settings) -> None:
    from tjobs.stores.migrate import migrate

    with Progress(
        TextColumn("[bold]migrate[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task("databases", total=None)

        def report(database: str, done: int, total: int) -> None:
            progress.update(bar, description=database, completed=done, total=total)

        asyncio.run(migrate(settings.storage, report))


@app.command()
def migrate(config: ConfigOption = None) -> None:
    """Create the logical databases and apply the schema to every shard (idempotent)."""
    _migrate_with_progress(_settings(config, None))


@app.command()
def serve(config: ConfigOption = None, port: PortOption = None, json_logs: JsonLogs = False) -> None:
    """Run a node (API + scheduler) with the given settings until SIGTERM."""
    from tjobs.api.server import run
    from tjobs.api.server import serve as serve_node

    configure_logging(json=json_logs)
    settings = _settings(config, port)
    problem = weak_admin_key_reason(settings) or metrics_exposure_problem(settings)
    if problem is not None:
        typer.echo(f"refusing to start: {problem}", err=True)
        raise typer.Exit(2)
    run(serve_node(settings))


def dev_settings(port: int, data_dir: Path, keys: dict[str, str]) -> Settings:
    """``tjobs dev``'s settings: SQLite shards in ``data_dir``. Loopback callbacks are not opened to
    every app: the demo app's allow-list admits 127.0.0.1 and localhost (:func:`tjobs.api.demo.bootstrap_demo`)."""
    return load_settings(
        None,
        storage={"urls": [f"sqlite+aiosqlite:///{(data_dir / 'data').resolve()}"]},
        api={"port": port, "admin_key": keys["admin_key"]},
    )


@app.command()
def dev(
    port: Annotated[int, typer.Option("--port", help="API port")] = 8080,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="where the SQLite shards live")] = Path(".tjobs"),
    demo: Annotated[bool, typer.Option("--demo/--no-demo", help="register the demo tasks")] = True,
    json_logs: JsonLogs = False,
) -> None:
    """The embedded default: SQLite shards + in-process coordination, API and scheduler in one process,
    with a demo app, a built-in echo receiver and demo tasks whose callbacks arrive within seconds."""
    from tjobs.api.demo import bootstrap_demo
    from tjobs.api.server import run
    from tjobs.api.server import serve as serve_node
    from tjobs.node import Node

    configure_logging(json=json_logs)
    data_dir.mkdir(parents=True, exist_ok=True)
    keys = _dev_keys(data_dir / "dev-keys.json")
    settings = dev_settings(port, data_dir, keys)
    _migrate_with_progress(settings)
    base_url = f"http://127.0.0.1:{port}"

    async def after_start(node: Node) -> None:
        ids = await bootstrap_demo(node, keys["demo_api_key"], base_url) if demo else []
        console.print(
            f"\n[bold green]tjobs dev[/] is up at {base_url}  (OpenAPI: {base_url}/docs)\n"
            f"  demo app API key : [bold]{keys['demo_api_key']}[/]\n"
            f"  admin key        : {keys['admin_key']}\n"
            f"  demo tasks       : {', '.join(ids) or 'none'} → callbacks print below as they arrive\n"
            f"  try: curl -s -X POST {base_url}/v1/tasks -H 'Authorization: Bearer {keys['demo_api_key']}' "
            f'-H \'content-type: application/json\' -d \'{{"name": "hello", "schedule": {{"kind": "delay", '
            f'"delay_ms": 3000}}, "callback": {{"url": "{base_url}/_demo/echo"}}}}\'\n'
        )

    run(serve_node(settings, demo=demo, after_start=after_start))


# ---- benchmarks -------------------------------------------------------------------------------

UrlOption = Annotated[str | None, typer.Option("--url", help="a running node's base URL")]
AdminKeyOption = Annotated[str | None, typer.Option("--admin-key", help="its admin key (with --url)")]
EmbeddedOption = Annotated[bool, typer.Option("--embedded", help="start an embedded (SQLite) node for the run")]
StorageOption = Annotated[
    list[str] | None, typer.Option("--storage", help="start a node on these storage URLs for the run")
]
TopologyOption = Annotated[str | None, typer.Option("--topology", help="shard topology of a started node")]
JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON object on stdout")]


@contextlib.contextmanager
def _bench_target(
    url: str | None, admin_key: str | None, embedded: bool, storage: list[str] | None, topology: str | None
) -> Iterator[tuple[str, str, int | None]]:
    """The node a bench drives: a running one (--url), or one started for the run and stopped after
    (then its pid comes too, for the node's CPU figures)."""
    from tjobs.bench.node_process import node_process

    if url:
        if not admin_key:
            raise typer.BadParameter("--admin-key is required with --url")
        yield url, admin_key, None
        return
    if not embedded and not storage:
        raise typer.BadParameter("give --url, --embedded or --storage")
    with node_process(storage_urls=storage or None, topology=topology) as node:
        console.print(f"node {node.pid} on {node.base_url} (log: {node.log_path})")
        yield node.base_url, node.admin_key, node.pid


@bench_app.command("fire")
def bench_fire(
    tasks: Annotated[int, typer.Option(help="one-shot tasks to register")] = 20_000,
    window_s: Annotated[float, typer.Option("--window-s", help="their instants spread over this window")] = 10.0,
    lead_s: Annotated[float | None, typer.Option("--lead-s", help="first instant this far ahead")] = None,
    register_rate: Annotated[float | None, typer.Option("--register-rate", help="creates/s (default: max)")] = None,
    concurrency: Annotated[int, typer.Option(help="creates in flight")] = 64,
    drain_timeout_s: Annotated[float, typer.Option("--drain-timeout-s")] = 30.0,
    verify_every: Annotated[int, typer.Option("--verify-every", help="check every n-th signature")] = 0,
    url: UrlOption = None,
    admin_key: AdminKeyOption = None,
    embedded: EmbeddedOption = False,
    storage: StorageOption = None,
    topology: TopologyOption = None,
    json_out: JsonOption = False,
) -> None:
    """Register N tasks due across a window over HTTP, sink their callbacks, report rate and lateness."""
    from tjobs.bench.fire import run, run_fire_bench
    from tjobs.bench.report import emit, rich_progress

    with (
        _bench_target(url, admin_key, embedded, storage, topology) as (base_url, key, pid),
        rich_progress(console) as progress,
    ):
        result = run(
            run_fire_bench(
                base_url,
                key,
                tasks=tasks,
                window_s=window_s,
                lead_s=lead_s,
                register_rate=register_rate,
                concurrency=concurrency,
                progress=progress,
                drain_timeout_s=drain_timeout_s,
                verify_every=verify_every,
                node_pid=pid,
            )
        )
    emit(result, console, as_json=json_out)


@bench_app.command("register")
def bench_register(
    tasks: Annotated[int, typer.Option(help="tasks to create")] = 20_000,
    register_rate: Annotated[float | None, typer.Option("--register-rate", help="creates/s (default: max)")] = None,
    concurrency: Annotated[int, typer.Option(help="creates in flight")] = 64,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="use batch create, N per request")] = None,
    url: UrlOption = None,
    admin_key: AdminKeyOption = None,
    embedded: EmbeddedOption = False,
    storage: StorageOption = None,
    topology: TopologyOption = None,
    json_out: JsonOption = False,
) -> None:
    """Single (or batch) creates per second over HTTP; the tasks are deleted afterwards."""
    from tjobs.bench.fire import run, run_register_bench
    from tjobs.bench.report import emit, rich_progress

    with (
        _bench_target(url, admin_key, embedded, storage, topology) as (base_url, key, _),
        rich_progress(console) as progress,
    ):
        result = run(
            run_register_bench(
                base_url,
                key,
                tasks=tasks,
                register_rate=register_rate,
                concurrency=concurrency,
                batch_size=batch_size,
                progress=progress,
            )
        )
    emit(result, console, as_json=json_out)


@bench_app.command("wheel")
def bench_wheel(
    entries: Annotated[int, typer.Option(help="tasks loaded into the wheel")] = 1_000_000,
    span_s: Annotated[int, typer.Option("--span-s", help="their instants spread over this span")] = 300,
    tick_ms: Annotated[int, typer.Option("--tick-ms")] = 10,
) -> None:
    """Wheel memory (bytes per loaded task) and the cost of add, cancel and advance."""
    from tjobs.bench.wheel_memory import measure

    print(json.dumps(measure(entries=entries, span_ms=span_s * 1000, tick_ms=tick_ms)))


@bench_app.command("load")
def bench_load(
    storage: Annotated[str, typer.Option("--storage", help="storage URL (a fresh database prefix is used)")],
    sizes: Annotated[str, typer.Option(help="stored-row totals to grow through")] = "100000,1000000,5000000",
    due: Annotated[int, typer.Option(help="tasks due within the next cycle (fixed)")] = 10_000,
    topology: Annotated[str, typer.Option("--topology")] = "8x4x16",
    prefix: Annotated[str, typer.Option("--prefix", help="database prefix for the run")] = "tjbench",
    keep: Annotated[bool, typer.Option("--keep/--drop", help="keep the databases afterwards")] = False,
) -> None:
    """Cycle load time with the due slice fixed while stored tasks grow (100k → 5M by default)."""
    from tjobs.bench.cycle_load import drop_databases, measure
    from tjobs.settings import StorageSettings
    from tjobs.stores import create_store
    from tjobs.stores.migrate import migrate as migrate_storage

    settings = StorageSettings(urls=[storage], topology=topology, database_prefix=prefix)

    async def main() -> list[dict[str, Any]]:
        await migrate_storage(settings)
        store = create_store(settings)
        await store.start()
        try:
            return await measure(
                store,
                [int(s) for s in sizes.split(",")],
                due,
                SystemClock().now_ms(),
                progress=lambda line: console.print(line),
            )
        finally:
            await store.close()
            if not keep:
                drop_databases(settings)

    print(json.dumps(asyncio.run(main())))


def _dev_keys(path: Path) -> dict[str, str]:
    """The dev server's admin and demo keys, stable across restarts of the same data directory."""
    if path.exists():
        stored: dict[str, str] = json.loads(path.read_text())
        return stored
    keys = {"admin_key": "tja_" + secrets.token_urlsafe(24), "demo_api_key": "tjk_demo_" + secrets.token_urlsafe(24)}
    path.write_text(json.dumps(keys, indent=2))
    path.chmod(0o600)
    return keys


def main() -> None:
    app()


if __name__ == "__main__":
    main()
