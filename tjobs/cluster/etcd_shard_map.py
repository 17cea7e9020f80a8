"""The shard map's key of the etcd coordinator (``<prefix>shard_map``, no lease: it outlives every node).

Seeded once (create-if-absent), replaced only by a compare-and-set on the key's revision after the stored
epoch was checked (the contract: :class:`tjobs.cluster.base.Coordinator`, its shard map methods). Every
sync reads it with the rest of the prefix (:func:`tjobs.cluster.etcd_view.read_view`) and offers it to
the listener (:class:`tjobs.cluster.shard_maps.ShardMapWatch`). Each call is bounded by
:func:`tjobs.cancellation.within`, not ``asyncio.timeout``: aetcd waits for a concurrent connect within
``wait_for``, which can swallow the deadline (gh-86296); a call is then bounded only by the client's
gRPC timeout (the coordinator's clients have one: at most twice the bound).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable

import aetcd

from sharding.shard_map import ShardMap
from tjobs.cancellation import within
from tjobs.cluster.etcd_view import ETCD_CALL_TIMEOUT_S


class EtcdShardMapStore:
    def __init__(self, key: bytes, running: Callable[[], aetcd.Client | None], new_client: Callable[[], aetcd.Client]):
        self._key = key
        self._running = running  # the coordinator's client while it runs, else None
        self._new_client = new_client

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[aetcd.Client]:
        """The running client, or one of its own before ``start`` and after ``stop``."""
        running = self._running()
        if running is not None:
            yield running
            return
        client = self._new_client()
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def _stored(self, client: aetcd.Client) -> tuple[ShardMap | None, int]:
        """The stored map and its key's mod revision (0: no map)."""
        kv = await within(client.get(self._key), ETCD_CALL_TIMEOUT_S)
        if kv is None:
            return None, 0
        return ShardMap.from_json(json.loads(kv.value)), int(kv.mod_revision)

    async def read(self) -> ShardMap | None:
        async with self._client() as client:
            return (await self._stored(client))[0]

    async def seed(self, seed: ShardMap) -> ShardMap:
        key = self._key
        async with self._client() as client:
            await within(
                client.transaction(
                    compare=[client.transactions.create(key) == 0],
                    success=[client.transactions.put(key, json.dumps(seed.to_json()).encode())],
                    failure=[],
                ),
                ETCD_CALL_TIMEOUT_S,
            )
            stored, _ = await self._stored(client)
        if stored is None:
            raise RuntimeError("the shard map was seeded but reads back as missing")
        return stored

    async def replace(self, new: ShardMap, expected_epoch: int) -> bool:
        if new.epoch <= expected_epoch:
            return False
        key = self._key
        async with self._client() as client:
            stored, revision = await self._stored(client)
            if stored is None or stored.epoch != expected_epoch:
                return False
            replaced, _ = await within(
                client.transaction(
                    compare=[client.transactions.mod(key) == revision],
                    success=[client.transactions.put(key, json.dumps(new.to_json()).encode())],
                    failure=[],
                ),
                ETCD_CALL_TIMEOUT_S,
            )
        return bool(replaced)
