"""A node whose start fails after its store opened closes the store: otherwise the pooled SQLite
connections are left to the garbage collector, and aiosqlite's ``ResourceWarning`` (an error under the
suite's ``filterwarnings``) fails whichever test happens to be running when it collects them."""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path
from typing import Any

import pytest

from tjobs.node import Node
from tjobs.settings import Settings, StorageSettings
from tjobs.stores.migrate import migrate


async def _refuse(*_: Any, **__: Any) -> None:
    raise RuntimeError("coordination refused")


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite directory for every case (migrating costs a second or two; a copy elsewhere would
    not do: the data records its own path in the shard map). Each case's node fails to start, writing nothing."""
    data = tmp_path_factory.mktemp("migrated") / "data"
    asyncio.run(migrate(StorageSettings.model_validate(_storage(data))))
    return data


def _storage(data: Path) -> dict[str, Any]:
    return {"urls": [f"sqlite+aiosqlite:///{data}"], "topology": "1x1x4"}


@pytest.mark.parametrize("failing", ["runner", "hot_tier", "coordinator", "slo_recorder"])
async def test_a_node_whose_start_fails_leaves_no_connection_to_the_garbage_collector(
    migrated: Path, failing: str
) -> None:
    storage = _storage(migrated)
    node = Node(Settings.model_validate({"storage": storage}))
    getattr(node, failing).start = _refuse  # not monkeypatch: it would keep the part, and so the store
    try:
        await node.start()
    except RuntimeError as refused:
        assert str(refused) == "coordination refused"
    else:
        raise AssertionError("the node started")
    with warnings.catch_warnings(record=True) as caught:  # the node, its error and their frames collected now
        warnings.simplefilter("always")
        del node
        gc.collect()
    assert [str(warning.message) for warning in caught if warning.category is ResourceWarning] == []
