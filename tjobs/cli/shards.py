"""``tjobs shards``: the shard map (which server holds each logical database) as the operator sees it.

- ``status``: the map's epoch and servers, and the logical databases on each server;
- ``reseed``: make the map's server list the configured ``storage.urls`` (adding a server before
  moving databases onto it, or correcting the order); placements are kept, and a server that still
  holds databases cannot be dropped.

Both read and write the map where the nodes do: etcd when ``cluster.etcd_endpoints`` is set, else the
map record in the first logical database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from sharding.shard_map import ShardMap
from tjobs.clock import SystemClock
from tjobs.cluster.base import Coordinator
from tjobs.cluster.local import LocalCoordinator
from tjobs.cluster.shard_maps import reseed_shard_map
from tjobs.settings import Settings, load_settings
from tjobs.stores import create_store
from tjobs.stores.base import TaskStore

shards_app = typer.Typer(help="The shard map: which database server holds each logical database.", no_args_is_help=True)

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="TOML settings file", exists=True)]
T = TypeVar("T")


def _coordinator(settings: Settings, store: TaskStore) -> Coordinator:
    if settings.cluster.etcd_endpoints:
        from tjobs.cluster.wiring import build_coordinator

        return build_coordinator(settings, "tjobs-shards-cli", store, SystemClock())
    return LocalCoordinator(store.topology.shard_count, map_home=store)


def _with_map(config: Path | None, act: Callable[[Coordinator, TaskStore], Awaitable[T]]) -> T:
    settings = load_settings(config)

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


@shards_app.command()
def status(config: ConfigOption = None) -> None:
    """The stored shard map: its epoch and the logical databases on each server."""

    async def read(coordinator: Coordinator, store: TaskStore) -> ShardMap | None:
        return await coordinator.read_shard_map()

    shard_map = _with_map(config, read)
    if shard_map is None:
        typer.echo("no shard map yet: the first node (or tjobs migrate) seeds it from storage.urls")
        raise typer.Exit(1)
    typer.echo(_describe(shard_map))


@shards_app.command()
def reseed(config: ConfigOption = None) -> None:
    """Make the shard map's server list the configured storage.urls (placements are kept)."""
    shard_map = _with_map(config, reseed_shard_map)
    typer.echo(_describe(shard_map))
