"""Database-level fencing of a former owner: its sessions end when another node takes its jobs over.

A node frozen inside a fire transaction (SIGSTOP, a stalled VM) keeps its connection, its open
transaction and that transaction's row locks for as long as it stays frozen; its lease expires and a
backup takes the group over, but the backup's first fire transaction would wait on those locks. So
each node publishes the server-side ids of its connections (``sessions/<node id>`` in etcd, with no
lease, so the record outlives the node's lease), and a node gaining jobs (acquiring a group, or a
re-plan growing a group it holds) ends the recorded sessions of every node whose member key is gone
(its lease expired or was revoked) before it loads and fires: ``KILL CONNECTION`` rolls their
transactions back and frees the locks at once, and a former owner that wakes up finds its connection
dead, so it cannot commit either. Sessions the
record missed (opened after the last publish) are bounded by ``innodb_lock_wait_timeout``
(:data:`tjobs.stores.sql_layout.ROW_LOCK_WAIT_S`) and retried.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from tjobs.cancellation import within
from tjobs.stores.base import ServerSessions, TaskStore

logger = logging.getLogger(__name__)

END_SESSIONS_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class RecordedSessions:
    """One node's published sessions as read from etcd."""

    node_id: str
    servers: dict[str, ServerSessions]  # server name -> its start time and the session ids
    revision: int  # the key's mod revision, so only this record is deleted once ended


def sessions_value(store: TaskStore) -> bytes | None:
    """This node's record, or ``None`` when the store has no sessions another node could end."""
    sessions = store.fire_sessions()
    if not sessions:
        return None
    servers = {server: {"booted_at_s": s.booted_at_s, "ids": s.ids} for server, s in sessions.items()}
    return json.dumps({"servers": servers}, sort_keys=True).encode()


def parse_sessions(node_id: str, value: bytes, revision: int) -> RecordedSessions:
    """Raise ``ValueError``, ``KeyError`` or ``TypeError`` on a record of another shape."""
    servers = json.loads(value)["servers"]
    return RecordedSessions(
        node_id,
        {
            str(server): ServerSessions(int(entry["booted_at_s"]), [int(i) for i in entry["ids"]])
            for server, entry in servers.items()
        },
        revision,
    )


async def end_sessions_of(store: TaskStore, recorded: RecordedSessions, why: str = "its lease is gone") -> int:
    """End the recorded sessions on every server that answers (each within
    :data:`END_SESSIONS_TIMEOUT_S`); returns how many were ended. A server that fails is logged and
    skipped: its sessions' locks are then bounded by the lock-wait timeout instead."""
    ended = 0
    for server, sessions in recorded.servers.items():
        try:
            # not asyncio.timeout: asyncmy connects within wait_for, which can swallow the deadline (gh-86296)
            ended += await within(store.end_sessions(server, sessions), END_SESSIONS_TIMEOUT_S)
        except Exception as error:
            logger.warning(
                "could not end the sessions of former owner %s on %s (%s)",
                recorded.node_id,
                server,
                error,
                extra={"action": "db_sessions_end_failed", "server": server},
            )
    if ended:
        logger.warning(
            "ended %d database sessions of former owner %s (%s)",
            ended,
            recorded.node_id,
            why,
            extra={"action": "db_sessions_ended", "former_owner": recorded.node_id},
        )
    return ended
