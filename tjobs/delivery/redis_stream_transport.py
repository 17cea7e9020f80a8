"""The Redis Streams transport: one ``XADD`` per attempt, pipelined, delivered = the entry id Redis answers.

An attempt appends one entry to the target's ``stream`` with three fields, in this order:

* ``flow_id`` — the flow id, the same on every attempt: consumers deduplicate on it;
* ``headers`` — the request's headers (``webhook-id``, ``webhook-signature``, ``tjobs-*``, the
  task's own) as one JSON object;
* ``body`` — ``request.body`` as sent (the bytes the signature covers).

With ``maxlen`` set the stream is trimmed as it grows (``MAXLEN ~ n``: whole macro nodes, cheap; a
consumer that falls more than ``n`` entries behind loses the oldest, which is what a capped stream
means). Without it a stream grows until the server's ``maxmemory``, where ``XADD`` fails with
``OOM`` (retryable) under the ``noeviction`` policy.

Idempotency: Redis 8.6 added ``XADD … IDMP <producer> <id>``, which stores an entry once per
(producer, id); where the server announces 8.6 or later the transport sends the flow id as that id
(producer ``tjobs``), so a retry whose answer was lost is not stored twice (Redis keeps the last
100 ids per producer for 100 s unless ``XCFGSET`` raises that). Older servers (Redis 7.0, as on this
project's machines) have no such form: a retry may append a second entry for the same ``flow_id``,
and the consumer deduplicates.

Connections: one pool per (server URL, user name, password), created by the first send that needs
it, at most :data:`MAX_CONNECTIONS` connections. The ``XADD`` commands of one event-loop turn go to
the server as one pipeline (at most :data:`MAX_PIPELINE` commands, not a transaction: each is
answered on its own, and a refused one fails only its attempt), so a burst costs one write and one
read per pipeline, not a pooled connection, a round trip and a wake-up per attempt. A pipeline waits
for a free connection; each attempt waits for its own answer within its timeout; a connection that
fails fails every attempt of its pipeline (retryable), and the next pipeline connects again. An
attempt given up (its deadline, or cancelled) raises :class:`asyncio.CancelledError`, never a
result; if its pipeline was already written its ``XADD`` may still be stored (a retry carries the
same flow id). Once every attempt of a pipeline has given up, the pipeline is cancelled and redis-py
closes its connection, so answers no one waits for are never read as another pipeline's, and a
server that stopped answering cannot hold the pool's connections. redis-py's own retries are off
(one attempt is one ``XADD``), and so is its socket timeout: the attempts' deadlines bound the write
and the read. (With a socket timeout redis-py writes within ``asyncio.wait_for``, which on Python
3.11 swallows a cancellation that comes as the write finishes, CPython gh-86296.) A cancellation
absorbed below all the same is raised once the call returns (:mod:`tjobs.delivery.broker`).

What the answers mean: an entry id — :attr:`Outcome.DELIVERED`; ``WRONGPASS``/``NOAUTH`` (wrong or
missing credentials), ``NOPERM`` (the user may not write that key) and ``WRONGTYPE`` (the key holds
something else than a stream) — permanent; ``OOM``, ``READONLY`` (a replica), ``LOADING``, a refused
or reset connection and a timeout — retryable.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence

import orjson
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, NoPermissionError, OutOfMemoryError, ResponseError

from tjobs.delivery.broker import BrokerBusy, BrokerRefused, ConnectedBrokerTransport
from tjobs.delivery.transport import CallbackRequest
from tjobs.targets.model import Protocol, RedisStreamTarget, Target

logger = logging.getLogger(__name__)

MAX_CONNECTIONS = 32  # per server and user
MAX_PIPELINE = 1000  # XADDs written together at most
CONNECT_TIMEOUT_S = 5.0  # the attempt's own timeout bounds it further
PRODUCER = "tjobs"  # the IDMP producer id
IDMP_SINCE = (8, 6)

ClientKey = tuple[str, str, str]  # server URL, user name, password
Queued = tuple[list[str | bytes | int], "asyncio.Future[object]"]  # an XADD and the future of its answer


def xadd_command(
    stream: str, flow_id: str, headers: bytes, body: bytes, maxlen: int | None, idempotent: bool
) -> list[str | bytes | int]:
    """The ``XADD`` of one attempt, as sent (``idempotent``: the server has ``IDMP``)."""
    command: list[str | bytes | int] = ["XADD", stream]
    if idempotent:
        command += ["IDMP", PRODUCER, flow_id]
    if maxlen is not None:
        command += ["MAXLEN", "~", maxlen]
    command += ["*", "flow_id", flow_id, "headers", headers, "body", body]
    return command


def has_idmp(version: str) -> bool:
    """Whether a server of this ``redis_version`` knows ``XADD … IDMP``."""
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) >= IDMP_SINCE
    except ValueError:
        return False


class _Server:
    """One connection pool to one Redis server as one user, and what the server supports."""

    def __init__(self, key: ClientKey) -> None:
        url, username, password = key
        if not url.startswith(("redis://", "rediss://")):
            raise BrokerRefused("the server URL must be redis://host:port/db or rediss://…")
        self.pool = redis.asyncio.BlockingConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=None,  # wait for a free connection; the attempt's deadline bounds the wait
            username=username or None,
            password=password or None,
            socket_timeout=None,  # no asyncio.wait_for around the write; the attempt's deadline bounds it
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
            protocol=2,  # RESP2 whatever the client's default (RESP3 with HELLO since redis-py 8)
        )
        self.client = redis.asyncio.Redis(connection_pool=self.pool)
        self.idempotent: bool | None = None  # unknown until the first send asks the server
        self._asking: asyncio.Lock = asyncio.Lock()
        self._queued: list[Queued] = []
        self._flush_handle: asyncio.Handle | None = None
        self._unanswered: set[asyncio.Future[object]] = set()
        self._pipelines: set[asyncio.Task[None]] = set()

    def xadd(self, command: list[str | bytes | int]) -> asyncio.Future[object]:
        """Queue one ``XADD`` for this loop turn's pipeline; its future gets the server's answer
        (an entry id, or the error Redis answered for it), or the pipeline's failure."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[object] = loop.create_future()
        self._queued.append((command, answer))
        self._unanswered.add(answer)
        answer.add_done_callback(self._unanswered.discard)
        if self._flush_handle is None:
            self._flush_handle = loop.call_soon(self._flush)
        return answer

    def _flush(self) -> None:
        self._flush_handle = None
        queued, self._queued = self._queued, []
        for start in range(0, len(queued), MAX_PIPELINE):
            batch = queued[start : start + MAX_PIPELINE]
            pipeline = asyncio.ensure_future(self._send(batch))
            self._pipelines.add(pipeline)
            pipeline.add_done_callback(self._pipelines.discard)
            given_up = _GivenUp(pipeline, len(batch))
            for _, answer in batch:
                answer.add_done_callback(given_up)

    async def _send(self, batch: list[Queued]) -> None:
        batch = [(command, answer) for command, answer in batch if not answer.done()]  # not given up yet
        if not batch:
            return
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for command, _ in batch:
                    pipe.execute_command(*command)
                results = await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:  # every attempt gave up (see _GivenUp), or the transport is closing
            _fail(batch, ConnectionResetError("the transport was closed before Redis answered"))
            raise
        except Exception as failed:  # the connection: every XADD of the pipeline failed with it
            _fail(batch, failed)
            return
        for (_, answer), result in zip(batch, results, strict=True):
            if answer.done():
                continue
            if isinstance(result, Exception):
                answer.set_exception(result)
            else:
                answer.set_result(result)

    async def knows_idmp(self) -> bool:
        if self.idempotent is None:
            async with self._asking:
                if self.idempotent is None:
                    info = await self.client.info("server")
                    self.idempotent = has_idmp(str(info.get("redis_version", "0")))
        return self.idempotent

    @property
    def pending(self) -> int:
        return len(self._unanswered)

    async def close(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        queued, self._queued = self._queued, []
        _fail(queued, ConnectionResetError("the transport was closed before sending"))
        for pipeline in list(self._pipelines):
            pipeline.cancel()
        await asyncio.gather(*self._pipelines, return_exceptions=True)
        try:
            await self.client.aclose()
            await self.pool.aclose()
        except Exception as exc:  # a server already gone: nothing left to release
            logger.debug("closing a Redis pool failed: %s", type(exc).__name__)


class RedisStreamTransport(ConnectedBrokerTransport[RedisStreamTarget, ClientKey, _Server]):
    """Appends each attempt to a Redis stream with ``XADD`` (see the module docstring)."""

    protocols = frozenset({Protocol.REDIS_STREAM})

    async def _publish(self, request: CallbackRequest, target: Target, settings: RedisStreamTarget) -> None:
        credentials = target.credentials
        key = (settings.url, credentials.get("username", ""), credentials.get("password", ""))
        server = self._connection(key, functools.partial(_Server, key))
        await _xadd(server, request, settings)


async def _xadd(server: _Server, request: CallbackRequest, settings: RedisStreamTarget) -> None:
    """One ``XADD`` of ``request``, the server's refusals raised as what they mean."""
    try:
        idempotent = await server.knows_idmp()
        command = xadd_command(
            settings.stream,
            request.flow_id,
            orjson.dumps(dict(request.headers)),
            request.body or b"",
            settings.maxlen,
            idempotent,
        )
        await server.xadd(command)
    except AuthenticationError:
        raise BrokerRefused("Redis refused the credentials (WRONGPASS or NOAUTH)") from None
    except NoPermissionError:
        raise BrokerRefused(f"Redis user may not XADD to {settings.stream!r} (NOPERM)") from None
    except OutOfMemoryError:
        raise BrokerBusy("Redis is full (OOM: used memory > maxmemory)") from None
    except ResponseError as answer:
        text = _first_line(answer.args)
        if text.startswith("WRONGTYPE"):
            raise BrokerRefused(f"key {settings.stream!r} holds something else than a stream (WRONGTYPE)") from None
        raise BrokerBusy(f"Redis refused XADD: {text}") from None


class _GivenUp:
    """Cancels a pipeline once every attempt in it has given up (its deadline, or cancelled) before
    Redis answered: redis-py then closes the connection, whose answers no one waits for, instead of
    reading them with no deadline left (there is no socket timeout), so a server that stopped
    answering cannot hold the pool's connections for good."""

    def __init__(self, pipeline: asyncio.Task[None], attempts: int) -> None:
        self._pipeline = pipeline
        self._waiting = attempts

    def __call__(self, answer: asyncio.Future[object]) -> None:
        if not answer.cancelled():  # answered, or failed with the pipeline
            return
        self._waiting -= 1
        if self._waiting == 0:
            self._pipeline.cancel()


def _fail(batch: list[Queued], error: Exception) -> None:
    for _, answer in batch:
        if not answer.done():
            answer.set_exception(error)


def _first_line(args: Sequence[object]) -> str:
    text = str(args[0]) if args else "error"
    return text.splitlines()[0] if text else "error"
