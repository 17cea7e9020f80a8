"""The fault suite's load: interval tasks firing every second over a window, a stream of one-shot tasks
registered while the fault runs, some pauses and deletes; and the read-backs (flows from the database,
``GET`` of every acknowledged task). Every call records what the accounting needs to build a
:class:`Promise`.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from sharding import Topology, shard_of_task_id
from testkit.cluster_rig import ADMIN_KEY, ClusterRig, NodeProc, now_ms
from tests.chaos.accounting import Promise, StoredFlow
from tjobs.clock import iso_ms

CONFLICT_RETRIES = 20
# An occurrence due less than this before a pause or delete was sent may still be waiting to fire (normal
# lateness, under load), and the pause or delete cancels it: it may fire, it need not.
STOP_RACE_MS = 1000


@dataclass
class Registered:
    """One acknowledged task: its schedule's instants, when its create was sent and acknowledged, and,
    once paused or deleted, when that was sent and acknowledged.

    A recurring task starts at the first occurrence after its create was validated: it must fire the
    instants due from the acknowledgement on and may fire those due from the send on (a create slower
    than the lead to ``start_at`` skips the first ones). A one-shot task owes its instant whenever it was
    acknowledged (``fire_now``). A pause or delete cuts the promise: instants due :data:`STOP_RACE_MS`
    before its send must fire, those due up to its acknowledgement may."""

    task_id: int
    instants: list[int]
    create_sent_ms: int = 0
    create_acked_ms: int = 0
    recurring: bool = True
    stop_sent_ms: int | None = None
    stop_acked_ms: int | None = None
    deleted: bool = False
    acknowledged: bool = True  # False: its create answered storage_outcome_unknown (it owes nothing)

    def promise(self, server: int) -> Promise:
        must, may = (self.instants if self.acknowledged else []), self.instants
        if self.recurring:
            must = [i for i in must if i >= self.create_acked_ms]
            may = [i for i in may if i >= self.create_sent_ms]
        if self.stop_sent_ms is not None and self.stop_acked_ms is not None:
            must = [i for i in must if i < self.stop_sent_ms - STOP_RACE_MS]
            may = [i for i in may if i <= self.stop_acked_ms]
        return Promise(
            self.task_id,
            server,
            frozenset(must),
            frozenset(may),
            self.deleted,
            self.create_sent_ms,
            self.create_acked_ms,
        )


@dataclass(frozen=True)
class NamedAgain:
    """A create whose answer (``"acknowledged"`` or ``"unconfirmed"``) named a task id an earlier answer
    of the same book had named: one of the two was told another request's task. Never expected."""

    answer: str
    task_id: int
    instants: list[int]
    create_sent_ms: int
    create_answered_ms: int


@dataclass
class Book:
    """Everything the workload was promised, and the creates that got no answer. The first answer naming
    a task id is booked; a later one naming the same id is kept in ``named_twice`` instead."""

    tasks: dict[int, Registered] = field(default_factory=dict)
    unanswered_creates: int = 0  # no answer, or a 5xx that does not say what was stored
    refused_creates: int = 0  # answered, but not 201 (a clear error: nothing was promised)
    unavailable_creates: int = 0  # of the refused: 503 storage_unavailable (nothing stored)
    unconfirmed: dict[int, Registered] = field(default_factory=dict)  # 503 storage_outcome_unknown
    named_twice: list[NamedAgain] = field(default_factory=list)


def create_answer(status: int, body: Any) -> tuple[str, int | None]:
    """What a create's answer promised: ``("acknowledged", id)`` for a 201; ``("unavailable", None)`` for
    a 503 ``storage_unavailable`` (nothing was stored); ``("unconfirmed", id)`` for a 503
    ``storage_outcome_unknown`` naming the task it may have stored; ``("refused", None)`` for any other
    4xx; ``("unanswered", None)`` for any other 5xx (it may have stored something, no id known)."""
    if status == 201:
        return "acknowledged", int(body["id"])
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if status == 503 and code == "storage_unavailable":
        return "unavailable", None
    details = error.get("details") if isinstance(error, dict) else None
    if status == 503 and code == "storage_outcome_unknown" and isinstance(details, dict):
        return "unconfirmed", int(details["task_id"])
    return ("unanswered" if status >= 500 else "refused"), None


