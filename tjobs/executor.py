"""The executor helper: a service instance joins an executor pool and runs the jobs tjobs routes to it.

A few lines in an ASGI (FastAPI, Starlette) or aiohttp service::

    from tjobs.executor import Executor, Job

    executor = Executor("http://tjobs:8080", api_key, pool="cache-refresh",
                        address="http://10.0.0.7:9001/tjobs/", signing_secrets=[secret], zone="eu-1")

    @executor.handler("/refresh")            # a task's callback.pool.path; "/" takes the rest
    async def refresh(job: Job) -> None:     # raise to have tjobs retry it (or fail over)
        print(job.flow_id, job.shard_index, job.payload)

    app = FastAPI(lifespan=executor.lifespan)        # registers at start-up, deregisters at shutdown
    app.mount("/tjobs", executor.asgi_app())         # (a mount takes /tjobs/...: the address ends in /)
    # aiohttp: executor.setup_aiohttp(app, prefix="/tjobs")

While it runs it renews its lease every third of ``ttl_s`` (registering again when tjobs says it is not
registered any more, after an outage longer than the TTL), and on shutdown it deregisters, so the pool
stops routing to it at once instead of after its TTL.

Every callback is verified (Standard Webhooks signature and freshness, :func:`tjobs.client.verify`;
``401`` otherwise), deduplicated on its ``webhook-id`` plus its shard index (a retry of a job this
instance already ran answers ``200`` without running it again; the memory of the last
``dedupe_max`` jobs is the instance's, so a job retried on another instance after a failover runs
there), and handed to the handler of its path: ``200`` when it returns, ``500`` when it raises (tjobs
retries, on another executor for ``one``), ``404`` when no handler takes the path. A handler runs
within the request.

A long job is a *run* (README "Job runs"): ``@executor.handler("/export", run=True)`` answers ``202``
with ``tjobs-run: accepted`` at once and runs the handler in the background, with ``job.run`` (a
:class:`Run`) to report progress and log lines; the handler's return value is the run's result (JSON)
and a raise fails the run (retried by the task's policy). ``job.run.cancelled`` (an ``asyncio.Event``)
is set when someone cancels the run: the helper learns it from the answer to each report, and reports
every ``run_heartbeat_s`` while the handler runs. Once a cancel was asked, the run ends ``cancelled``
when its handler returns or raises. The HTTP contract behind it is in docs/targets.md, "Runs".

Depends on httpx and :mod:`tjobs.client` only (never on the server's modules); aiohttp only if used.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from tjobs.client.errors import WebhookVerificationError
from tjobs.client.webhooks import verify

logger = logging.getLogger(__name__)

Handler = Callable[["Job"], Awaitable[Any]]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
DEDUPE_MAX = 10_000
RUN_ACCEPTED_STATUS = 202  # answered with tjobs-run: accepted (docs/targets.md, "Runs")


@dataclass(frozen=True, slots=True)
class Job:
    """One verified callback: what tjobs says about the fire, and what the task carries."""

    flow_id: str  # the idempotency key (with shard_index for a sharded route)
    task_id: str | None
    scheduled_at_ms: int | None
    attempt: int | None
    executor_id: str | None
    shard_index: int | None
    shard_total: int | None
    shard_param: str | None
    path: str
    payload: Any  # the envelope's payload, or the task's raw body as text
    body: bytes
    headers: Mapping[str, str]
    run: Run | None = None  # a run handler's job: its reports, log and cancellation


class Run:
    """The executor's side of one run: :meth:`progress` and :meth:`log` report to tjobs; ``cancelled`` is
    set once tjobs answers a report with ``cancel_requested``, or answers a progress report ``409`` (the
    run is over for tjobs: it timed out, or another attempt runs): stop, then return or raise."""

    def __init__(self, http: httpx.AsyncClient, flow_id: str, attempt: int | None) -> None:
        self.flow_id = flow_id
        self.attempt = attempt
        self.cancelled = asyncio.Event()
        self._http = http
        self._progress: int | str | None = None

    async def progress(self, value: int | str) -> None:
        """Report progress (0..100 or a short text); also a heartbeat that learns of a cancel."""
        self._progress = value
        await self.report("running")

    async def log(self, *lines: str) -> None:
        """Append log lines to the run (kept with its flow; the server caps them)."""
        body: dict[str, Any] = {"lines": list(lines)}
        if self.attempt is not None:
            body["attempt"] = self.attempt
        answer = await self._http.post(f"/v1/flows/{self.flow_id}/log", json=body)
        if answer.status_code != 200:
            logger.warning("run log of %s answered %d: %s", self.flow_id, answer.status_code, answer.text[:200])

    async def report(self, status: str, *, result: Any = None, message: str | None = None) -> int:
        """Report ``running``, ``succeeded`` (with ``result``) or ``failed``; retried on a transport error or
        a 5xx (a repeated final report changes nothing). The answer's status code (409: the run is over)."""
        body: dict[str, Any] = {"status": status}
        if self.attempt is not None:
            body["attempt"] = self.attempt
        if self._progress is not None:
            body["progress"] = self._progress
        if result is not None:
            body["result"] = result
        if message is not None:
            body["message"] = message[:1000]
        for wait_s in (0.2, 1.0, 3.0, None):
            try:
                answer = await self._http.post(f"/v1/flows/{self.flow_id}/report", json=body)
            except httpx.HTTPError as error:
                logger.warning("run report of %s failed (%s)", self.flow_id, error)
            else:
                if answer.status_code < 500:
                    if answer.status_code == 200 and answer.json().get("cancel_requested"):
                        self.cancelled.set()
                    elif answer.status_code == 409 and status == "running":
                        self.cancelled.set()  # the run is over for tjobs (timed out, another attempt): stop
                    elif answer.status_code != 200:
                        logger.warning(
                            "run report of %s answered %d: %s", self.flow_id, answer.status_code, answer.text[:200]
                        )
                    return answer.status_code
            if wait_s is None:
                break
            await asyncio.sleep(wait_s)
        return 0


