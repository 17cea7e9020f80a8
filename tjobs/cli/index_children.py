"""``tjobs index-children``: index the children of the tasks registered before migration 0024 (README
"Child tasks", docs/operations.md "Upgrades"; :mod:`tjobs.service.child_index`). Run once after upgrading
past 0024, beside the nodes; interrupted, it prints where it stopped, and ``--from-shard`` / ``--after-id``
go on from there (running it again from the start is harmless, only longer)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from tjobs.cli.settings_file import settings_or_exit
from tjobs.service.child_index import IndexPosition, index_children
from tjobs.stores import create_store
from tjobs.stores.task_parent_store import sql_task_parents_of

ConfigOption = Annotated[Path | None, typer.Option("--config", "-c", help="TOML settings file", exists=True)]


def index_children_command(
    config: ConfigOption = None,
    batch: Annotated[int, typer.Option("--batch", help="tasks read a statement (1..10000)")] = 1000,
    tasks_per_s: Annotated[
        float, typer.Option("--tasks-per-s", help="at most this many tasks read a second (above 0)")
    ] = 5000.0,
    from_shard: Annotated[int, typer.Option("--from-shard", help="go on from this shard (a printed position)")] = 0,
    after_id: Annotated[int, typer.Option("--after-id", help="... after this task id in it")] = 0,
) -> None:
    """Index the children of the tasks registered before migration 0024, so each joins its children."""
    settings = settings_or_exit(config)
    if not 1 <= batch <= 10_000 or tasks_per_s <= 0 or from_shard < 0 or after_id < 0:
        typer.echo("error: --batch must be 1..10000, --tasks-per-s above 0, --from-shard and --after-id >= 0", err=True)
        raise typer.Exit(2)

    async def run() -> IndexPosition:
        store = create_store(settings.storage)
        parents = sql_task_parents_of(store)
        if parents is None:
            typer.echo("nothing to index: the memory store starts empty")
            return IndexPosition(0, 0)
        await store.start()
        count = store.topology.shard_count
        last = [IndexPosition(from_shard, after_id)]

        def progress(position: IndexPosition) -> None:
            if position.shard != last[-1].shard:
                typer.echo(f"shard {last[-1].shard} done ({position.links} links so far)")
            last.append(position)

        try:
            return await index_children(
                parents,
                count,
                batch=batch,
                tasks_per_s=tasks_per_s,
                start=last[0],
                progress=progress,
            )
        except BaseException:
            stopped = last[-1]
            typer.echo(f"stopped; go on with: --from-shard {stopped.shard} --after-id {stopped.after_id}", err=True)
            raise
        finally:
            await store.close()

    end = asyncio.run(run())
    typer.echo(f"indexed: {end.links} links over every shard")
