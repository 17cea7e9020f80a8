"""Ending a cut-off node's sessions on the server it cannot reach (tjobs.cluster.etcd_sessions): a live
node whose member record says ``db_down`` loses that server's shards to nodes that reach it, and they end
its recorded sessions there (only there, once per record) before they fire those shards."""

from __future__ import annotations

from typing import cast

import aetcd
import pytest

from tests.unit.test_session_fence import SessionsStore
from tjobs.cluster.etcd_sessions import EtcdSessionFence
from tjobs.cluster.etcd_view import ClusterView
from tjobs.cluster.reachability import DB_DOWN_KEY
from tjobs.cluster.session_fence import RecordedSessions
from tjobs.stores.base import ServerSessions

DB1, DB2 = "db1:3306", "db2:3306"
RECORD = {DB1: ServerSessions(1, [11, 12]), DB2: ServerSessions(1, [7, 8])}


def no_etcd() -> aetcd.Client:
    return cast(aetcd.Client, object())  # no node is gone: nothing is deleted in etcd


def fence(store: SessionsStore) -> EtcdSessionFence:
    return EtcdSessionFence(node_id="b", store=store, ttl_s=5, client=no_etcd, key=lambda node: node.encode())


def view(down: object, revision: int = 3, own_down: object = None) -> ClusterView:
    return ClusterView(
        members={"a": {"node_id": "a", DB_DOWN_KEY: down}, "b": {"node_id": "b", DB_DOWN_KEY: own_down}},
        sessions={"a": RecordedSessions("a", dict(RECORD), revision), "b": RecordedSessions("b", dict(RECORD), 4)},
    )


async def test_a_live_nodes_sessions_are_ended_only_on_the_server_it_cannot_reach_and_once() -> None:
    store = SessionsStore({})
    sessions = fence(store)
    await sessions.end_former_owners(view({DB2: 1_000}), etcd_failed_at=float("-inf"))
    assert store.ended == [(DB2, RECORD[DB2])]
    await sessions.end_former_owners(view([DB2]), etcd_failed_at=float("-inf"))
    assert len(store.ended) == 1, "the same record is not ended twice"
    await sessions.end_former_owners(view([DB2], revision=9), etcd_failed_at=float("-inf"))
    assert len(store.ended) == 2, "a record published since is ended again"


@pytest.mark.parametrize("down", [[], None, "junk", [DB2.upper()]])
async def test_a_node_that_reaches_every_server_keeps_its_sessions(down: object) -> None:
    store = SessionsStore({})
    await fence(store).end_former_owners(view(down), etcd_failed_at=float("-inf"))
    assert store.ended == []


async def test_ending_a_cut_off_nodes_sessions_is_not_deferred_by_a_recent_etcd_failure() -> None:
    store = SessionsStore({})
    await fence(store).end_former_owners(view([DB1, DB2]), etcd_failed_at=float("inf"))
    assert sorted(server for server, _ in store.ended) == [DB1, DB2]


async def test_no_kill_is_sent_to_a_server_this_node_cannot_reach_either() -> None:
    store = SessionsStore({})
    await fence(store).end_former_owners(view({DB1: 1, DB2: 1}, own_down={DB2: 1}), etcd_failed_at=float("-inf"))
    assert [server for server, _ in store.ended] == [DB1]


async def test_the_records_ended_are_forgotten_once_their_node_published_another() -> None:
    """A long-lived node remembers only the cut-off records still in the view: one entry per server of
    each current record, however many records a flapping peer published (one per partition) over its life."""
    store = SessionsStore({})
    sessions = fence(store)
    for revision in range(10, 110):
        await sessions.end_former_owners(view([DB1, DB2], revision=revision), etcd_failed_at=float("-inf"))
    assert len(store.ended) == 200, "each record published is ended on both servers"
    assert len(sessions._cut_ended) == 2, "only the current record's servers are remembered"
    await sessions.end_former_owners(view([DB1, DB2], revision=109), etcd_failed_at=float("-inf"))
    assert len(store.ended) == 200, "the current record is still ended once"
