"""The executor registry's etcd calls end at their deadline even when a ``wait_for`` inside swallowed it.

aetcd waits within ``asyncio.wait_for`` while another task connects, and Python 3.11's ``wait_for``
returns when the deadline's cancellation comes as that wait ends (CPython gh-86296); the call then
goes on to etcd bounded only by the client's gRPC timeout (the coordinator builds its clients with
one; this fake has none). A pool read on an etcd that hangs just then answers 503
(:class:`StorageUnavailable`) within the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import aetcd
import pytest

from tjobs.cluster import etcd_pools
from tjobs.cluster.etcd_pools import EtcdPoolRegistry
from tjobs.errors import StorageUnavailable


class SwallowsItsDeadlineThenHangs:
    async def get_prefix(self, prefix: bytes) -> Any:
        # swallowed: aetcd's wait for a concurrent connect (within wait_for) ended as the deadline came
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        await asyncio.sleep(3600)  # the read, on an etcd that stopped answering
        return []


async def test_a_pool_read_whose_deadline_was_lost_still_fails_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(etcd_pools, "ETCD_CALL_TIMEOUT_S", 0.05)
    client = cast(aetcd.Client, SwallowsItsDeadlineThenHangs())
    registry = EtcdPoolRegistry(lambda: client, "c", lambda: 0)

    reading = asyncio.ensure_future(registry.executors("app", "workers"))
    await asyncio.wait({reading}, timeout=2.0)
    if not reading.done():
        reading.cancel()
        pytest.fail("the pool read did not end within 2 s: its deadline was lost")
    with pytest.raises(StorageUnavailable):
        reading.result()
