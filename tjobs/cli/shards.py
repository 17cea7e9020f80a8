"""``tjobs shards``: the shard map (which server holds each logical database) as the operator sees it.

- ``status``: the map's epoch and servers, the logical databases on each server, and the tasks and
  flows each database holds;
- ``reseed``: make the map's server list the configured ``storage.urls`` (adding a server before
  moving databases onto it, or correcting the order); placements are kept, and a server that still
  holds databases cannot be dropped;
- ``plan --servers …`` (and ``rebalance --servers …``, the same): the moves that would spread the
  logical databases evenly over that server list (:func:`sharding.rebalance.plan_rebalance`); nothing
  moves, unless ``rebalance --apply``, which performs them one after the other;
- ``move --db N --to host:port`` (MariaDB): move one logical database online
  (:mod:`tjobs.cluster.shard_move`); rerun after an interruption to finish, ``--abort`` to roll back;
  ``drop-old --db N`` drops the old copy of a finished move.

Both read and write the map where the nodes do: etcd when ``cluster.etcd_endpoints`` is set, else the
map record in the first logical database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from sharding.rebalance import Move
from sharding.shard_map import ShardMap
from tjobs.cli.settings_file import settings_or_exit
from tjobs.clock import SystemClock
from tjobs.cluster.base import Coordinator
from tjobs.cluster.local import LocalCoordinator
from tjobs.cluster.shard_maps import reseed_shard_map
from tjobs.cluster.shard_move import MoveRefused, ShardMover
from tjobs.errors import InvalidInput
from tjobs.service.shards import ShardStatus, plan, shard_status, stored_map
from tjobs.settings import Settings
from tjobs.stores import create_store
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts import MoveRow
from tjobs.stores.copy_pace import DEFAULT_COPY_DUTY, CopyPace

shards_app = typer.Typer(help="The shard map: which database server holds each logical database.", no_args_is_help=True)

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="TOML settings file", exists=True)]
ServersOption = Annotated[
    list[str],
    typer.Option("--servers", help="the new server list (host:port), first unchanged; repeat it or separate by commas"),
]
CopyDutyOption = Annotated[
    float,
    typer.Option(
        "--copy-duty",
        help="the share of the time the copy and catch-up keep the servers busy (above 0, at most 1; "
        "1: unpaced); they rest after each batch for the rest",
    ),
]
MaxRowsPerSOption = Annotated[
    int | None, typer.Option("--max-rows-per-s", help="copy no more rows per second than this (default: no cap)")
]
T = TypeVar("T")


def _pace_or_exit(copy_duty: float, max_rows_per_s: int | None) -> CopyPace:
    """The copy's pace from the options, or exit 2 naming the bad one (before anything is touched)."""
    try:
        return CopyPace(copy_duty, max_rows_per_s)
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error


def _coordinator(settings: Settings, store: TaskStore) -> Coordinator:
    if settings.cluster.etcd_endpoints:
        from tjobs.cluster.wiring import build_coordinator

        return build_coordinator(settings, "tjobs-shards-cli", store, SystemClock())
    return LocalCoordinator(store.topology.shard_count, map_home=store)


def _with_map(config: Path | None, act: Callable[[Coordinator, TaskStore], Awaitable[T]]) -> T:
    settings = settings_or_exit(config)

    async def run() -> T:
        store = create_store(settings.storage)
        await store.start()
        try:
            return await act(_coordinator(settings, store), store)
        finally:
            await store.close()

    return asyncio.run(run())


def _describe(shard_map: ShardMap) -> str:
    lines = [f"shard map epoch {shard_map.epoch}"]
    for server in shard_map.servers:
        held = shard_map.databases_on(server)
        lines.append(f"  {server}: {len(held)} logical databases {held}")
    return "\n".join(lines)


def _rows(status: ShardStatus) -> str:
    lines = ["  database  server                      tasks        flows"]
    for row in status.databases:
        lines.append(f"  {row.database:>8}  {row.server:<24}  {row.tasks:>11,}  {row.flows:>11,}")
    return "\n".join(lines)


@shards_app.command()
def status(config: ConfigOption = None) -> None:
    """The stored shard map: its epoch, the logical databases on each server and their rows."""

    async def read(coordinator: Coordinator, store: TaskStore) -> ShardStatus | None:
        shard_map = await coordinator.read_shard_map()
        if shard_map is None:
            return None
        store.use_shard_map(shard_map)
        return await shard_status(coordinator, store)

    found = _with_map(config, read)
    if found is None:
        typer.echo("no shard map yet: the first node (or tjobs migrate) seeds it from storage.urls")
        raise typer.Exit(1)
    typer.echo(_describe(found.shard_map))
    typer.echo(_rows(found))


