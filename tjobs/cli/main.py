"""The ``tjobs`` command: ``dev``, ``serve`` and ``migrate`` (benchmarks: ``python -m benchmarks``, in a checkout).

The other commands (the API's, ``shards``) are built when named (:mod:`tjobs.cli.lazy_commands`), and
what ``serve`` does not use is imported inside the command that does (rich's progress bar, the node's
modules in ``dev``), so starting a node imports only what a node runs on."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tjobs.cli.lazy_commands import LazyCommandsGroup
from tjobs.cli.settings_file import refusing_start_on_a_mismatch, settings_or_exit
from tjobs.cli.workers import READY_LINE, worker_settings, workers_problem
from tjobs.observability.logs import configure_logging
from tjobs.settings import (
    Settings,
    metrics_exposure_problem,
    weak_admin_key_reason,
    weak_scrape_token_reason,
)

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    cls=LazyCommandsGroup, help="tjobs: massive task triggering.", no_args_is_help=True, add_completion=False
)

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="TOML settings file", exists=True)]
PortOption = Annotated[int | None, typer.Option("--port", help="API port (overrides settings)")]
JsonLogs = Annotated[bool, typer.Option("--json-logs", help="JSON log lines instead of text")]


def _settings(config: Path | None, port: int | None, **overrides: Any) -> Settings:
    if port is not None:
        overrides.setdefault("api", {})["port"] = port
    return settings_or_exit(config, **overrides)


def _console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _migrate_with_progress(settings: Settings) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tjobs.stores.migrate import migrate

    with Progress(
        TextColumn("[bold]migrate[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(),
        transient=False,
    ) as progress:
        bar = progress.add_task("databases", total=None)

        def report(database: str, done: int, total: int) -> None:
            progress.update(bar, description=database, completed=done, total=total)

        with refusing_start_on_a_mismatch():
            asyncio.run(migrate(settings.storage, report))


PlanOption = Annotated[
    bool,
    typer.Option(
        "--plan",
        help="change nothing: list the pending migrations, each online or offline, and how to upgrade "
        "(docs/operations.md, 'Upgrades')",
    ),
]


@app.command()
def migrate(config: ConfigOption = None, plan: PlanOption = False) -> None:
    """Create the logical databases and apply the schema to every shard (idempotent)."""
    settings = _settings(config, None)
    if not plan:
        _migrate_with_progress(settings)
        return
    from tjobs.stores.migration_plan import migration_plan, plan_lines

    recorded, pending = asyncio.run(migration_plan(settings.storage))
    typer.echo("\n".join(plan_lines(recorded, pending)))


WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        help="run N node processes on this box, one cluster member each, behind one API port "
        "(needs etcd and MariaDB/MySQL; docs/operations.md, 'Workers')",
        show_default=False,
    ),
]


@app.command()
def serve(
    config: ConfigOption = None,
    port: PortOption = None,
    json_logs: JsonLogs = False,
    workers: WorkersOption = None,
    worker_index: Annotated[int | None, typer.Option("--worker-index", hidden=True)] = None,
    listen_fd: Annotated[int | None, typer.Option("--listen-fd", hidden=True)] = None,
    ready_fd: Annotated[int | None, typer.Option("--ready-fd", hidden=True)] = None,
) -> None:
    """Run a node (API + scheduler) with the given settings until SIGTERM; with ``--workers N``, N of them.

    ``--worker-index``, ``--listen-fd`` and ``--ready-fd`` are how the supervisor of ``--workers`` starts
    each worker (:mod:`tjobs.cli.supervisor`): its index, the API's listening socket it inherits, and the
    pipe it says it serves on."""
    configure_logging(json=json_logs)
    settings = _settings(config, port)  # a refusal reads only the settings: the server is loaded after
    problem = (
        (workers_problem(settings, workers) if workers is not None else None)
        or weak_admin_key_reason(settings)
        or weak_scrape_token_reason(settings)
        or metrics_exposure_problem(settings)
    )
    if problem is not None:
        typer.echo(f"refusing to start: {problem}", err=True)
        raise typer.Exit(2)
    if workers is not None:
        from tjobs.cli.supervisor import supervise

        options = [*(["--config", str(config)] if config else []), *(["--port", str(port)] if port is not None else [])]
        raise typer.Exit(supervise(settings, workers, [*options, *(["--json-logs"] if json_logs else [])]))
    if worker_index is not None:
        settings = worker_settings(settings, worker_index)
    from tjobs.api.server import run
    from tjobs.api.server import serve as serve_node
    from tjobs.console import include_console

    api_socket = None if listen_fd is None else socket.socket(fileno=listen_fd)
    with refusing_start_on_a_mismatch():
        run(serve_node(settings, mount=include_console, api_socket=api_socket, after_start=_telling(ready_fd)))


def _telling(ready_fd: int | None) -> Callable[[object], Awaitable[None]] | None:
    """Once the node serves, write the ready line to the supervisor's pipe (``--ready-fd``) and close it."""
    if ready_fd is None:
        return None

    async def ready(node: object) -> None:
        try:
            os.write(ready_fd, READY_LINE)
        except BrokenPipeError:
            pass  # the supervisor has gone: its death signal (SIGTERM) stops this worker
        finally:
            os.close(ready_fd)

    return ready


def dev_settings(port: int, data_dir: Path, keys: dict[str, str]) -> Settings:
    """``tjobs dev``'s settings: SQLite shards in ``data_dir``. Loopback callbacks are not opened to
    every app: the demo app's allow-list admits 127.0.0.1 and localhost (:func:`tjobs.api.demo.bootstrap_demo`).
    A bad setting from the environment (``TJOBS_STORAGE__TOPOLOGY=3x3``) exits 2 naming it, no traceback."""
    return settings_or_exit(
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
    configure_logging(json=json_logs)
    data_dir.mkdir(parents=True, exist_ok=True)
    keys = _dev_keys(data_dir / "dev-keys.json")
    settings = dev_settings(port, data_dir, keys)  # refused before the server is loaded
    _migrate_with_progress(settings)
    from tjobs.api.demo import bootstrap_demo
    from tjobs.api.server import run
    from tjobs.api.server import serve as serve_node
    from tjobs.console import include_console
    from tjobs.node import Node

    base_url = f"http://127.0.0.1:{port}"

    async def after_start(node: Node) -> None:
        ids = await bootstrap_demo(node, keys["demo_api_key"], base_url) if demo else []
        _console().print(
            f"\n[bold green]tjobs dev[/] is up at {base_url}  (OpenAPI: {base_url}/docs)\n"
            f"  demo app API key : [bold]{keys['demo_api_key']}[/]\n"
            f"  admin key        : {keys['admin_key']}\n"
            f"  demo tasks       : {', '.join(ids) or 'none'} → callbacks print below as they arrive\n"
            f"  try: curl -s -X POST {base_url}/v1/tasks -H 'Authorization: Bearer {keys['demo_api_key']}' "
            f'-H \'content-type: application/json\' -d \'{{"name": "hello", "schedule": {{"kind": "delay", '
            f'"delay_ms": 3000}}, "callback": {{"url": "{base_url}/_demo/echo"}}}}\'\n'
        )

    with refusing_start_on_a_mismatch():
        run(serve_node(settings, demo=demo, after_start=after_start, mount=include_console))


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
