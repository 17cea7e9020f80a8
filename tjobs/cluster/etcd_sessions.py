"""The session fence on etcd: this node's ``sessions/<node id>`` record, and the ending of a former
owner's sessions when its jobs are taken over (the fence itself: :mod:`tjobs.cluster.session_fence`).

A live node that reports a server unreachable (``db_down`` in its member record,
:mod:`tjobs.cluster.reachability`) loses that server's shards to nodes that reach it; those end its
recorded sessions *on that server* before they fire them, since a transaction it had open when the link
went silent holds its row locks on the server (and could commit when the link comes back)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import aetcd

from tjobs.cluster.etcd_view import ClusterView
from tjobs.cluster.reachability import DB_DOWN_KEY
from tjobs.cluster.session_fence import RecordedSessions, end_sessions_of, sessions_value
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)


class EtcdSessionFence:
    def __init__(
        self,
        *,
        node_id: str,
        store: TaskStore,
        ttl_s: int,
        client: Callable[[], aetcd.Client],
        key: Callable[[str], bytes],
    ) -> None:
        self.node_id = node_id
        self._store = store
        self._ttl_s = ttl_s
        self._etcd = client
        self._key = key  # node id -> its sessions key
        self.published: bytes | None = None  # the record last put (None: none, or put again)
        self.deferred = False  # ending the sessions of gone nodes waits for etcd to serve normally
        self._cut_ended: set[tuple[str, str, int]] = set()  # (node, server, record revision) ended already

    async def publish(self) -> None:
        """Record this node's database sessions (:mod:`tjobs.cluster.session_fence`) when they changed."""
        value = sessions_value(self._store)
        if value is None or value == self.published:
            return
        await self._etcd().put(self._key(self.node_id), value)
        self.published = value

    async def end_former_owners(self, view: ClusterView, etcd_failed_at: float) -> None:
        """Before firing newly acquired jobs: end the sessions of every node whose lease is gone, so
        no transaction of a frozen former owner holds row locks or can commit.

        A missing member key means its node is gone only while etcd serves this node normally: when
        this node failed an etcd call or lost its lease within the last lease TTL (``etcd_failed_at``,
        monotonic), every lease may have ended together (etcd frozen or restarted past the TTL) and the
        others are re-registering.
        The ending then waits until this node has talked to etcd without failure for a lease TTL and
        is decided on the view of that sync (a node back by then keeps its sessions); the locks of a
        frozen former owner are bounded meanwhile by the lock-wait timeout.

        A live node's sessions on a server it reports unreachable are ended too (once per record), with
        no deferral: that node says so itself."""
        await self._end_cut_off(view)
        gone = [
            recorded
            for node_id, recorded in view.sessions.items()
            if node_id != self.node_id and node_id not in view.members
        ]
        quiet_for_s = time.monotonic() - etcd_failed_at
        if gone and quiet_for_s < self._ttl_s:
            if not self.deferred:
                logger.info(
                    "ending the sessions of %s deferred: etcd failed %.1f s ago, their leases may have ended with it",
                    ", ".join(r.node_id for r in gone),
                    quiet_for_s,
                    extra={"action": "db_sessions_end_deferred"},
                )
            self.deferred = True
            return
        self.deferred = False
        client = self._etcd()
        for recorded in gone:
            node_id = recorded.node_id
            await end_sessions_of(self._store, recorded)
            key = self._key(node_id)
            await client.transaction(
                compare=[client.transactions.mod(key) == recorded.revision],
                success=[client.transactions.delete(key)],
                failure=[],
            )

    async def _end_cut_off(self, view: ClusterView) -> None:
        own = view.members.get(self.node_id) or {}
        unreachable_here = own.get(DB_DOWN_KEY) or ()  # a server this node cannot reach either: no KILL to send
        for node_id, recorded in view.sessions.items():
            member = view.members.get(node_id)
            down = member.get(DB_DOWN_KEY) if member is not None and node_id != self.node_id else None
            if not isinstance(down, list | dict):
                continue
            servers = {
                server: sessions
                for server, sessions in recorded.servers.items()
                if server in down
                and server not in unreachable_here
                and (node_id, server, recorded.revision) not in self._cut_ended
            }
            if servers:
                cut = RecordedSessions(node_id, servers, recorded.revision)
                await end_sessions_of(self._store, cut, f"it cannot reach {', '.join(sorted(servers))}")
                self._cut_ended.update((node_id, server, recorded.revision) for server in servers)
        # A record no longer in the view (its node published a newer one, or its key is gone) cannot come
        # back under the same revision: forgotten, so a long-lived node keeps one entry per server it ended
        # of each current record, not one per record ever seen.
        current = {node_id: recorded.revision for node_id, recorded in view.sessions.items()}
        self._cut_ended = {ended for ended in self._cut_ended if current.get(ended[0]) == ended[2]}
