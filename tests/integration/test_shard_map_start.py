"""A node routes by the stored shard map; the configured server list only seeds it. A node started with
another list is refused at start, naming the difference, until the operator re-seeds the map's server
list (``tjobs shards reseed``), which ``tjobs shards status`` then shows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testkit import run_node
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.cli.main import app
from tjobs.cluster.local import LocalCoordinator
from tjobs.cluster.shard_maps import reseed_shard_map
from tjobs.settings import StorageSettings, load_settings
from tjobs.stores.layout_record import ShardMapMismatch
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore


async def test_a_node_started_with_another_server_list_is_refused_until_the_map_is_reseeded(tmp_path: Path) -> None:
    first = f"sqlite+aiosqlite:///{tmp_path / 'a'}"
    second = f"sqlite+aiosqlite:///{tmp_path / 'b'}"
    storage = {"urls": [first], "topology": "2x2x4"}
    await migrate(StorageSettings(**storage))
    async with run_node(load_settings(None, storage=storage, **FAST_SETTINGS)) as running:
        shard_map = running.node.store.shard_map()
        assert shard_map is not None and shard_map.epoch == 1

    grown = {**storage, "urls": [first, second]}
    with pytest.raises(ShardMapMismatch, match=rf"storage.urls lists {tmp_path / 'b'}, which the shard map does not"):
        async with run_node(load_settings(None, storage=grown, **FAST_SETTINGS)):
            pass

    store = SQLAlchemyTaskStore(StorageSettings(**grown))
    await store.start()
    try:
        reseeded = await reseed_shard_map(LocalCoordinator(16, map_home=store), store)
    finally:
        await store.close()
    assert reseeded.epoch == 2 and reseeded.servers == (str(tmp_path / "a"), str(tmp_path / "b"))

    async with run_node(load_settings(None, storage=grown, **FAST_SETTINGS)) as running:
        in_use = running.node.store.shard_map()
        assert in_use is not None and in_use.epoch == 2
        assert set(in_use.placement) == {str(tmp_path / "a")}  # nothing moved: the data stays where it is
    with pytest.raises(ShardMapMismatch, match="lacks"):  # and the old list is now the wrong one
        async with run_node(load_settings(None, storage=storage, **FAST_SETTINGS)):
            pass


def test_tjobs_shards_status_and_reseed_on_the_embedded_record(tmp_path: Path) -> None:
    first = f"sqlite+aiosqlite:///{tmp_path / 'a'}"
    second = f"sqlite+aiosqlite:///{tmp_path / 'b'}"
    asyncio.run(migrate(StorageSettings(urls=[first], topology="1x2x4")))
    config = tmp_path / "tjobs.toml"
    config.write_text(f'[storage]\nurls = ["{first}", "{second}"]\ntopology = "1x2x4"\n')

    shown = CliRunner().invoke(app, ["shards", "status", "--config", str(config)])
    reseeded = CliRunner().invoke(app, ["shards", "reseed", "--config", str(config)])

    assert shown.exit_code == 0 and "shard map epoch 1" in shown.output
    assert f"{tmp_path / 'a'}: 2 logical databases [0, 1]" in shown.output
    assert reseeded.exit_code == 0, reseeded.output
    assert "shard map epoch 2" in reseeded.output and f"{tmp_path / 'b'}: 0 logical databases" in reseeded.output