HTTP_ERRORS = (aiohttp.ClientError, TimeoutError)  # no answer: refused, reset, timed out


@dataclass
class Reply:
    status_code: int
    body: bytes
    headers: CIMultiDictProxy[str]

    def json(self) -> Any:
        return json.loads(self.body)  # ValueError when not JSON

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise RuntimeError(f"HTTP {self.status_code}: {self.body[:500]!r}")


class ChaosClient:
    """The app's API calls against one node, recording what each answer promises into ``book``.

    On aiohttp, as the nodes send: the soak makes up to 200 creates a second through it, and an httpx
    POST costs about four times the CPU of an aiohttp one (730-770 against 192 us, docs/testing.md)."""

    def __init__(self, node: NodeProc, callback_url: str) -> None:
        self.node = node
        self.callback_url = callback_url
        self.app_id = ""
        self.book = Book()
        self._headers: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None  # made on the loop, at the first call
        self._slots = asyncio.Semaphore(64)  # creates to a stalled server must not starve the others

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Reply:
        """One call, its answer read whole; no answer raises one of :data:`HTTP_ERRORS`. Each phase (a
        pooled connection, the connect, each read) has 10 s, as httpx's ``timeout=10.0`` gave."""
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=None, connect=10.0, sock_connect=10.0, sock_read=10.0)
            self._session = aiohttp.ClientSession(base_url=self.node.base_url, timeout=timeout)
        async with self._session.request(method, path, json=body, headers=headers or self._headers) as reply:
            return Reply(reply.status, await reply.read(), reply.headers)

    async def create_app(self, max_concurrency: int = 1000) -> str:
        """The app the calls act for; ``max_concurrency``: its callbacks in flight at once, per node."""
        body = {"name": "chaos", "rate_limit_per_s": 100000, "max_concurrency": max_concurrency}
        reply = await self.request("POST", "/v1/apps", body, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        reply.raise_for_status()
        self.app_id = str(reply.json()["id"])
        self._headers = {"Authorization": f"Bearer {reply.json()['api_key']}"}
        return self.app_id

    async def _create(self, body: dict[str, Any], instants: list[int]) -> int | None:
        async with self._slots:
            sent_ms = now_ms()
            try:
                reply = await self.request("POST", "/v1/tasks", body)
            except HTTP_ERRORS:
                self.book.unanswered_creates += 1
                return None
        answer_body: Any
        try:
            answer_body = reply.json()
        except ValueError:
            answer_body = None
        answer, task_id = create_answer(reply.status_code, answer_body)
        if answer == "unanswered":
            self.book.unanswered_creates += 1  # the server may or may not have kept it
        elif answer in ("refused", "unavailable"):
            self.book.refused_creates += 1
            self.book.unavailable_creates += answer == "unavailable"
        if task_id is None:
            return None
        registered = Registered(task_id, instants, sent_ms, now_ms(), recurring=len(instants) > 1)
        if task_id in self.book.tasks or task_id in self.book.unconfirmed:
            self.book.named_twice.append(NamedAgain(answer, task_id, instants, sent_ms, registered.create_acked_ms))
            return None
        if answer == "unconfirmed":
            registered.acknowledged = False
            self.book.unconfirmed[task_id] = registered
            return None
        self.book.tasks[task_id] = registered
        return task_id

    async def create_interval(self, start_ms: int, end_ms: int, every_ms: int) -> int | None:
        """Occurrences ``start_ms + k * every_ms`` up to ``end_ms`` (inclusive); the default misfire
        policy of interval tasks (``fire_soon``)."""
        body = {
            "name": "chaos-interval",
            "callback": {"url": self.callback_url},
            "schedule": {"kind": "interval", "every_ms": every_ms, "start_at_ms": start_ms, "end_at_ms": end_ms},
        }
        return await self._create(body, list(range(start_ms, end_ms + 1, every_ms)))

    async def create_at(self, at_ms: int) -> int | None:
        body = {
            "name": "chaos-at",
            "callback": {"url": self.callback_url},
            "schedule": {"kind": "at", "at": iso_ms(at_ms)},
        }
        return await self._create(body, [at_ms])

    async def stop(self, task_id: int, how: str) -> bool:
        """Pause (``how="pause"``) or delete a task; retried on 409 (a fire landed between read and
        write). True when acknowledged; the promise is then cut at the first send / the acknowledgement."""
        task = self.book.tasks[task_id]
        sent_ms = now_ms()
        for _ in range(CONFLICT_RETRIES):
            if how == "pause":
                reply = await self.request("POST", f"/v1/tasks/{task_id}/pause")
            else:
                reply = await self.request("DELETE", f"/v1/tasks/{task_id}")
            if reply.status_code in (200, 204):
                task.stop_sent_ms, task.stop_acked_ms, task.deleted = sent_ms, now_ms(), how == "delete"
                return True
            if reply.status_code != 409:
                break
        return False

    async def unreadable(self) -> dict[int, str]:
        """Acknowledged, not deleted tasks that ``GET /v1/tasks/{id}`` does not answer with 200, with what it
        answered (a 429 or 503 is asked again after its Retry-After, 3 times at most)."""

        async def answer(task_id: int) -> str:
            for _ in range(4):
                async with self._slots:
                    try:
                        reply = await self.request("GET", f"/v1/tasks/{task_id}")
                    except HTTP_ERRORS as error:
                        return type(error).__name__
                if reply.status_code not in (429, 503):
                    break
                await asyncio.sleep(min(float(reply.headers.get("retry-after", "1") or 1), 5.0))
            return str(reply.status_code)

        ids = [t.task_id for t in self.book.tasks.values() if not t.deleted]
        answers = await asyncio.gather(*(answer(task_id) for task_id in ids))
        return {task_id: got for task_id, got in zip(ids, answers, strict=True) if got != "200"}


async def register_intervals(client: ChaosClient, count: int, start_ms: int, end_ms: int, every_ms: int) -> None:
    await asyncio.gather(*(client.create_interval(start_ms, end_ms, every_ms) for _ in range(count)))


async def stream_one_shots(client: ChaosClient, per_s: float, until_ms: int, seed: int = 10) -> None:
    """Register ``at`` tasks at ``per_s`` until ``until_ms``, each due 1.5-4 s after its create: the
    registrations land on whatever the fault is breaking, and their fires travel the hot tier."""
    pick = random.Random(seed)
    pending: set[asyncio.Task[int | None]] = set()
    while now_ms() < until_ms:
        at_ms = now_ms() + pick.randint(1500, 4000)
        task = asyncio.create_task(client.create_at(at_ms))
        pending.add(task)
        task.add_done_callback(pending.discard)
        await asyncio.sleep(1 / per_s)
    if pending:
        await asyncio.gather(*pending)


def read_flows(rig: ClusterRig, app_id: str) -> list[StoredFlow]:
    """Every flow row of ``app_id``, read from each MariaDB server's flow tables (blocking)."""
    import pymysql
    from sqlalchemy.engine import make_url

    topology = Topology.parse(rig.topology)
    flows: list[StoredFlow] = []
    for server, url_text in enumerate(rig.infra.storage_urls):
        url = make_url(url_text)
        connection = pymysql.connect(
            host=url.host,
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            connect_timeout=5,
        )
        try:
            with connection.cursor() as cursor:
                for shard in rig.shards_of_server(server):
                    where = topology.locate(shard)
                    table = f"`{rig.db_prefix}_{where.database_index:02d}`.`{where.flows_table}`"
                    cursor.execute(
                        f"SELECT task_id, scheduled_at, status, attempts, created_at FROM {table} WHERE app_id = %s",
                        (app_id,),
                    )
                    flows.extend(
                        StoredFlow(int(t), int(s), str(st), int(a), int(c)) for t, s, st, a, c in cursor.fetchall()
                    )
        finally:
            connection.close()
    return flows


def promises(rig: ClusterRig, book: Book, *, unconfirmed: bool = False) -> dict[int, Promise]:
    """The acknowledged tasks' promises (``unconfirmed``: those of the tasks creates may have stored)."""
    tasks = book.unconfirmed if unconfirmed else book.tasks
    return {task_id: task.promise(rig.server_of_shard(shard_of_task_id(task_id))) for task_id, task in tasks.items()}
