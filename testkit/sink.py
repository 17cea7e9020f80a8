"""The bench's callback sink: a separate process that records every callback and answers 204.

Its HTTP server is a lean llhttp one (:mod:`testkit.sink_http`, ``SinkConfig.server="lean"``, the
default) or aiohttp's (``"aiohttp"``, what every bench used before 2026-11-29: about 2.5 times the CPU
per callback, docs/benchmarks.md); both serve the same routes through :class:`CallbackRecorder`.

It runs as ``python -m testkit.sink`` so it never shares the GIL with the registering client. The
parent (:class:`SinkProcess`) writes one JSON config line to the child's stdin, reads the bound port from
its first stdout line, and stops it by closing stdin (so a dead parent never leaves a sink behind).

For every callback the sink stores six integers: receive time (epoch µs), ``tjobs-task-id``,
``tjobs-scheduled-at`` (epoch ms), the index of its ``webhook-id`` among the distinct ids seen (so equal
flow ids compare as equal ints), ``tjobs-attempt``, and the index of its ``tjobs-executor-id`` (a pool
callback's executor) among the distinct executor ids seen, -1 without one; the executor ids come with
the records, in index order. ``GET /_stats`` returns counts as JSON;
``GET /_records`` returns the arrays as one compact binary blob (:meth:`CallbackRecords.to_bytes`).
Signatures are verified, with the ``standardwebhooks`` library, for every ``verify_every``-th callback
when the app's secrets are given (off by default: verification costs CPU the node needs).

With ``consume`` (a consumer spec, :func:`testkit.consumers.consumer_from_spec`) the sink also
reads a broker destination or serves gRPC ``Receiver.Fire``, and records each message exactly as an
HTTP callback (receive time = when the consumer got it); the first stdout line then also carries the
consumer's ``address`` (:attr:`SinkProcess.consumer_address`), where a gRPC target must point.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import ClientSession, ClientTimeout, web

from testkit import sink_http
from testkit.children import checkout_env

if TYPE_CHECKING:
    from testkit.consumers import Consumed

CALLBACK_PATH = "/cb"
_COLUMNS = ("recv_us", "task_id", "scheduled_ms", "flow", "attempt", "executor")
_MAGIC = b"TJBR2"
NO_EXECUTOR = -1  # the executor index of a callback without tjobs-executor-id
SINK_SERVERS = ("lean", "aiohttp")


@dataclass
class CallbackRecords:
    """One row per callback received, as parallel arrays of signed 64-bit ints (48 bytes a row), and the
    executor ids the ``executor`` column indexes."""

    recv_us: array[int] = field(default_factory=lambda: array("q"))
    task_id: array[int] = field(default_factory=lambda: array("q"))
    scheduled_ms: array[int] = field(default_factory=lambda: array("q"))
    flow: array[int] = field(default_factory=lambda: array("q"))
    attempt: array[int] = field(default_factory=lambda: array("q"))
    executor: array[int] = field(default_factory=lambda: array("q"))
    executor_ids: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.recv_us)

    def append(
        self, recv_us: int, task_id: int, scheduled_ms: int, flow: int, attempt: int, executor: int = NO_EXECUTOR
    ) -> None:
        self.recv_us.append(recv_us)
        self.task_id.append(task_id)
        self.scheduled_ms.append(scheduled_ms)
        self.flow.append(flow)
        self.attempt.append(attempt)
        self.executor.append(executor)

    def to_bytes(self) -> bytes:
        count = len(self).to_bytes(8, "little")
        executor_ids = orjson.dumps(self.executor_ids)
        columns = (getattr(self, name).tobytes() for name in _COLUMNS)
        return b"".join([_MAGIC, count, len(executor_ids).to_bytes(8, "little"), *columns, executor_ids])

    @classmethod
    def from_bytes(cls, blob: bytes) -> CallbackRecords:
        if not blob.startswith(_MAGIC):
            raise ValueError("not a callback-records blob")
        count = int.from_bytes(blob[len(_MAGIC) : len(_MAGIC) + 8], "little")
        ids_length = int.from_bytes(blob[len(_MAGIC) + 8 : len(_MAGIC) + 16], "little")
        offset = len(_MAGIC) + 16
        width = array("q").itemsize * count
        if len(blob) != offset + width * len(_COLUMNS) + ids_length:
            raise ValueError(f"callback-records blob of {len(blob)} bytes does not hold {count} rows")
        executor_ids = orjson.loads(blob[offset + width * len(_COLUMNS) :])
        records = cls(executor_ids=[str(executor_id) for executor_id in executor_ids])
        for name in _COLUMNS:
            getattr(records, name).frombytes(blob[offset : offset + width])
            offset += width
        return records


@dataclass(frozen=True)
class SinkConfig:
    host: str = "127.0.0.1"
    port: int = 0
    secrets: tuple[str, ...] = ()
    verify_every: int = 0  # verify the signature of every n-th callback; 0 = never
    consume: Mapping[str, Any] | None = None  # a consumer spec (testkit.consumers.consumer_from_spec)
    server: str = "lean"  # the HTTP server: "lean" (testkit.sink_http) or "aiohttp" (the first one)

    def __post_init__(self) -> None:
        if self.server not in SINK_SERVERS:
            raise ValueError(f"sink server must be one of {', '.join(SINK_SERVERS)}, not {self.server!r}")

    def to_json(self) -> bytes:
        fields = {"host": self.host, "port": self.port, "secrets": list(self.secrets), "server": self.server}
        consume = dict(self.consume) if self.consume is not None else None
        return orjson.dumps({**fields, "verify_every": self.verify_every, "consume": consume})

    @classmethod
    def from_json(cls, raw: bytes) -> SinkConfig:
        data = orjson.loads(raw)
        secrets, verify_every = tuple(data["secrets"]), int(data["verify_every"])
        return cls(data["host"], int(data["port"]), secrets, verify_every, data.get("consume"), data["server"])


@dataclass(frozen=True)
class SinkStats:
    received: int  # callbacks recorded
    flows: int  # distinct webhook-ids among them
    tasks: int  # distinct tjobs-task-ids among them
    malformed: int  # callbacks without parsable tjobs headers (answered, not recorded)
    signatures_checked: int
    signatures_failed: int
    cpu_ms: int  # CPU time (user + system) the sink has used since it started listening

    @classmethod
    def from_json(cls, raw: bytes) -> SinkStats:
        data = orjson.loads(raw)
        return cls(**{name: int(data[name]) for name in cls.__dataclass_fields__})


class CallbackRecorder:
    """The sink's state, what both servers record through, and its aiohttp handlers (usable in-process too)."""

    def __init__(self, secrets: Sequence[str] = (), verify_every: int = 0) -> None:
        self.records = CallbackRecords()
        self._cpu_start_s = time.process_time()  # after the imports: count the serving, not the start-up
        self._flow_index: dict[str, int] = {}
        self._executor_index: dict[str, int] = {}
        self._tasks: set[int] = set()
        self.malformed = 0
        self.signatures_checked = 0
        self.signatures_failed = 0
        self._verify_every = verify_every if secrets else 0
        self._webhooks: list[Any] = []
        self._verification_error: type[Exception] = ValueError
        if self._verify_every:
            from standardwebhooks.webhooks import Webhook, WebhookVerificationError

            self._webhooks = [Webhook(secret) for secret in secrets]
            self._verification_error = WebhookVerificationError

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_route("*", CALLBACK_PATH, self.callback)
        app.router.add_route("*", CALLBACK_PATH + "/{tail:.*}", self.callback)
        app.router.add_get("/_stats", self.stats)
        app.router.add_get("/_records", self.dump)
        return app

    async def callback(self, request: web.Request) -> web.Response:
        if self.record(time.time_ns() // 1000, request.headers):
            self.check_signature(dict(request.headers), await request.read())
        return web.Response(status=204)

    def consumed(self, message: Consumed) -> None:
        """Record a message a consumer got (``consume``), as :meth:`callback` records a callback."""
        if self.record(message.received_us, message.headers):
            self.check_signature(message.headers, message.body)

    def record(self, recv_us: int, headers: Mapping[str, str]) -> bool:
        """Record one callback or message by its tjobs headers; returns whether its signature is due for a
        check (every ``verify_every``-th)."""
        try:
            task_id = int(headers["tjobs-task-id"])
            scheduled_ms = int(headers["tjobs-scheduled-at"])
            attempt = int(headers.get("tjobs-attempt", "1"))
            flow_id = headers["webhook-id"]
        except (KeyError, ValueError):
            self.malformed += 1
            return False
        flow = self._flow_index.setdefault(flow_id, len(self._flow_index))
        executor = NO_EXECUTOR
        executor_id = headers.get("tjobs-executor-id")
        if executor_id is not None:
            executor = self._executor_index.get(executor_id, NO_EXECUTOR)
            if executor == NO_EXECUTOR:
                executor = self._executor_index[executor_id] = len(self.records.executor_ids)
                self.records.executor_ids.append(executor_id)
        self._tasks.add(task_id)
        self.records.append(recv_us, task_id, scheduled_ms, flow, attempt, executor)
        return bool(self._verify_every) and len(self.records) % self._verify_every == 1 % self._verify_every

    def check_signature(self, headers: Mapping[str, str], body: bytes) -> None:
        self.signatures_checked += 1
        for webhook in self._webhooks:
            try:
                webhook.verify(body, headers, json_parse=False)
            except (self._verification_error, ValueError):  # ValueError: a body that is not UTF-8
                continue
            return
        self.signatures_failed += 1

    def current_stats(self) -> SinkStats:
        return SinkStats(
            received=len(self.records),
            flows=len(self._flow_index),
            tasks=len(self._tasks),
            malformed=self.malformed,
            signatures_checked=self.signatures_checked,
            signatures_failed=self.signatures_failed,
            cpu_ms=round((time.process_time() - self._cpu_start_s) * 1000),
        )

    async def stats(self, request: web.Request) -> web.Response:
        stats = self.current_stats()
        return web.Response(body=orjson.dumps(stats.__dict__), content_type="application/json")

    async def dump(self, request: web.Request) -> web.Response:
        return web.Response(body=self.records.to_bytes(), content_type="application/octet-stream")


# ---- the child process ---------------------------------------------------------------------------


async def _serve(config: SinkConfig) -> None:
    recorder = CallbackRecorder(config.secrets, config.verify_every)
    runner: web.AppRunner | None = None
    server: asyncio.Server | None = None
    if config.server == "aiohttp":
        runner = web.AppRunner(recorder.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, config.host, config.port, backlog=1024)
        await site.start()
        port = runner.addresses[0][1]
    else:
        server = await sink_http.serve(recorder, config.host, config.port)
        port = server.sockets[0].getsockname()[1]
    consumer = None
    if config.consume is not None:
        from testkit.consumers import consumer_from_spec

        consumer = consumer_from_spec(config.consume)
        await consumer.start(recorder.consumed)
    address = consumer.address if consumer is not None else ""
    sys.stdout.write(orjson.dumps({"port": port, "consumer": address}).decode() + "\n")
    sys.stdout.flush()

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    stdin = sys.stdin.fileno()
    os.set_blocking(stdin, False)

    def on_stdin() -> None:  # the parent closes our stdin to stop us (or dies)
        try:
            chunk = os.read(stdin, 4096)
        except BlockingIOError:
            return
        if not chunk:
            loop.remove_reader(stdin)
            stop.set()

    loop.add_reader(stdin, on_stdin)
    try:
        await stop.wait()
    finally:
        if consumer is not None:
            await consumer.stop()
        if runner is not None:
            await runner.cleanup()
        if server is not None:
            server.close()


def main() -> None:
    config = SinkConfig.from_json(sys.stdin.buffer.readline())
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        asyncio.run(_serve(config))
    else:
        uvloop.run(_serve(config))


# ---- the parent's handle -------------------------------------------------------------------------


class SinkProcess:
    """Start the sink in a child process; ``async with SinkProcess(...) as sink`` gives its URLs."""

    def __init__(self, config: SinkConfig | None = None, *, start_timeout_s: float = 20.0) -> None:
        self.config = config or SinkConfig()
        self._start_timeout_s = start_timeout_s
        self._process: asyncio.subprocess.Process | None = None
        self._session: ClientSession | None = None
        self.port = 0
        self.consumer_address = ""  # with ``consume``: where the consumer serves, for a gRPC target

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def callback_url(self) -> str:
        return self.base_url + CALLBACK_PATH

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "testkit.sink",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=checkout_env(),
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(self.config.to_json() + b"\n")
        await self._process.stdin.drain()
        try:
            line = await asyncio.wait_for(self._process.stdout.readline(), self._start_timeout_s)
        except TimeoutError:
            await self.stop()
            raise RuntimeError(f"the callback sink did not start within {self._start_timeout_s} s") from None
        if not line:
            code = await self._process.wait()
            self._process = None
            raise RuntimeError(f"the callback sink exited with code {code} before listening")
        started = orjson.loads(line)
        self.port = int(started["port"])
        self.consumer_address = str(started.get("consumer", ""))
        self._session = ClientSession(timeout=ClientTimeout(total=60))

    async def stats(self) -> SinkStats:
        async with self._client().get(self.base_url + "/_stats") as response:
            response.raise_for_status()
            return SinkStats.from_json(await response.read())

    async def records(self) -> CallbackRecords:
        async with self._client().get(self.base_url + "/_records") as response:
            response.raise_for_status()
            return CallbackRecords.from_bytes(await response.read())

    def _client(self) -> ClientSession:
        if self._session is None:
            raise RuntimeError("the sink is not started")
        return self._session

    async def stop(self, timeout_s: float = 5.0) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the sink exits at EOF on its stdin
        try:
            await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def __aenter__(self) -> SinkProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


if __name__ == "__main__":
    main()
