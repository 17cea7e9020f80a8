"""A node's published database sessions and ending a former owner's, without services: the record
round-trips through its etcd value, every server's sessions are ended, and a server that fails is
skipped without stopping the others."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from sharding import Topology
from tjobs.cluster import session_fence
from tjobs.cluster.session_fence import end_sessions_of, parse_sessions, sessions_value
from tjobs.errors import StorageUnavailable
from tjobs.stores.base import ServerSessions
from tjobs.stores.memory import MemoryTaskStore


class SessionsStore(MemoryTaskStore):
    def __init__(self, sessions: dict[str, ServerSessions]) -> None:
        super().__init__(Topology(1, 1, 4))
        self.sessions = sessions
        self.ended: list[tuple[str, ServerSessions]] = []
        self.down: set[str] = set()

    def fire_sessions(self) -> dict[str, ServerSessions]:
        return self.sessions

    async def end_sessions(self, server: str, sessions: ServerSessions) -> int:
        if server in self.down:
            raise StorageUnavailable(f"database {server} is unavailable")
        self.ended.append((server, sessions))
        return len(sessions.ids)


def test_a_record_round_trips_through_its_etcd_value() -> None:
    sessions = {"db1:3306": ServerSessions(1_795_000_000, [11, 12]), "db2:3306": ServerSessions(1_795_000_100, [7])}
    value = sessions_value(SessionsStore(sessions))
    assert value is not None
    recorded = parse_sessions("n1", value, revision=42)
    assert (recorded.node_id, recorded.servers, recorded.revision) == ("n1", sessions, 42)


def test_a_store_without_sessions_publishes_nothing() -> None:
    assert sessions_value(MemoryTaskStore(Topology(1, 1, 4))) is None


async def test_every_servers_sessions_are_ended_and_a_failing_server_is_skipped() -> None:
    sessions = {
        "db1:3306": ServerSessions(1, [11, 12]),
        "db2:3306": ServerSessions(1, [7]),
        "db3:3306": ServerSessions(1, [5]),
    }
    store = SessionsStore({})
    store.down.add("db2:3306")
    recorded = parse_sessions("n1", sessions_value(SessionsStore(sessions)) or b"", revision=1)

    assert await end_sessions_of(store, recorded) == 3
    assert [server for server, _ in store.ended] == ["db1:3306", "db3:3306"]


class SwallowsItsDeadlineThenHangs(SessionsStore):
    async def end_sessions(self, server: str, sessions: ServerSessions) -> int:
        if server != "db2:3306":
            return await super().end_sessions(server, sessions)
        # swallowed: asyncmy's connect (within wait_for) finished as the deadline's cancellation came (gh-86296)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        await asyncio.sleep(3600)  # the KILLs, on a server that accepted the connection and then hangs
        return 0


async def test_a_server_that_hangs_after_its_deadline_was_lost_is_skipped_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_fence, "END_SESSIONS_TIMEOUT_S", 0.05)
    sessions = {
        "db1:3306": ServerSessions(1, [11]),
        "db2:3306": ServerSessions(1, [7]),
        "db3:3306": ServerSessions(1, [5]),
    }
    store = SwallowsItsDeadlineThenHangs({})
    recorded = parse_sessions("n1", sessions_value(SessionsStore(sessions)) or b"", revision=1)

    ending = asyncio.ensure_future(end_sessions_of(store, recorded))
    await asyncio.wait({ending}, timeout=2.0)
    if not ending.done():
        ending.cancel()
        pytest.fail("ending the sessions did not return within 2 s: the deadline of db2's KILLs was lost")
    assert ending.result() == 2
    assert [server for server, _ in store.ended] == ["db1:3306", "db3:3306"]