class Executor:
    def __init__(
        self,
        tjobs_url: str,
        api_key: str,
        *,
        pool: str,
        address: str,
        signing_secrets: Sequence[str],
        executor_id: str | None = None,
        zone: str = "",
        weight: int = 1,
        capacity: int | None = None,
        ttl_s: int = 10,
        dedupe_max: int = DEDUPE_MAX,
        http: httpx.AsyncClient | None = None,
        run_heartbeat_s: float = 10.0,
    ) -> None:
        if not signing_secrets:
            raise ValueError("signing_secrets: the app's signing secret(s) are needed to verify callbacks")
        self.pool = pool
        self.address = address
        self.zone = zone
        self.ttl_s = ttl_s
        self.executor_id = executor_id
        self._registration: dict[str, Any] = {"address": address, "zone": zone, "weight": weight, "ttl_s": ttl_s}
        if executor_id is not None:
            self._registration["id"] = executor_id
        if capacity is not None:
            self._registration["capacity"] = capacity
        self._secrets = list(signing_secrets)
        self._http = http or httpx.AsyncClient(
            base_url=tjobs_url.rstrip("/"), headers={"authorization": f"Bearer {api_key}"}, timeout=5.0
        )
        self._handlers: dict[str, Handler] = {}
        self._run_paths: set[str] = set()  # handlers that run as job runs
        self._runs: set[asyncio.Task[None]] = set()
        self._run_heartbeat_s = run_heartbeat_s
        self._done: OrderedDict[tuple[str, int | None, int | None], None] = OrderedDict()
        self._dedupe_max = dedupe_max
        self._heartbeats: asyncio.Task[None] | None = None
        self.jobs_run = 0

    # ---- handlers ----------------------------------------------------------------------------------

    def handler(self, path: str = "/", *, run: bool = False) -> Callable[[Handler], Handler]:
        """Register the handler of callbacks to ``path`` (a pool route's ``path``); ``"/"`` takes any
        path no other handler takes. ``run``: each callback is a job run (answered ``202`` at once, the
        handler run in the background with ``job.run``; see the module docstring)."""
        if not path.startswith("/"):
            raise ValueError("a handler path starts with '/'")

        def register(handle: Handler) -> Handler:
            key = path.rstrip("/") or "/"
            self._handlers[key] = handle
            if run:
                self._run_paths.add(key)
            else:
                self._run_paths.discard(key)
            return handle

        return register

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register into the pool, then keep the lease alive in the background."""
        await self.register()
        self._heartbeats = asyncio.create_task(self._beat(), name="tjobs-executor-heartbeat")

    async def stop(self) -> None:
        """Stop the heartbeats and deregister (the pool stops routing here at once). Runs still going are
        cancelled: each reports failed (the task's policy retries it elsewhere)."""
        for running in list(self._runs):
            running.cancel()
        if self._runs:
            await asyncio.gather(*self._runs, return_exceptions=True)
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
            self._heartbeats = None
        if self.executor_id is not None:
            try:
                answer = await self._http.delete(f"/v1/pools/{self.pool}/executors/{self.executor_id}")
                if answer.status_code not in (204, 404):
                    logger.warning("deregistering answered %d: %s", answer.status_code, answer.text[:200])
            except httpx.HTTPError as error:
                logger.warning("could not deregister (%s); the pool drops it after its TTL", error)
        await self._http.aclose()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """A lifespan for FastAPI/Starlette (``FastAPI(lifespan=executor.lifespan)``)."""
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def register(self) -> None:
        answer = await self._http.post(f"/v1/pools/{self.pool}/executors", json=self._registration)
        if answer.status_code not in (200, 201):
            raise RuntimeError(f"registering into pool {self.pool!r} failed: {answer.status_code} {answer.text[:300]}")
        self.executor_id = str(answer.json()["id"])
        logger.info("registered into pool %s as %s", self.pool, self.executor_id)

    async def _beat(self) -> None:
        interval_s = max(self.ttl_s / 3, 0.5)
        while True:
            await asyncio.sleep(interval_s)
            try:
                answer = await self._http.put(f"/v1/pools/{self.pool}/executors/{self.executor_id}/heartbeat")
                if answer.status_code == 404:  # the lease ended (an outage longer than the TTL): join again
                    await self.register()
                elif answer.status_code != 200:
                    logger.warning("heartbeat answered %d: %s", answer.status_code, answer.text[:200])
            except (httpx.HTTPError, RuntimeError) as error:
                logger.warning("heartbeat failed (%s); retrying", error)

    # ---- callbacks ---------------------------------------------------------------------------------

    async def dispatch(self, path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, bytes]:
        """Verify, deduplicate and run one callback: the status and body to answer."""
        try:
            callback = verify(body, headers, self._secrets)
        except WebhookVerificationError as error:
            return 401, str(error).encode()
        lowered = {name.lower(): value for name, value in headers.items()}
        shard_index = _int(lowered.get("tjobs-shard-index"))
        key = path.rstrip("/") or "/"
        handle = self._handlers.get(key)
        if handle is None:
            key, handle = "/", self._handlers.get("/")
        runs = key in self._run_paths
        # a run is kept apart per attempt: a new attempt comes after the last one failed or timed out
        done_key = (callback.flow_id, shard_index, callback.attempt if runs else None)
        if done_key in self._done:
            return (202, b"already accepted") if runs else (200, b"already done")
        if handle is None:
            return 404, f"no handler for {path}".encode()
        job = Job(
            callback.flow_id,
            callback.task_id,
            callback.scheduled_at_ms,
            callback.attempt,
            lowered.get("tjobs-executor-id"),
            shard_index,
            _int(lowered.get("tjobs-shard-total")),
            lowered.get("tjobs-shard-param"),
            path,
            _payload(body),
            body,
            lowered,
        )
        if runs:
            run = Run(self._http, callback.flow_id, callback.attempt)
            started = asyncio.create_task(
                self._run(handle, replace(job, run=run), run), name=f"tjobs-run-{job.flow_id}"
            )
            self._runs.add(started)
            started.add_done_callback(self._runs.discard)
            self._remember(done_key)
            return 202, b"accepted"
        try:
            await handle(job)
        except Exception as error:
            logger.exception("job %s failed", callback.flow_id)
            return 500, f"{type(error).__name__}".encode()
        self.jobs_run += 1
        self._remember(done_key)
        return 200, b"ok"

    def _remember(self, done_key: tuple[str, int | None, int | None]) -> None:
        self._done[done_key] = None
        while len(self._done) > self._dedupe_max:
            self._done.popitem(last=False)

    async def _run(self, handle: Handler, job: Job, run: Run) -> None:
        """One run in the background: heartbeats while the handler runs, then its final report."""
        beats = asyncio.create_task(self._run_heartbeats(run))
        try:
            result = await handle(job)
        except asyncio.CancelledError:
            await run.report("failed", message="the executor stopped")
            raise
        except Exception as error:
            if run.cancelled.is_set():
                await run.report("failed", message=f"cancelled: {type(error).__name__}: {error}")
            else:
                logger.exception("run %s failed", job.flow_id)
                await run.report("failed", message=f"{type(error).__name__}: {error}")
        else:
            self.jobs_run += 1
            if run.cancelled.is_set():  # it stopped on the cancel: the run ends cancelled
                await run.report("failed", message="cancelled")
            else:
                await run.report("succeeded", result=result)
        finally:
            beats.cancel()

    async def _run_heartbeats(self, run: Run) -> None:
        while True:
            await asyncio.sleep(self._run_heartbeat_s)
            await run.report("running")

    def asgi_app(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        """A plain ASGI app taking callbacks (mount it, or serve it alone: it answers lifespan events
        by starting and stopping the executor)."""

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "lifespan":
                await self._lifespan(receive, send)
                return
            if scope["type"] != "http":
                return
            if scope["method"] != "POST":
                await _answer(send, 405, b"POST only")
                return
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
            path, root = scope["path"], scope.get("root_path", "")
            if root and path.startswith(root):  # mounted: the path below the mount point
                path = path[len(root) :] or "/"
            status, answer = await self.dispatch(path, headers, b"".join(chunks))
            await _answer(send, status, answer)

        return app

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as error:
                    await send({"type": "lifespan.startup.failed", "message": str(error)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def setup_aiohttp(self, app: Any, prefix: str = "") -> None:
        """Take callbacks under ``prefix`` of an ``aiohttp.web.Application``, and start and stop with it."""
        from aiohttp import web

        async def take(request: web.Request) -> web.Response:
            path = request.path[len(prefix) :] or "/"
            status, answer = await self.dispatch(path, request.headers, await request.read())
            headers = {"tjobs-run": "accepted"} if status == RUN_ACCEPTED_STATUS else None
            return web.Response(status=status, body=answer, headers=headers)

        async def on_startup(_: web.Application) -> None:
            await self.start()

        async def on_cleanup(_: web.Application) -> None:
            await self.stop()

        if prefix:
            app.router.add_post(prefix, take)
        app.router.add_post(prefix + "/{tail:.*}", take)
        app.on_startup.append(on_startup)
        app.on_cleanup.append(on_cleanup)


async def _answer(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain")]
    if status == RUN_ACCEPTED_STATUS:
        headers.append((b"tjobs-run", b"accepted"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def _payload(body: bytes) -> Any:
    """The envelope's ``payload`` (tjobs' default body), else the body as JSON, else as text."""
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        return body.decode(errors="replace")
    if isinstance(parsed, dict) and "flow_id" in parsed and "payload" in parsed:
        return parsed["payload"]
    return parsed
