"""Database health per server: which shards this node must pause because their server is unreachable.

tjobs spreads its shards over several database servers so that one server's outage stays one
server's outage. :class:`DatabaseHealth` pings every server on a connection of its own
(:meth:`TaskStore.ping_server`) every ``interval_s``; a server that fails a ping, or does not answer
within ``ping_timeout_s`` while this node's event loop kept turning (:class:`StallWatch`: a deadline
that passed during a stall of the node's own is not held against the server), is *unreachable* from
that moment, and the shards it holds are *paused* on this node: the runner drops their wheel entries
and commits nothing for them, while the shards of every other server keep firing. The first answered
ping makes the server reachable again; its shards are reloaded from the database and fire what came
due meanwhile (misfire policy past the
threshold). Each transition is logged once (``db_server_unreachable``, ``db_server_recovered``).

Pausing is local, and the node keeps its job groups; its unreachable servers go into its member
record, and when another node reaches such a server the plan moves that server's shards to it
(:mod:`tjobs.cluster.reachability`: a partition that cuts off only this node). Only when *no* server
has answered for ``db_unreachable_max_s`` does the etcd coordinator fence the
node and give its groups up (:meth:`all_unreachable_for_s`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tjobs.cancellation import cancel_until_done, stop_task, within
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)

PING_INTERVAL_S = 0.5
PING_TIMEOUT_S = 2.0

NO_ANSWER = "no answer within"
STALL_TICK_S = 0.05

PausedListener = Callable[[frozenset[int]], Awaitable[None]]


@dataclass(slots=True)
class ServerState:
    reachable: bool = True
    last_ok: float = 0.0  # monotonic time of the last answered ping
    down_since: float | None = None  # monotonic time of the first failed ping of this outage
    error: str = ""


class DatabaseHealth:
    def __init__(
        self,
        store: TaskStore,
        shard_count: int,
        *,
        interval_s: float = PING_INTERVAL_S,
        ping_timeout_s: float = PING_TIMEOUT_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._shard_count = shard_count
        self._interval_s = interval_s
        self._ping_timeout_s = ping_timeout_s
        self._monotonic = monotonic
        self._listeners: list[PausedListener] = []
        self._states: dict[str, ServerState] = {}
        self._shards_of: dict[str, frozenset[int]] = {}
        self._paused: frozenset[int] = frozenset()
        self._renotify = False  # a listener failed: hand it the paused set again at the next check
        self._task: asyncio.Task[None] | None = None
        self._started_at = monotonic()

    def subscribe(self, listener: PausedListener) -> None:
        """Call ``listener`` with the paused shards whenever that set changes."""
        self._listeners.append(listener)

    @property
    def running(self) -> bool:
        return self._task is not None

    async def start(self) -> None:
        if self._task is not None:
            return
        self._map_servers()
        await self.check_once()
        self._task = asyncio.create_task(self._loop(), name="tjobs-db-health")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task)  # asked again while the loop runs on: never a lost cancellation's hang

    def servers_changed(self) -> None:
        """The shard map moved a logical database: map shards to servers again at the next check
        (servers already known keep their state)."""
        self._shards_of = {}

    def _map_servers(self) -> None:
        if self._shards_of:
            return
        shards: dict[str, set[int]] = {server: set() for server in self._store.database_servers()}
        for shard in range(self._shard_count):
            shards.setdefault(self._store.server_of_shard(shard), set()).add(shard)
        self._shards_of = {server: frozenset(ids) for server, ids in shards.items()}
        now = self._monotonic()
        self._states = {server: self._states.get(server) or ServerState(last_ok=now) for server in shards}

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.check_once()

    async def check_once(self) -> None:
        """Ping every server once (concurrently), update their states, and hand the paused shards to
        every listener when they changed (or a listener failed last time)."""
        self._map_servers()
        servers = list(self._states)
        watch = StallWatch()
        try:
            results = await asyncio.gather(*(self._ping(server) for server in servers))
        finally:
            stalled_s = await watch.stop()
        now = self._monotonic()
        for server, error in zip(servers, results, strict=True):
            if error is not None and error.startswith(NO_ANSWER) and stalled_s >= self._ping_timeout_s / 2:
                logger.warning(
                    "database server %s did not answer its ping within %g s, but this node's event loop"
                    " stalled %.2f s meanwhile; not held against the server",
                    server,
                    self._ping_timeout_s,
                    stalled_s,
                    extra={"action": "db_ping_inconclusive", "server": server},
                )
                continue
            self._record(server, error, now)
        paused = frozenset(
            shard for server, state in self._states.items() if not state.reachable for shard in self._shards_of[server]
        )
        if paused != self._paused or self._renotify:
            self._paused = paused
            self._renotify = False
            for listener in self._listeners:
                try:
                    await listener(paused)
                except Exception:
                    self._renotify = True
                    logger.exception(
                        "applying the paused shards failed; retrying at the next check",
                        extra={"action": "db_health_failed"},
                    )

    async def _ping(self, server: str) -> str | None:
        try:
            # not asyncio.timeout: asyncmy connects within wait_for, which can swallow the deadline
            await within(self._store.ping_server(server), self._ping_timeout_s)  # (gh-86296)
        except TimeoutError:
            return f"{NO_ANSWER} {self._ping_timeout_s:g} s"
        except Exception as error:
            cause = error.__cause__ or error  # the driver's error, not the message naming the URL
            return f"{type(cause).__name__}: {cause}"
        return None

    def _record(self, server: str, error: str | None, now: float) -> None:
        state = self._states[server]
        if error is None:
            if not state.reachable:
                logger.warning(
                    "database server %s answers again after %.1f s; resuming its %d shards",
                    server,
                    now - (state.down_since or now),
                    len(self._shards_of[server]),
                    extra={"action": "db_server_recovered", "server": server},
                )
            state.reachable, state.last_ok, state.down_since, state.error = True, now, None, ""
            return
        state.error = error
        if state.reachable:
            state.reachable, state.down_since = False, now
            logger.error(
                "database server %s unreachable (%s); pausing its %d shards on this node",
                server,
                error,
                len(self._shards_of[server]),
                extra={"action": "db_server_unreachable", "server": server},
            )

    # ---- views --------------------------------------------------------------------------------------

    def paused_shards(self) -> frozenset[int]:
        return self._paused

    def unreachable_servers(self) -> list[str]:
        return [server for server, state in self._states.items() if not state.reachable]

    def all_unreachable_for_s(self) -> float:
        """How long since *any* server last answered (0 while one does): the node-wide fence input."""
        if not self._states:
            return 0.0
        if any(state.reachable for state in self._states.values()):
            return 0.0
        return self._monotonic() - max(state.last_ok for state in self._states.values())

    def describe(self) -> list[dict[str, object]]:
        """One entry per server for ``/v1/cluster`` and the readiness check: name (no credentials), whether
        it answers, since when it does not, the last error and how many shards are paused."""
        now = self._monotonic()
        return [
            {
                "server": server,
                "reachable": state.reachable,
                "unreachable_for_s": round(now - state.down_since, 1) if state.down_since is not None else 0.0,
                "error": state.error or None,
                "shards": len(self._shards_of.get(server, ())),
                "paused_shards": 0 if state.reachable else len(self._shards_of.get(server, ())),
            }
            for server, state in self._states.items()
        ]


class StallWatch:
    """While a check's pings run, ticks every :data:`STALL_TICK_S` and keeps the longest time this event
    loop took beyond a tick (a synchronous stretch, a starved process): whether a ping's deadline passed
    because of the server or because of this node."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._task = asyncio.create_task(self._tick(), name="tjobs-db-health-stall")

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(STALL_TICK_S)
            self.longest_s = max(self.longest_s, loop.time() - before - STALL_TICK_S)

    async def stop(self) -> float:
        # Not ``cancel(); with suppress(CancelledError): await task``: a cancellation of the caller during
        # that await is passed on to the tick, comes back as the tick's CancelledError and was swallowed
        # with it (the health loop then never stopped). asyncio.wait raises the caller's own.
        await cancel_until_done(self._task)
        return self.longest_s