def _plan(config: Path | None, servers: list[str]) -> None:
    listed = [name.strip() for value in servers for name in value.split(",") if name.strip()]

    async def propose(coordinator: Coordinator, store: TaskStore) -> tuple[ShardMap, list[Move]]:
        shard_map = await stored_map(coordinator)
        return shard_map, plan(shard_map, listed)

    try:
        shard_map, moves = _with_map(config, propose)
    except InvalidInput as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    if not moves:
        typer.echo(f"shard map epoch {shard_map.epoch}: the logical databases are spread evenly already; no move")
        return
    typer.echo(f"shard map epoch {shard_map.epoch}: {len(moves)} moves for an even spread over {', '.join(listed)}")
    for move in moves:
        typer.echo(f"  tjobs shards move --db {move.database} --to {move.target}    # now on {move.source}")


def _mover_run(
    config: Path | None,
    act: Callable[[ShardMover], Awaitable[MoveRow]],
    batch_rows: int = 1000,
    cut_over_below: int = 200,
    pace: CopyPace | None = None,
) -> MoveRow:
    async def run(coordinator: Coordinator, store: TaskStore) -> MoveRow:
        shard_map = await coordinator.read_shard_map()
        if shard_map is not None:
            store.use_shard_map(shard_map)
        mover = ShardMover(
            coordinator,
            store,
            batch_rows=batch_rows,
            cut_over_below=cut_over_below,
            pace=pace,
            report=typer.echo,
        )
        try:
            return await act(mover)
        finally:
            await mover.close()

    try:
        return _with_map(config, run)
    except MoveRefused as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error


DatabaseOption = Annotated[int, typer.Option("--db", help="the logical database's index")]


@shards_app.command()
def move(
    database: DatabaseOption,
    to: Annotated[str | None, typer.Option("--to", help="the server (host:port) to move it to")] = None,
    abort: Annotated[bool, typer.Option("--abort", help="roll back the recorded move of --db")] = False,
    batch_rows: Annotated[int, typer.Option("--batch-rows", min=1, help="rows per copy batch")] = 1000,
    cut_over_below: Annotated[
        int, typer.Option("--cut-over-below", min=1, help="cut over once fewer changed rows than this are behind")
    ] = 200,
    copy_duty: CopyDutyOption = DEFAULT_COPY_DUTY,
    max_rows_per_s: MaxRowsPerSOption = None,
    config: ConfigOption = None,
) -> None:
    """Move a logical database to another server while the cluster runs (rerun to resume)."""
    pace = _pace_or_exit(copy_duty, max_rows_per_s)
    if abort:
        _mover_run(config, lambda mover: mover.abort(database))
        return
    if to is None:
        typer.echo("error: --to host:port is required (or --abort)", err=True)
        raise typer.Exit(2)
    target = to
    row = _mover_run(config, lambda mover: mover.move(database, target), batch_rows, cut_over_below, pace)
    typer.echo(f"logical database {row.database} is on {row.target} (map epoch {row.epoch}); the old copy on")
    typer.echo(f"{row.source} is kept read-only until: tjobs shards drop-old --db {row.database}")


@shards_app.command("drop-old")
def drop_old(database: DatabaseOption, config: ConfigOption = None) -> None:
    """Drop the old, read-only copy of a finished move."""
    _mover_run(config, lambda mover: mover.drop_old(database))


@shards_app.command("plan")
def plan_command(servers: ServersOption, config: ConfigOption = None) -> None:
    """The moves that would spread the logical databases evenly over --servers (nothing moves)."""
    _plan(config, servers)


@shards_app.command()
def rebalance(
    servers: ServersOption,
    apply: Annotated[bool, typer.Option("--apply", help="perform the moves, one after the other")] = False,
    copy_duty: CopyDutyOption = DEFAULT_COPY_DUTY,
    max_rows_per_s: MaxRowsPerSOption = None,
    config: ConfigOption = None,
) -> None:
    """Propose the moves of an even spread over --servers (one `tjobs shards move` each); --apply
    performs them one by one, paced as `move` (the old copies are kept until drop-old)."""
    pace = _pace_or_exit(copy_duty, max_rows_per_s)
    _plan(config, servers)
    if not apply:
        return
    listed = [name.strip() for value in servers for name in value.split(",") if name.strip()]

    async def perform(coordinator: Coordinator, store: TaskStore) -> None:
        shard_map = await stored_map(coordinator)
        store.use_shard_map(shard_map)
        moves = plan(shard_map, listed)
        mover = ShardMover(coordinator, store, pace=pace, report=typer.echo)
        try:
            for number, step in enumerate(moves, 1):
                typer.echo(f"move {number} of {len(moves)}: logical database {step.database} to {step.target}")
                await mover.move(step.database, step.target)
        finally:
            await mover.close()

    try:
        _with_map(config, perform)
    except (InvalidInput, MoveRefused) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error


@shards_app.command()
def reseed(config: ConfigOption = None) -> None:
    """Make the shard map's server list the configured storage.urls (placements are kept)."""
    shard_map = _with_map(config, reseed_shard_map)
    typer.echo(_describe(shard_map))
