"""``tjobs shards status`` shows the rows of each logical database; ``tjobs shards plan`` and
``rebalance`` print the moves of an even spread over a server list and move nothing (embedded record)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from tests.contract.backends import make_task
from tjobs.cli.main import app
from tjobs.settings import StorageSettings
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


def test_status_counts_rows_and_plan_proposes_moves_onto_a_new_server(tmp_path: Path) -> None:
    first = f"sqlite+aiosqlite:///{tmp_path / 'a'}"
    storage = StorageSettings(urls=[first], topology="1x2x4")

    async def prepare() -> None:
        await migrate(storage)
        store = SQLAlchemyTaskStore(storage)
        await store.start()
        try:
            for shard in (4, 5, 6):  # logical database 1
                await store.insert_task(make_task(shard=shard))
        finally:
            await store.close()

    asyncio.run(prepare())
    config = tmp_path / "tjobs.toml"
    config.write_text(f'[storage]\nurls = ["{first}"]\ntopology = "1x2x4"\n')
    runner = CliRunner()

    shown = runner.invoke(app, ["shards", "status", "--config", str(config)])
    planned = runner.invoke(
        app, ["shards", "plan", "--config", str(config), "--servers", f"{tmp_path / 'a'},db-b:3306"]
    )
    again = runner.invoke(app, ["shards", "rebalance", "-c", str(config), "--servers", str(tmp_path / "a")])
    refused = runner.invoke(app, ["shards", "plan", "-c", str(config), "--servers", "db-b:3306"])

    assert shown.exit_code == 0, shown.output
    rows = [line.split() for line in shown.output.splitlines() if line.strip()[:1].isdigit()]
    assert [(row[0], row[2], row[3]) for row in rows] == [("0", "0", "0"), ("1", "3", "0")]
    assert planned.exit_code == 0, planned.output
    assert "1 moves for an even spread" in planned.output
    assert "tjobs shards move --db 1 --to db-b:3306" in planned.output
    assert again.exit_code == 0 and "spread evenly already; no move" in again.output
    assert refused.exit_code == 2 and "servers: the server list must start with" in refused.output
