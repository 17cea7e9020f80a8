"""Nodes' runtime figures on etcd (the contract: :class:`tjobs.cluster.base.Coordinator`, its node figures
methods).

One key per node, under a root of its own (so the coordinator's sync, which reads ``/tjobs/<cluster
name>/`` whole every ``sync_interval_ms``, never carries them)::

    /tjobs-figures/<cluster name>/<node id>   the node's figures (JSON)   on the node's lease

Written every few seconds by the node (:mod:`tjobs.service.node_figures`), read whole by whoever shows
them: a node whose lease ended (stopped, died, lost it) has no key. Each call is bounded by
:func:`tjobs.cancellation.within`; anything but an answer is :class:`StorageUnavailable`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import aetcd

from tjobs.cancellation import within
from tjobs.cluster.etcd_view import ETCD_CALL_TIMEOUT_S
from tjobs.errors import StorageUnavailable


class EtcdNodeFigures:
    def __init__(self, client: Callable[[], aetcd.Client], cluster_name: str) -> None:
        self._client = client
        self._root = f"/tjobs-figures/{cluster_name}/".encode()

    async def publish(self, node_id: str, lease_id: int | None, figures: Mapping[str, Any]) -> None:
        """Put the node's record on its lease; nothing without one (not a member now)."""
        if lease_id is None:
            return
        value = json.dumps(figures, sort_keys=True, separators=(",", ":")).encode()
        try:
            await within(self._client().put(self._root + node_id.encode(), value, lease=lease_id), ETCD_CALL_TIMEOUT_S)
        except (Exception, TimeoutError) as error:
            raise StorageUnavailable(f"etcd did not take this node's figures ({error})") from None

    async def read(self) -> dict[str, dict[str, Any]]:
        try:
            found = await within(self._client().get_prefix(self._root), ETCD_CALL_TIMEOUT_S)
        except (Exception, TimeoutError) as error:
            raise StorageUnavailable(f"etcd did not answer with the nodes' figures ({error})") from None
        records: dict[str, dict[str, Any]] = {}
        for kv in found:
            try:
                value = json.loads(bytes(kv.value))
            except ValueError:
                continue
            if isinstance(value, dict):
                records[bytes(kv.key)[len(self._root) :].decode()] = value
        return dict(sorted(records.items()))
