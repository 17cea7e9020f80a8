"""A node whose stop fails in one part still stops the parts after it and closes the store, then raises that
part's error: a store left open (its pooled SQLite connections) would be closed by the garbage collector, and
aiosqlite's ``ResourceWarning`` (an error under the suite's ``filterwarnings``) would fail whichever test
happens to be running when it collects them."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from tjobs.node import Node
from tjobs.settings import Settings, StorageSettings
from tjobs.stores.migrate import migrate


async def _refuse(*_: Any, **__: Any) -> None:
    raise RuntimeError("stop refused")


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("migrated") / "data"
    asyncio.run(migrate(StorageSettings.model_validate(_storage(data))))
    return data


def _aiosqlite_workers() -> set[threading.Thread]:
    """The threads of the aiosqlite connections still open (one each, named after its target)."""
    return {thread for thread in threading.enumerate() if thread.name.endswith("(_connection_worker_thread)")}


def _storage(data: Path) -> dict[str, Any]:
    return {"urls": [f"sqlite+aiosqlite:///{data}"], "topology": "1x1x4"}


@pytest.mark.parametrize("failing", ["coordinator", "runner", "hot_tier", "slo_recorder"])
async def test_a_node_whose_stop_fails_in_one_part_still_closes_its_store(migrated: Path, failing: str) -> None:
    node = Node(Settings.model_validate({"storage": _storage(migrated), "node_id": f"stop-{failing}"}))
    before = _aiosqlite_workers()
    await node.start()
    await node.store.ping()  # a pooled connection open
    getattr(node, failing).stop = _refuse  # not monkeypatch: it would keep the part, and so the store
    try:
        await node.stop(drain_timeout_s=0.0)
    except RuntimeError as refused:  # (not pytest.raises: its traceback would keep the node)
        assert str(refused) == "stop refused"
    else:
        raise AssertionError("the node's stop raised nothing")
    deadline = asyncio.get_running_loop().time() + 5
    while _aiosqlite_workers() - before and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # (a closed connection's thread ends just after its close returns)
    assert not _aiosqlite_workers() - before, "the store's connections were left open"
    with warnings.catch_warnings(record=True) as caught:  # the node, its error and their frames collected now
        warnings.simplefilter("always")
        del node
        gc.collect()
    assert [str(warning.message) for warning in caught if warning.category is ResourceWarning] == []
