"""The shard map's etcd calls end at their deadline even when a ``wait_for`` inside swallowed it.

aetcd waits within ``asyncio.wait_for`` while another task connects, and Python 3.11's ``wait_for``
returns when the deadline's cancellation comes as that wait ends (CPython gh-86296); the call then
goes on to etcd bounded only by the client's gRPC timeout (the coordinator builds its clients with
one; this fake has none). A read of the map on an etcd that hangs just then fails within the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import aetcd
import pytest

from tjobs.cluster import etcd_shard_map
from tjobs.cluster.etcd_shard_map import EtcdShardMapStore


class SwallowsItsDeadlineThenHangs:
    async def get(self, key: bytes) -> Any:
        # swallowed: aetcd's wait for a concurrent connect (within wait_for) ended as the deadline came
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        await asyncio.sleep(3600)  # the read, on an etcd that stopped answering
        return None


async def test_a_map_read_whose_deadline_was_lost_still_fails_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(etcd_shard_map, "ETCD_CALL_TIMEOUT_S", 0.05)
    client = cast(aetcd.Client, SwallowsItsDeadlineThenHangs())
    maps = EtcdShardMapStore(b"/tjobs/shard_map", lambda: client, lambda: client)

    reading = asyncio.ensure_future(maps.read())
    await asyncio.wait({reading}, timeout=2.0)
    if not reading.done():
        reading.cancel()
        pytest.fail("the map read did not end within 2 s: its deadline was lost")
    with pytest.raises(TimeoutError):
        reading.result()
